package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/inproc"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

//go:embed assets
var assets embed.FS

// Options configure New.
type Options struct {
	// API serves the daemon's whole handler: the dashboard's calls go to
	// it in process, with the session's token, so the API (and, in a
	// cluster, its forwarding) decides what a call may see or do.
	// Required.
	API http.Handler
	// APIHost is the Host those calls carry: the daemon's listen address,
	// which routes to the API (never to a sandbox's preview or custom
	// domain). Required.
	APIHost string
	// Authenticate checks a token typed into the login form. Required.
	Authenticate func(ctx context.Context, token string) (auth.Principal, error)
	// Terminal names the API route of a sandbox's terminal (the daemon
	// gives the Daytona facade's, daytona.TerminalRoute): connect is the
	// path and query of a WebSocket that creates terminal tid of sandbox
	// id and attaches to it, header what it must carry besides the token,
	// remove the path whose DELETE ends the terminal. Nil: no terminal.
	Terminal func(id, tid string, cols, rows int, env map[string]string) (connect string, header http.Header, remove string)
	// TerminalResize names the API route whose POST {cols, rows}
	// resizes terminal tid of sandbox id (daytona.TerminalResizeRoute).
	// Nil: terminals keep the size they opened with.
	TerminalResize func(id, tid string) string
	// TCPHost is the host raw TCP exposures listen on (--tcp-host): the
	// dashboard is not served there over plain HTTP, nor on a loopback
	// name of the same address (localhost for 127.0.0.1 or ::1), since a
	// browser sends a host's cookies to every port of it, and a raw TCP
	// exposure passes them to the sandbox untouched. Over TLS it is (the
	// cookie is Secure: a browser sends it to an exposure's port only
	// over TLS, which the sandbox cannot complete for the name). Empty:
	// none.
	TCPHost string
	// Version is shown in the footer and the SDK's User-Agent.
	Version string
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Handler serves /ui/. Close it when the daemon stops.
type Handler struct {
	api          http.Handler
	base         string // the in-process API's base URL
	termRoute    func(id, tid string, cols, rows int, env map[string]string) (string, http.Header, string)
	termResize   func(id, tid string) string
	tcpHost      string
	usageSlots   *fairSlots
	flights      usageFlights
	authenticate func(context.Context, string) (auth.Principal, error)
	version      string
	logger       *slog.Logger
	sessions     *sessions
	now          func() time.Time
	pages        map[string]*template.Template
	static       http.Handler
	mux          *http.ServeMux

	// life is the dashboard's own context, ended by Close: the calls
	// that outlive one request (a shared usage sample) run under it.
	life    context.Context
	endLife context.CancelFunc

	self *inproc.Listener
	srv  *http.Server
	hc   *http.Client
	done chan struct{}
}

// New returns the dashboard's handler and starts the in-process server
// that carries its calls to opts.API.
func New(opts Options) (*Handler, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	h := &Handler{
		api:          opts.API,
		base:         "http://" + opts.APIHost,
		termRoute:    opts.Terminal,
		termResize:   opts.TerminalResize,
		tcpHost:      opts.TCPHost,
		usageSlots:   newFairSlots(maxUsageCalls, maxUsageCallsPerOwner),
		flights:      usageFlights{m: map[usageKey]*usageFlight{}},
		authenticate: opts.Authenticate,
		version:      opts.Version,
		logger:       logger,
		sessions:     newSessions(now),
		now:          now,
		pages:        pages,
		static:       http.StripPrefix("/ui/static/", http.FileServerFS(static)),
		self:         inproc.NewListener(),
		done:         make(chan struct{}),
	}
	h.life, h.endLife = context.WithCancel(context.Background())
	h.srv = &http.Server{
		Handler:           opts.API,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(h.done)
		_ = h.srv.Serve(h.self) // ends with Close
	}()
	h.hc = &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return h.self.Dial(ctx) },
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
	h.mux = h.routes()
	return h, nil
}

// Close stops the in-process server, ending calls still in flight.
func (h *Handler) Close() error {
	h.endLife()
	err := h.srv.Close()
	<-h.done
	return err
}

// Match reports whether r is the dashboard's: / (redirected) and /ui[/…].
func Match(r *http.Request) bool {
	p := r.URL.Path
	return p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/")
}

