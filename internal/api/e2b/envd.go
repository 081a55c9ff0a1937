package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/service"
)

// envdCaller is the caller envd routing looks sandboxes up as: envd requests
// carry no API key; the access token authorizes them instead. It looks up
// ids only (lookupEnvd), never names, which would resolve across owners.
var envdCaller = service.Caller{Admin: true}

// agentURL is where requests through the agent's Transport go; the host is
// never resolved.
var agentURL, _ = url.Parse(agent.BaseURL)

// Routing headers of the facade, removed before forwarding beside every
// credential auth.StripCredentials knows.
var strippedHeaders = []string{headerSandboxID, headerSandboxPort}

// serveEnvd forwards one envd request to sandbox id's port: 49983 to the
// agent, any other port to that port inside the sandbox. See the package
// documentation for authorization and error answers.
func (f *Facade) serveEnvd(w http.ResponseWriter, r *http.Request, id string, port int) {
	sb, err := f.lookupEnvd(r.Context(), id)
	if err == nil && sb.State == service.StatePaused {
		var answered bool
		if sb, answered = f.wake(w, r, sb, port); answered {
			return
		}
	}
	if err != nil || sb.State != service.StateRunning {
		if err != nil && !errors.Is(err, service.ErrNotFound) {
			f.log.ErrorContext(r.Context(), "e2b: envd: look up sandbox", "sandbox", id, "err", err)
		}
		f.sandboxNotFound(w, r, id)
		return
	}
	f.forward(w, r, sb, port)
}

// ServesHost reports whether host is a preview host <port>-<id>.<domain>
// that ServePort forwards to a server: a running sandbox created through
// the E2B API, whose port is envd's (49983), the code interpreter's
// (49999), or one something in the sandbox listens on. It names the
// sandbox's owner, whom the name's certificate counts against. The TLS
// listener asks it before it issues a certificate for a name, so that
// getHost's links are served over TLS like exposed ports; a walk over a
// sandbox's closed ports is refused by name, so it costs the CA nothing
// and spends no budget of the owner's. Cost per handshake: one store
// read, and for another port one connect through the agent (closed at
// once: the sandbox's server sees a connection without data) unless the
// port answered one in the last listenTTL; at most listenProbes at once
// (listenProbesPerSandbox per sandbox), past which a handshake for a port
// not known to listen fails.
func (f *Facade) ServesHost(host string) (owner string, ok bool) {
	if !f.previewHost(host) {
		return "", false
	}
	id, port, _ := naming.ParsePreviewHost(host, f.domain)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, err := f.lookupEnvd(ctx, id)
	// A paused sandbox with an auto-resume is served on envd's and the
	// interpreter's port: a request there wakes it.
	wakeable := sb.State == service.StatePaused && sb.Lifecycle.AutoResume && (port == envdPort || port == interpreterPort)
	if err != nil || (sb.State != service.StateRunning && !wakeable) || sb.Annotations[annTemplate] == "" {
		return "", false
	}
	if port != envdPort && port != interpreterPort && !f.listening.listens(ctx, sb.ID, port) {
		return "", false
	}
	return sb.Owner, true
}

