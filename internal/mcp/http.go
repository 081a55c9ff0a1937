package mcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/inproc"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// HTTPOptions configure NewHTTPHandler.
type HTTPOptions struct {
	// API serves the daemon's own API (/v1): the tools' calls go to it
	// in process, with the caller's token. Required.
	API http.Handler
	// APIHost is the Host those calls carry: the daemon's listen address,
	// which routes to the API (never to a sandbox's preview or custom
	// domain). Required.
	APIHost string
	// Authenticate checks the request's credential before any MCP is
	// read; an error matching auth.ErrUnauthenticated answers 401, any
	// other the class apierr gives it (a failed token lookup: 503).
	Authenticate func(*http.Request) error
	// Version is reported to clients.
	Version string
	// Logger receives failures; nil discards them.
	Logger *slog.Logger
}

// HTTPHandler serves MCP's streamable HTTP transport, stateless, behind
// the API's token authentication. Close it when the daemon stops.
type HTTPHandler struct {
	authenticate func(*http.Request) error
	logger       *slog.Logger
	mcp          http.Handler

	self *inproc.Listener
	srv  *http.Server
	done chan struct{}
}

// NewHTTPHandler returns the handler of /mcp and starts the in-process
// server that carries its calls to opts.API.
func NewHTTPHandler(opts HTTPOptions) *HTTPHandler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &HTTPHandler{
		authenticate: opts.Authenticate,
		logger:       logger,
		self:         inproc.NewListener(),
		done:         make(chan struct{}),
	}
	// The in-process server: the API's handler on connections that are
	// pipes in memory. It bounds headers as the daemon's listeners do; the
	// API bounds its own routes.
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
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return h.self.Dial(ctx) },
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
	base := "http://" + opts.APIHost
	ua := sandboxd.WithUserAgent("sandboxd-mcp/" + opts.Version)
	server := NewServer(Options{
		Version: opts.Version,
		Logger:  logger,
		Client: func(_ context.Context, req *mcpsdk.CallToolRequest) (*sandboxd.Client, error) {
			// The header the handler authenticated; the API checks it again.
			var tok string
			if req.Extra != nil {
				_, tok, _ = strings.Cut(req.Extra.Header.Get("Authorization"), " ")
			}
			if tok = strings.TrimSpace(tok); tok == "" {
				return nil, &sandboxd.APIError{Status: http.StatusUnauthorized, Code: sandboxd.CodeUnauthenticated, Message: apierr.MsgUnauthenticated}
			}
			return sandboxd.New(base, tok, sandboxd.WithHTTPClient(hc), ua), nil
		},
	})
	h.mcp = mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return server }, &mcpsdk.StreamableHTTPOptions{
		// Stateless: each POST is served on its own, with its own token;
		// no session outlives its request, none can be taken over.
		Stateless: true,
		Logger:    logger,
		// The SDK refuses a non-loopback Host on a loopback listener
		// (DNS rebinding). /mcp takes no ambient credential (a bearer
		// header only, never a cookie), so a rebound page gains nothing,
		// and the check would refuse the names a proxy in front of the
		// daemon uses (--api-host), as /v1 does not.
		DisableLocalhostProtection: true,
	})
	return h
}

// ServeHTTP authenticates the request, then serves it as MCP.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.authenticate(r); err != nil {
		class, msg := apierr.Classify(err)
		if apierr.DaemonFault(class.Status) {
			h.logger.Error("mcp: authenticate", "err", err)
		}
		if class.Code == apierr.Unauthenticated {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(class.Status)
		var body struct {
			Error struct {
				Code      apierr.Code `json:"code"`
				Message   string      `json:"message"`
				Retryable bool        `json:"retryable"`
			} `json:"error"`
		}
		body.Error.Code, body.Error.Message, body.Error.Retryable = class.Code, msg, class.Retryable
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	h.mcp.ServeHTTP(w, r)
}

// Close stops the in-process server, ending calls still in flight.
func (h *HTTPHandler) Close() error {
	err := h.srv.Close()
	<-h.done
	return err
}