// contentSecurityPolicy allows only the dashboard's own scripts, styles
// and connections (the terminal's WebSocket is same-origin): no inline
// script, no eval, no framing, forms post only to the dashboard.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP serves the dashboard, with its security headers on every
// answer.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin") // not no-referrer: with it, browsers send "Origin: null" on same-origin posts
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.TLS == nil && sameAddress(r.Host, h.tcpHost) {
		// A session cookie set here would reach every raw TCP exposure,
		// whose ports share this host. (Over TLS it would not: the
		// cookie is Secure, so a browser sends it to an exposure's port
		// only over TLS, where the sandbox cannot show a certificate
		// for the name.)
		h.fail(w, r, nil, http.StatusMisdirectedRequest, "The dashboard is not served over plain HTTP on the host raw TCP exposures listen on (--tcp-host): a browser would send them its session cookie. Open it at another address of the daemon's API, or over TLS.")
		return
	}
	if loopbackOnly(r) {
		// Plain HTTP naming a loopback host from another machine: no
		// browser sends that (a replayed cookie does), and no session
		// may be opened or used by it.
		h.fail(w, r, nil, http.StatusForbidden, "The dashboard on a loopback host answers clients on this machine only.")
		return
	}
	if r.URL.Path == "/" || r.URL.Path == "/ui" {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
		hd.Set("Cache-Control", "no-store")
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", h.static)
	mux.HandleFunc("GET /ui/login", h.loginPage)
	mux.HandleFunc("POST /ui/login", h.login)
	mux.HandleFunc("POST /ui/logout", h.withSession(true, h.logout))
	mux.HandleFunc("GET /ui/{$}", h.withSession(false, h.sandboxesPage))
	mux.HandleFunc("POST /ui/sandboxes", h.withSession(true, h.createSandbox))
	mux.HandleFunc("GET /ui/sandbox/{id}", h.withSession(false, h.sandboxPage))
	mux.HandleFunc("POST /ui/sandbox/{id}/destroy", h.withSession(true, h.destroySandbox))
	mux.HandleFunc("POST /ui/sandbox/{id}/stop", h.withSession(true, h.lifecycle((*sandboxd.Client).StopSandbox)))
	mux.HandleFunc("POST /ui/sandbox/{id}/start", h.withSession(true, h.lifecycle((*sandboxd.Client).StartSandbox)))
	mux.HandleFunc("POST /ui/sandbox/{id}/upload", h.withSession(true, h.upload))
	mux.HandleFunc("GET /ui/sandbox/{id}/download", h.withSession(false, h.download))
	mux.HandleFunc("POST /ui/sandbox/{id}/ports", h.withSession(true, h.exposePort))
	mux.HandleFunc("GET /ui/sandbox/{id}/terminal", h.withSession(false, h.terminal))
	mux.HandleFunc("POST /ui/sandbox/{id}/terminal/resize", h.withSession(true, h.resizeTerminal))
	mux.HandleFunc("GET /ui/sandbox/{id}/logs", h.withSession(false, h.logs))
	mux.HandleFunc("GET /ui/usage", h.withSession(false, h.usage))
	mux.HandleFunc("GET /ui/templates", h.withSession(false, h.templatesPage))
	mux.HandleFunc("GET /ui/templates/{id}/logs", h.withSession(false, h.templateLogs))
	mux.HandleFunc("GET /ui/pools", h.withSession(false, h.poolsPage))
	mux.HandleFunc("GET /ui/nodes", h.withSession(false, h.nodesPage))
	mux.HandleFunc("GET /ui/tokens", h.withSession(false, h.tokensPage))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, nil, http.StatusNotFound, "No such page.")
	})
	return mux
}

// request is what a handler behind withSession gets: the session, its
// cookie value and an API client carrying its token.
type request struct {
	sess   *session
	cookie string
	api    *sandboxd.Client
	// parts is a multipart body's reader past its "csrf" part.
	parts *multipart.Reader
}