// ServePort serves a request that reached the preview host
// <port>-<id>.<domain> of a port the ingress has no http route for: E2B
// serves every port of a sandbox by host, with no expose call first. It
// answers only for a running sandbox created through the E2B API (the
// port's traffic then goes as on the E2b-Sandbox-Id route: the traffic
// token when allowPublicTraffic was false, the Host rewritten by
// maskRequestHost). For anything else — no sandbox of that id (a killed
// one), a sandbox of the native API or Daytona, one that is not running —
// it answers what E2B's edge answers for a sandbox it cannot route to:
// 502 {"sandboxId","message":"The sandbox was not found","code":502},
// the same body for each, so that no answer tells a sandbox of another
// kind, or of another tenant, from none (the ingress's own 404 said
// {"error":…}, which the E2B SDK does not read). A failed lookup (not a
// not-found) is a 502 too, naming the reason.
func (f *Facade) ServePort(w http.ResponseWriter, r *http.Request, id string, port int) bool {
	sb, err := f.lookupEnvd(r.Context(), id)
	switch {
	case errors.Is(err, service.ErrNotFound):
		f.sandboxNotFound(w, r, id)
		return true
	case err != nil:
		f.log.ErrorContext(r.Context(), "e2b: port host: look up sandbox", "sandbox", id, "err", err)
		f.envdError(w, r, http.StatusBadGateway, "unavailable", "sandbox "+id+" is not reachable right now")
		return true
	case sb.State == service.StatePaused && sb.Annotations[annTemplate] != "":
		if sb, answered := f.wake(w, r, sb, port); answered {
			return true
		} else if sb.State != service.StateRunning {
			f.sandboxNotFound(w, r, id)
			return true
		}
	case sb.State != service.StateRunning || sb.Annotations[annTemplate] == "":
		f.sandboxNotFound(w, r, id)
		return true
	}
	f.forward(w, r, sb, port)
	return true
}

// wake is the answer to a request for port of sb, paused: when sb has an
// auto-resume (E2B's autoResume) and r carries what port wants of it
// (wakes), sb is resumed (Service.Wake: concurrent requests resume it
// once) and returned running, answered false: the caller serves r. Else
// sb comes back as it was, answered false, and the caller answers as for
// a sandbox that does not run: a request without the sandbox's
// credentials never wakes it, and learns no more than before. A wake that
// fails (the owner's quota, the host's capacity, the engine) is answered
// here with its error (answered true), never left to hang.
func (f *Facade) wake(w http.ResponseWriter, r *http.Request, sb service.Sandbox, port int) (_ service.Sandbox, answered bool) {
	if !sb.Lifecycle.AutoResume || !f.wakes(r, sb, port) {
		return sb, false
	}
	res, ok, err := f.svc.Wake(r.Context(), sb.ID)
	switch {
	case err != nil:
		status, msg := classify(err)
		if apierr.DaemonFault(status) {
			f.log.ErrorContext(r.Context(), "e2b: auto-resume", "sandbox", sb.ID, "err", err)
		}
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", apierr.RetryAfter(err))
		}
		if port != envdPort && port != interpreterPort || secure(sb) && r.Header.Get("X-Access-Token") == "" {
			// Whoever has the link reaches a public port, and a signed
			// /files URL (no access token) is a link too: the owner's
			// quota and the daemon's faults are not theirs to read.
			msg = http.StatusText(status)
		}
		f.envdError(w, r, status, connectCode(status), "auto-resume of sandbox "+sb.ID+" failed: "+msg)
		return sb, true
	case !ok:
		return sb, false
	}
	// The interpreter server of a code-interpreter sandbox runs, as after
	// connect (a thaw or a restore keeps it; a start does not).
	if err := f.ensureInterpreter(r.Context(), res.Sandbox); err != nil {
		f.log.WarnContext(r.Context(), "e2b: auto-resume: start the code interpreter", "sandbox", sb.ID, "err", err)
	}
	return res.Sandbox, false
}

// wakes reports whether r, for port of the paused sb, carries what that
// port wants of a caller (authorizeEnvd), and a credential of the sandbox
// where the port has one: the requests a secure sandbox's envd and code
// interpreter let through without a token (GET /health, the
// interpreter's context calls) do not wake it, since anyone may send
// them. Public ports of a public sandbox want nothing but its id, as on
// E2B: a request to them wakes it.
func (f *Facade) wakes(r *http.Request, sb service.Sandbox, port int) bool {
	if _, _, msg := f.authorizeEnvd(r, sb, port); msg != "" {
		return false
	}
	if (port == envdPort || port == interpreterPort) && secure(sb) {
		tok := r.Header.Get("X-Access-Token")
		if tok == "" && port == envdPort && fileOperation(r) != "" {
			return true // a valid signature: authorizeEnvd checked it
		}
		return f.validToken(accessTokenLabel, sb.ID, tok)
	}
	return true
}

