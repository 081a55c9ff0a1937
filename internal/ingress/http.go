package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// Proxy tuning. Idle connections are pooled per (sandbox, port): the
// transport keys its pool by the synthetic upstream host "<id>:<port>".
const (
	maxIdlePerPort  = 32
	idleConnTimeout = 90 * time.Second
	// maxResponseHeaderBytes bounds the status line and headers a sandbox
	// port answers with: whatever listens there is hostile, and net/http
	// would hold 10 MiB of them per request. nginx proxies with 4-8 KiB.
	maxResponseHeaderBytes = 64 << 10
)

// Wrap returns a handler that serves requests addressed to a preview
// host ("<port>-<sandbox-id>.<domain>", any listener port in the Host
// header) or to a bound custom domain, and passes every other request to
// next. The daemon mounts it in front of its API mux:
//
//	srv := &http.Server{Handler: router.Wrap(apiMux)}
//
// A preview host whose sandbox or port is unknown, not exposed, or not
// exposed as http answers 404; a private port answers 401 unless
// Options.Authorize says yes. Otherwise the request is proxied to the
// sandbox port, streaming both ways (WebSocket upgrades included), with
// X-Forwarded-For/-Host/-Proto set and the caller's credentials removed
// (auth.StripCredentials: the daemon's and its facades' token headers,
// an Authorization that holds an API token, the credential cookie).
func (r *Router) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.serve(w, req, next)
	})
}

// Fallback serves a request for a preview host "<port>-<sandbox-id>.<domain>"
// whose port is not exposed as http. It reports whether it answered; when
// it returns false it has written nothing, and the router answers the 404
// it gives an unknown sandbox.
type Fallback func(w http.ResponseWriter, req *http.Request, sandboxID string, port int) bool

// WrapFallback is Wrap, with fallback asked first about preview hosts of
// ports that are not exposed (the E2B facade serves any port of its
// sandboxes by host). Exposed ports never reach it, so their routing costs
// what it costs without one.
func (r *Router) WrapFallback(next http.Handler, fallback Fallback) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.serveFallback(w, req, next, fallback)
	})
}

// ServeHTTP serves ingress hosts like Wrap and answers 404 to any other
// host.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.serve(w, req, nil)
}

type targetKey struct{}

func (r *Router) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	r.serveFallback(w, req, next, nil)
}

func (r *Router) serveFallback(w http.ResponseWriter, req *http.Request, next http.Handler, fallback Fallback) {
	t, v := r.resolve(req.Host, HTTP)
	switch {
	case v == notOurs && next != nil:
		next.ServeHTTP(w, req)
		return
	case v == notFound && fallback != nil && t.SandboxID != "" && fallback(w, req, t.SandboxID, t.Port.Number):
		return
	case v != found:
		writeError(w, http.StatusNotFound, "not_found", "no exposed http port behind this host", false)
		return
	case !t.Port.Public && (r.authorize == nil || !r.authorize(req)):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
		writeError(w, http.StatusUnauthorized, "unauthenticated", "this port is private: send an API token", false)
		return
	}
	// Full duplex: without it an HTTP/1 server closes the request body as
	// soon as the response starts, and the transport, still finishing the
	// body's write, closes the connection under the streaming response
	// (golang/go#40747; see internal/api/e2b's envd proxy).
	_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/2 always is
	ctx := context.WithValue(req.Context(), targetKey{}, t)
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(ctx, requestKey{}, req.Context())))
}

// requestKey holds the context of the request a proxied dial is for: the
// transport dials on a context detached from the request's cancellation
// (keeping its values), and a wake in that dial must not outlive it.
type requestKey struct{}

func (r *Router) newProxy() (*http.Transport, *httputil.ReverseProxy) {
	tr := &http.Transport{
		Proxy: nil, // never an environment proxy: the dialer is the path
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			id, portStr, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, _ := strconv.Atoi(portStr)
			return r.dial(ctx, id, port)
		},
		MaxIdleConnsPerHost:    maxIdlePerPort,
		IdleConnTimeout:        idleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // pass bodies through as the sandbox sent them
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       r.rewrite,
		Transport:     tr,
		FlushInterval: -1, // flush every write: streams, SSE, long polls
		ErrorHandler:  r.proxyError,
		ErrorLog:      slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
	}
	return tr, rp
}

// rewrite points the outgoing request at the upstream key of its target
// and keeps the caller's Host, so the sandbox's server sees the URL the
// user typed.
func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(Target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = net.JoinHostPort(t.SandboxID, strconv.Itoa(t.Port.Number))
	pr.Out.Host = pr.In.Host
	// X-Forwarded-For/-Host/-Proto: the caller's address, the Host it
	// used and the scheme, nothing secret (ReverseProxy dropped the
	// caller's own X-Forwarded-* before Rewrite).
	pr.SetXForwarded()
	auth.StripCredentials(pr.Out.Header, r.cookies()...)
}

// cookies are the cookie names StripCredentials removes besides those
// holding a token.
func (r *Router) cookies() []string {
	if r.cookie == "" {
		return nil
	}
	return []string{r.cookie}
}

func (r *Router) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	if req.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	t, _ := req.Context().Value(targetKey{}).(Target)
	r.log.Warn("ingress: proxy", "sandbox", t.SandboxID, "port", t.Port.Number, "err", err)
	if we := (*WakeError)(nil); errors.As(err, &we) {
		writeError(w, we.Status, we.Code, we.Message, we.Retryable)
		return
	}
	if errors.Is(err, ErrNotExposed) {
		writeError(w, http.StatusNotFound, "not_found", "no exposed http port behind this host", false)
		return
	}
	writeError(w, http.StatusBadGateway, "unavailable", "the sandbox port did not answer", true)
}

// writeError answers with the API's error shape (docs/api-v1.md, Errors).
func writeError(w http.ResponseWriter, status int, code, msg string, retryable bool) {
	type body struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{body{code, msg, retryable}})
}