// withSession admits a request only with a live session; a page without
// one is redirected to the login. A mutating route (mutating) also
// needs the session's CSRF token (form field "csrf" or header
// X-CSRF-Token) and a same-origin request.
func (h *Handler) withSession(mutating bool, fn func(http.ResponseWriter, *http.Request, request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var sess *session
		var parts *multipart.Reader
		c, ok := onlyCookie(r)
		if ok {
			sess = h.sessions.get(c.Value)
		}
		if sess != nil && !sess.opened.admits(r) {
			// The cookie came with another Host, scheme or kind of
			// client than its session was opened with: a copy that
			// leaked. It opens nothing here (the session itself stays,
			// so that a thief cannot log its owner out).
			sess = nil
		}
		if sess == nil {
			if mutating {
				h.fail(w, r, nil, http.StatusUnauthorized, "Your session has ended: log in again.")
				return
			}
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		if mutating {
			if !sameOrigin(r) {
				h.fail(w, r, sess, http.StatusForbidden, "Cross-origin request refused.")
				return
			}
			got := r.Header.Get("X-CSRF-Token")
			if got == "" {
				got, parts = csrfField(r)
			}
			if !sess.checkCSRF(got) {
				h.fail(w, r, sess, http.StatusForbidden, "Missing or invalid CSRF token: reload the page and try again.")
				return
			}
		}
		api := sandboxd.New(h.base, sess.token, sandboxd.WithHTTPClient(h.hc),
			sandboxd.WithUserAgent("sandboxd-ui/"+h.version))
		fn(w, r, request{sess: sess, cookie: c.Value, api: api, parts: parts})
	}
}

// onlyCookie returns the request's session cookie when it carries exactly
// one of the name its scheme and host use (sessionCookie): the __Host-
// cookie in a secure context, which no other host can set, else
// httpCookieName. Several of the latter mean that a page of a sibling
// host (a sandbox's preview on *.example beside a dashboard on example,
// which share a site) set one for the parent domain to slip the browser
// its own session: none of them is trusted, and the browser is sent to
// the login. The other name is ignored: in a secure context a cookie a
// sibling set for the parent domain never stands for the session.
func onlyCookie(r *http.Request) (*http.Cookie, bool) {
	name := httpCookieName
	if secureContext(r) {
		name = cookieName
	}
	var found *http.Cookie
	for _, c := range r.CookiesNamed(name) {
		if found != nil {
			return nil, false
		}
		found = c
	}
	return found, found != nil
}

// csrfField reads the "csrf" form field: from the URL-encoded body, or
// from a multipart body's first part (the upload form puts it first, so
// that no file is read before the check), returning the reader of the
// parts after it.
func csrfField(r *http.Request) (string, *multipart.Reader) {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		mr, err := r.MultipartReader()
		if err != nil {
			return "", nil
		}
		p, err := mr.NextPart()
		if err != nil || p.FormName() != "csrf" {
			return "", nil
		}
		b, err := io.ReadAll(io.LimitReader(p, 256))
		if err != nil {
			return "", nil
		}
		return string(b), mr
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	return r.PostFormValue("csrf"), nil
}

// maxFormBytes bounds a URL-encoded form.
const maxFormBytes = 64 << 10

// sameAddress reports whether a browser would send host's cookies to
// tcpHost's ports: host (a Host header) names tcpHost, or both are
// loopback names of one address (localhost is 127.0.0.1 and ::1).
// Names are not resolved: an operator who gives --tcp-host a name
// gives it an address no other name of the dashboard should have.
func sameAddress(host, tcpHost string) bool {
	if tcpHost == "" {
		return false
	}
	name := func(h string) string {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
		if ip := net.ParseIP(h); ip != nil {
			return ip.String()
		}
		return h
	}
	a, b := name(host), name(tcpHost)
	if a == b {
		return true
	}
	loop := func(x string) bool { return x == "127.0.0.1" || x == "::1" }
	return a == "localhost" && loop(b) || b == "localhost" && loop(a)
}

// sameOrigin reports whether r came from a page of this origin: its
// Origin header (which browsers send on every POST and WebSocket) names
// the request's own host, or, without one, Sec-Fetch-Site says so. A
// request with neither is not a browser's cross-site one.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}

// apiStatus turns an API client's error into the status and message the
// dashboard shows: the API's own for an API error, 503 when the API
// could not be reached.
func apiStatus(err error) (int, string) {
	var ae *sandboxd.APIError
	if errors.As(err, &ae) {
		return ae.Status, ae.Message
	}
	return http.StatusServiceUnavailable, fmt.Sprintf("The daemon's API did not answer: %v", err)
}

// apiFailed shows err; a 401 (the token was revoked since the login)
// ends the session and sends the browser to the login.
func (h *Handler) apiFailed(w http.ResponseWriter, r *http.Request, req request, err error) {
	status, msg := apiStatus(err)
	if status == http.StatusUnauthorized {
		h.sessions.dropToken(req.sess.token)
		http.SetCookie(w, sessionCookie(r, "", -1))
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return
	}
	if status >= 500 {
		h.logger.Warn("ui: API call failed", "path", r.URL.Path, "status", status, "err", err)
	}
	h.fail(w, r, req.sess, status, msg)
}