// connectCode is the Connect error code of an HTTP status, for answers on
// the Connect paths.
func connectCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "failed_precondition"
	case http.StatusTooManyRequests:
		return "resource_exhausted"
	}
	return "unavailable"
}

// forward authorizes r for port of the running sandbox sb and proxies it.
func (f *Facade) forward(w http.ResponseWriter, r *http.Request, sb service.Sandbox, port int) {
	signed, status, msg := f.authorizeEnvd(r, sb, port)
	if msg != "" {
		f.envdError(w, r, status, "unauthenticated", msg)
		return
	}
	if signed {
		// The signature binds the user (the username parameter, or the
		// default user when empty): no header may choose another.
		r.Header.Del("Authorization")
	}

	var (
		target = &url.URL{Scheme: "http", Host: "127.0.0.1"}
		rt     http.RoundTripper
		user   string
		host   string
	)
	if port == envdPort {
		ac, err := f.svc.Agent(r.Context(), sb.ID)
		if err != nil {
			f.sandboxNotFound(w, r, sb.ID)
			return
		}
		target, rt = agentURL, ac.Transport()
		if r.Header.Get("Authorization") == "" && r.URL.Query().Get("username") == "" {
			user = sb.Annotations[annUser]
		}
	} else {
		var ok bool
		if host, ok = requestHost(sb, port, r.Host); !ok {
			f.envdError(w, r, http.StatusBadGateway, "unavailable", "the sandbox's network.maskRequestHost is not a valid host")
			return
		}
		rt = f.portTransport(sb.ID, port)
	}
	// Full duplex: without it the server drains and closes r.Body as soon
	// as the response starts, while the transport may still hold it (after
	// Content-Length it reads once more to check the end). That read then
	// fails the request write and the transport closes the connection to
	// the sandbox under the response it is streaming (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/2 always is
	// The sandbox's own tokens never reach it, whichever header a caller
	// put them in: its envd access token would let code running as an
	// unprivileged user in it drive envd as root.
	own := []string{f.token(accessTokenLabel, sb.ID), f.token(trafficTokenLabel, sb.ID)}
	f.proxy(target, rt, user, host, own).ServeHTTP(w, r)
}

// maskPortPlaceholder is what maskRequestHost's template puts where the
// port goes.
const maskPortPlaceholder = "${PORT}"

// requestHost is the Host a request to port of sb goes out with: the
// sandbox's network.maskRequestHost with ${PORT} replaced by the port, as
// E2B does, else the Host the caller used. ok is false when the mask does
// not make a valid host[:port].
func requestHost(sb service.Sandbox, port int, in string) (host string, ok bool) {
	raw := sb.Annotations[annNetwork]
	if raw == "" || !strings.Contains(raw, "maskRequestHost") {
		return in, true
	}
	var n struct {
		MaskRequestHost *string `json:"maskRequestHost"`
	}
	if err := json.Unmarshal([]byte(raw), &n); err != nil || n.MaskRequestHost == nil || *n.MaskRequestHost == "" {
		return in, true
	}
	host = strings.ReplaceAll(*n.MaskRequestHost, maskPortPlaceholder, strconv.Itoa(port))
	return host, validHostHeader(host)
}

// validHostHeader reports whether h is a host name or IP literal with an
// optional port: nothing a Host header could smuggle a path, credentials
// or another header in.
func validHostHeader(h string) bool {
	name := h
	if hn, p, err := net.SplitHostPort(h); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || !naming.ValidPort(n) {
			return false
		}
		name = hn
	} else if strings.Contains(h, ":") && net.ParseIP(h) == nil {
		return false
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if net.ParseIP(name) != nil {
		return true
	}
	name = strings.ToLower(name)
	return name == "localhost" || naming.ValidHostname(name)
}

