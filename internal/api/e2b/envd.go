package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// envdCaller is the caller envd routing looks sandboxes up as: envd requests
// carry no API key; the access token authorizes them instead. It looks up
// ids only (lookupEnvd), never names, which would resolve across owners.
var envdCaller = service.Caller{Admin: true}

// agentURL is where requests through the agent's Transport go; the host is
// never resolved.
var agentURL, _ = url.Parse(agent.BaseURL)

// Headers that authorize a request to the facade and must not reach the
// sandbox.
var strippedHeaders = []string{
	"X-API-KEY", "X-Access-Token", "E2B-Traffic-Access-Token",
	headerSandboxID, headerSandboxPort,
}

// serveEnvd forwards one envd request to sandbox id's port: 49983 to the
// agent, any other port to that port inside the sandbox. See the package
// documentation for authorization and error answers.
func (f *Facade) serveEnvd(w http.ResponseWriter, r *http.Request, id string, port int) {
	sb, err := f.lookupEnvd(r.Context(), id)
	if err != nil || sb.State != service.StateRunning {
		if err != nil && !errors.Is(err, service.ErrNotFound) {
			f.log.ErrorContext(r.Context(), "e2b: envd: look up sandbox", "sandbox", id, "err", err)
		}
		f.sandboxNotFound(w, r, id)
		return
	}
	if msg := f.authorizeEnvd(r, sb, port); msg != "" {
		f.envdError(w, r, http.StatusUnauthorized, "unauthenticated", msg)
		return
	}

	var (
		target = &url.URL{Scheme: "http", Host: "127.0.0.1"}
		rt     http.RoundTripper
		user   string
	)
	if port == envdPort {
		ac, err := f.svc.Agent(r.Context(), sb.ID)
		if err != nil {
			f.sandboxNotFound(w, r, id)
			return
		}
		target, rt = agentURL, ac.Transport()
		if r.Header.Get("Authorization") == "" && r.URL.Query().Get("username") == "" {
			user = sb.Annotations[annUser]
		}
	} else {
		rt = f.portTransport(sb.ID, port)
	}
	// Full duplex: without it the server drains and closes r.Body as soon
	// as the response starts, while the transport may still hold it (after
	// Content-Length it reads once more to check the end). That read then
	// fails the request write and the transport closes the connection to
	// the sandbox under the response it is streaming (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/2 always is
	f.proxy(target, rt, user).ServeHTTP(w, r)
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
// (except GET /health); other ports are public unless the sandbox was
// created with network.allowPublicTraffic=false, and then want the traffic
// access token. It returns "" when r may pass, else why not.
func (f *Facade) authorizeEnvd(r *http.Request, sb service.Sandbox, port int) string {
	switch {
	case port == envdPort:
		health := r.Method == http.MethodGet && r.URL.Path == "/health"
		if secure(sb) && !health && !f.validToken(accessTokenLabel, sb.ID, r.Header.Get("X-Access-Token")) {
			return "missing or invalid X-Access-Token"
		}
	case sb.Annotations[annTemplate] == "":
		// Not an E2B sandbox (native API, Daytona): E2B's "other ports are
		// public" does not apply. Its ports are reached through the
		// ingress, which enforces exposure and private-port auth.
		return "port " + strconv.Itoa(port) + " of a sandbox not created through the E2B API is reachable only through its exposed preview URL"
	case private(sb):
		if !f.validToken(trafficTokenLabel, sb.ID, r.Header.Get("E2B-Traffic-Access-Token")) {
			return "missing or invalid E2B-Traffic-Access-Token"
		}
	}
	return ""
}

// proxy forwards to target through rt and flushes every write, so Connect
// stream messages and NDJSON lines go out as they come. It removes the
// facade's credentials and routing headers and any Authorization that is
// not envd's Basic user selector; user, when set, becomes that selector.
// A failure to reach the sandbox is 502.
func (f *Facade) proxy(target *url.URL, rt http.RoundTripper, user string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			h := pr.Out.Header
			for _, k := range strippedHeaders {
				h.Del(k)
			}
			if a := h.Get("Authorization"); a != "" && !strings.HasPrefix(a, "Basic ") {
				h.Del("Authorization")
			}
			if user != "" {
				h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
			}
			pr.SetURL(target)
		},
		Transport:     rt,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return
			}
			f.log.WarnContext(r.Context(), "e2b: envd proxy", "path", r.URL.Path, "err", err)
			f.envdError(w, r, http.StatusBadGateway, "unavailable", "the sandbox did not answer")
		},
	}
}

// portTransport reaches port inside sandbox id through its agent, one
// tunnel per request (no pooling: nothing to invalidate when the sandbox
// goes away).
func (f *Facade) portTransport(id string, port int) http.RoundTripper {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return f.svc.DialPort(ctx, id, port)
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
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