// lookupEnvd finds the sandbox an envd request names. E2B sandbox ids are
// ids, so only an id routes: anything else is not found without a lookup.
// A name would be looked up across every owner (envd requests carry no API
// key to scope it by), and the answer would tell whether some tenant holds
// that name.
func (f *Facade) lookupEnvd(ctx context.Context, id string) (service.Sandbox, error) {
	if !service.IsID(id) {
		return service.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, service.ErrNotFound)
	}
	return f.svc.Get(ctx, envdCaller, id)
}

// authorizeEnvd checks the token a request to sb's port needs, as E2B
// does: the envd port wants the envd access token of a secure sandbox
// (except GET /health) in X-Access-Token, or, on GET and POST /files
// without that header, a valid unexpired URL signature made with it
// (signed is then true); other ports are public unless the sandbox was
// created with network.allowPublicTraffic=false, and then want the traffic
// access token in E2B-Traffic-Access-Token (403 without it, as on E2B).
// Port 49999, the code interpreter, of a secure sandbox also wants the
// envd access token in X-Access-Token (401), except on the requests
// interpreterOpenRequest lets through, where a token sent must still be
// right. msg is "" when r may pass, else why not, to answer with status.
func (f *Facade) authorizeEnvd(r *http.Request, sb service.Sandbox, port int) (signed bool, status int, msg string) {
	switch {
	case port == envdPort:
		health := r.Method == http.MethodGet && r.URL.Path == "/health"
		if !secure(sb) || health {
			return false, 0, ""
		}
		tok := r.Header.Get("X-Access-Token")
		if tok == "" && fileOperation(r) != "" {
			if msg := f.checkSignature(r, sb.ID, time.Now()); msg != "" {
				return false, http.StatusUnauthorized, msg
			}
			return true, 0, ""
		}
		if !f.validToken(accessTokenLabel, sb.ID, tok) {
			return false, http.StatusUnauthorized, "missing or invalid X-Access-Token"
		}
		return false, 0, ""
	case sb.Annotations[annTemplate] == "":
		// Not an E2B sandbox (native API, Daytona): E2B's "other ports are
		// public" does not apply. Its ports are reached through the
		// ingress, which enforces exposure and private-port auth.
		return false, http.StatusUnauthorized, "port " + strconv.Itoa(port) + " of a sandbox not created through the E2B API is reachable only through its exposed preview URL"
	}
	if private(sb) {
		switch tok := r.Header.Get("E2B-Traffic-Access-Token"); {
		case tok == "":
			return false, http.StatusForbidden, "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing"
		case !f.validToken(trafficTokenLabel, sb.ID, tok):
			return false, http.StatusForbidden, "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid"
		}
	}
	if port == interpreterPort && secure(sb) {
		// The code interpreter runs whatever it is sent: a secure
		// sandbox's wants the envd access token, as envd does.
		tok := r.Header.Get("X-Access-Token")
		if (tok != "" || !interpreterOpenRequest(r)) && !f.validToken(accessTokenLabel, sb.ID, tok) {
			return false, http.StatusUnauthorized, "missing or invalid X-Access-Token: the code interpreter of a secure sandbox wants its envd access token"
		}
	}
	return false, 0, ""
}

// interpreterOpenRequest reports whether r is one of the code
// interpreter's requests that a secure sandbox answers without its envd
// access token: GET /health, and the context calls that
// @e2b/code-interpreter 2.8.0 sends with no token (createCodeContext,
// listCodeContexts, removeCodeContext, restartCodeContext: POST and GET
// /contexts, DELETE /contexts/{id}, POST /contexts/{id}/restart). None of
// them runs code: POST /execute, the only way to, and every other method
// and path want the token. The match is exact (no trailing slash, no
// encoded slash, one id segment of the characters a context id has), so
// no path that the server might read as another route slips through.
func interpreterOpenRequest(r *http.Request) bool {
	p := r.URL.Path
	if r.URL.RawPath != "" && r.URL.RawPath != p {
		return false // escapes in the path: nothing open is spelled so
	}
	switch {
	case p == "/health":
		return r.Method == http.MethodGet
	case p == "/contexts":
		return r.Method == http.MethodGet || r.Method == http.MethodPost
	}
	rest, ok := strings.CutPrefix(p, "/contexts/")
	if !ok {
		return false
	}
	id, action, _ := strings.Cut(rest, "/")
	if !contextID(id) {
		return false
	}
	switch action {
	case "":
		return r.Method == http.MethodDelete && !strings.HasSuffix(rest, "/")
	case "restart":
		return r.Method == http.MethodPost
	}
	return false
}

// contextID reports whether s may be a code-interpreter context id (a
// UUID here; letters, digits and dashes, at most 64).
func contextID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// proxy forwards to target through rt and flushes every write, so Connect
// stream messages and NDJSON lines go out as they come. It removes the
// facade's routing headers and every credential of the daemon
// (auth.StripCredentials: the access and traffic tokens, X-API-KEY, an
// Authorization holding an API token, …); to the agent (target is
// agentURL) also any Authorization that is not envd's Basic user
// selector, while another port keeps the app's own Authorization. user,
// when set, becomes that selector.
// host, when set, is the Host the request goes out with (else the target's).
// A failure to reach the sandbox is 502.
func (f *Facade) proxy(target *url.URL, rt http.RoundTripper, user, host string, own []string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h := pr.Out.Header
			for _, k := range strippedHeaders {
				h.Del(k)
			}
			auth.StripCredentials(h)
			if a := h.Get("Authorization"); a != "" && (target == agentURL && !strings.HasPrefix(a, "Basic ") || containsAny(a, own)) {
				h.Del("Authorization")
			}
			if user != "" {
				h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
			}
			pr.SetURL(target)
			if host != "" {
				pr.Out.Host = host
			}
		},
		Transport:      rt,
		FlushInterval:  -1,
		ModifyResponse: agentAnswerOnly(target),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return
			}
			f.log.WarnContext(r.Context(), "e2b: envd proxy", "path", r.URL.Path, "err", err)
			f.envdError(w, r, http.StatusBadGateway, "unavailable", "the sandbox did not answer")
		},
	}
}

// agentAnswerOnly, for the agent's answers (target is agentURL), keeps a
// browser from taking them for a page of the host they are served on: a
// signed file URL is served on the API's host, which is also the
// dashboard's, and a sandbox that replaced its agent chooses every byte
// of the answer. So no cookie is set, nothing is sniffed or run (a
// sandboxing CSP), and a downloaded file is an attachment of octets.
// Other ports are the sandbox's own sites, served on hosts of their own.
func agentAnswerOnly(target *url.URL) func(*http.Response) error {
	if target != agentURL {
		return nil
	}
	return func(resp *http.Response) error {
		h := resp.Header
		h.Del("Set-Cookie")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
		if resp.Request != nil && resp.Request.Method == http.MethodGet && resp.Request.URL.Path == "/files" && resp.StatusCode/100 == 2 {
			h.Set("Content-Type", "application/octet-stream")
			if d := h.Get("Content-Disposition"); !strings.HasPrefix(d, "attachment") {
				h.Set("Content-Disposition", "attachment") // the agent's names the file
			}
		}
		return nil
	}
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if sub != "" && strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// maxPortHeaderBytes bounds the status line and headers a server in a
// sandbox answers with (whatever listens there is hostile; net/http would
// hold 10 MiB of them). nginx proxies with 4-8 KiB.
const maxPortHeaderBytes = 64 << 10

// portTransport reaches port inside sandbox id through its agent, one
// tunnel per request (no pooling: nothing to invalidate when the sandbox
// goes away). Bodies stream both ways; reply headers are bounded.
func (f *Facade) portTransport(id string, port int) http.RoundTripper {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return f.svc.DialPort(ctx, id, port)
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
	}
}

// envdError answers an envd request the routing itself refuses: on the
// Connect paths a Connect error body with code (the status maps to the
// same code for streams), elsewhere E2B's body.
func (f *Facade) envdError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if isConnectPath(r.URL.Path) {
		writeJSON(w, status, struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{code, msg})
		return
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func isConnectPath(p string) bool {
	return strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")
}
