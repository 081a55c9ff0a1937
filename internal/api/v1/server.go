package v1

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/api/router"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/httplimit"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/sessions"
)

// DefaultMaxBodyBytes caps JSON request bodies (file uploads are exempt):
// large enough for any real create request with env, tags and mounts, small
// enough that a hostile body costs little memory.
const DefaultMaxBodyBytes = 1 << 20

// Authenticator verifies a request's credential; *auth.Authenticator is the
// implementation. Every credential failure matches auth.ErrUnauthenticated;
// any other error is a failed lookup (answered 500, not 401).
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (auth.Principal, error)
}

// Registry is where the API registers its metrics and what /metrics
// serves; *prometheus.Registry is one.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Options configures New. Service, Auth and Tokens are required.
type Options struct {
	Service Service
	Auth    Authenticator
	Tokens  Tokens
	// Logger receives one line per request and the full text of every
	// internal error. Default: discard.
	Logger *slog.Logger
	// Registry receives the API's metrics and is served at /metrics.
	// Default: a fresh registry (so /metrics still answers).
	Registry Registry
	// MaxBodyBytes caps JSON request bodies. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RequestTimeout bounds a whole request (body, handling, answer) on
	// every route but the streams (exec, its WebSocket, file transfers),
	// which last as long as their callers keep them. 0: no bound.
	RequestTimeout time.Duration
	// Version is reported by /healthz.
	Version string
	// DefaultQuota is the quota of a user token created without one.
	// Zero: unlimited.
	DefaultQuota auth.Quota
	// DefaultTimeout is the lifetime of a sandbox whose create sends no
	// timeout_s (one that sends 0 has none). Zero: no default.
	DefaultTimeout time.Duration
	// Sessions serves /v1/sandboxes/{id}/sessions (the sessions part).
	// Nil: those routes answer unavailable.
	Sessions *sessions.Manager
	// Placer places creates in a cluster (package router). Nil: every
	// create is this node's.
	Placer *router.Placer
}

// server holds what every handler needs.
type server struct {
	svc      Service
	sessions *sessions.Manager
	auth     Authenticator
	tokens   Tokens
	log      *slog.Logger
	metrics  *metrics
	maxBody  int64
	timeout  time.Duration
	version  string

	defaultQuota   auth.Quota
	defaultTimeout time.Duration
	placer         *router.Placer
}

// New returns the handler of the native API: every route of the table in
// routes.go, plus JSON 404 and 405 answers for everything else. It
// registers its metrics on opts.Registry and fails if they are already
// registered there.
func New(opts Options) (http.Handler, error) {
	if opts.Service == nil || opts.Auth == nil || opts.Tokens == nil {
		return nil, errors.New("v1.New: Service, Auth and Tokens are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &server{
		svc:      opts.Service,
		sessions: opts.Sessions,
		auth:     opts.Auth,
		tokens:   opts.Tokens,
		log:      opts.Logger,
		maxBody:  opts.MaxBodyBytes,
		timeout:  opts.RequestTimeout,
		version:  opts.Version,

		defaultQuota:   opts.DefaultQuota,
		defaultTimeout: opts.DefaultTimeout,
		placer:         opts.Placer,
	}
	m, err := newMetrics(opts.Registry, s.countByState)
	if err != nil {
		return nil, fmt.Errorf("v1.New: %w", err)
	}
	if err := opts.Registry.Register(newSandboxCollector(opts.Service)); err != nil {
		return nil, fmt.Errorf("v1.New: register per-sandbox metrics: %w", err)
	}
	s.metrics = m

	mux := http.NewServeMux()
	for _, rt := range routes() {
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	return s.logRequests(s.rejectUnmatched(mux)), nil
}

// wrap turns a route's handler into an http.Handler: bound it in time
// unless it is a stream, authenticate and authorize per the route's
// access, cap the body, and write a returned error through writeError.
func (s *server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.body == jsonBody {
			httplimit.Deadline(w, s.timeout)
		}
		r, err := s.authorize(r, rt.access)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if rt.body != rawBody {
			r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		}
		if err := rt.handle(s, w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// authorize authenticates r (unless the route is public) and returns it
// with the principal in its context, for caller. On error it returns r
// unchanged, to answer with.
func (s *server) authorize(r *http.Request, a access) (*http.Request, error) {
	if a == public {
		return r, nil
	}
	p, err := s.auth.Authenticate(r.Context(), r)
	if err != nil {
		return r, err
	}
	if a == adminOnly && !p.IsAdmin() {
		return r, errorf(CodePermissionDenied, "this route needs an admin token")
	}
	return r.WithContext(auth.WithPrincipal(r.Context(), p)), nil
}

// caller is the service's view of the authenticated principal. A user
// token sees only its owner's sandboxes; an admin sees all.
func caller(r *http.Request) service.Caller {
	p, _ := auth.PrincipalFrom(r.Context()) // set by authorize on every non-public route
	return service.Caller{Owner: p.Owner, Admin: p.IsAdmin(), Quota: service.Quota(p.Quota)}
}

// rejectUnmatched answers requests the route table does not match with the
// JSON error shape (the mux's own answers are plain text), and rejects a
// NUL byte anywhere in the path before any handler sees it.
func (s *server) rejectUnmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.ContainsRune(r.URL.Path, 0) {
			s.writeError(w, r, errorf(CodeInvalidArgument, "the path contains a NUL byte"))
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // not h: the mux sets the path values
			return
		}
		httplimit.Deadline(w, s.timeout) // no route is a stream
		// Let the mux decide between 404, 405 and a redirect (it cleans
		// paths), then answer 404 and 405 in our shape.
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusNotFound:
			s.writeError(w, r, errorf(CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			s.writeErrorStatus(w, r, http.StatusMethodNotAllowed,
				errorf(CodeInvalidArgument, "method %s is not allowed on %s", r.Method, r.URL.Path))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// statusProbe records the status a handler writes and discards the rest.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *statusProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An encoding error here is a broken connection (our types always
	// marshal); the status is already out, there is nothing to answer.
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err in the wire shape of docs/api-v1.md: the status
// and code from classify, Retry-After on capacity_exhausted, and the error
// counted by code. Server errors are logged in full with the request id
// (which the client also gets, in X-Request-Id) and answered with a fixed
// message, so no internal detail or secret reaches the client.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, _ := classify(err)
	s.writeErrorStatus(w, r, apierr.Lookup(code).Status, err)
}

func (s *server) writeErrorStatus(w http.ResponseWriter, r *http.Request, status int, err error) {
	code, msg := classify(err)
	s.metrics.errors.WithLabelValues(string(code)).Inc()
	switch {
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		s.log.DebugContext(r.Context(), "request cancelled", "request_id", requestID(r), "err", err)
	case apierr.DaemonFault(status):
		s.log.ErrorContext(r.Context(), "request failed", "request_id", requestID(r),
			"method", r.Method, "path", r.URL.Path, "code", code, "err", err)
		msg += " (request id " + requestID(r) + ")"
	}
	if code == CodeCapacityExhausted {
		w.Header().Set("Retry-After", apierr.RetryAfter(err))
	}
	writeJSON(w, status, errorBody{Error: errorJSON{Code: code, Message: msg, Retryable: apierr.Lookup(code).Retryable}})
}

// logRequests gives every request an id (X-Request-Id) and logs one line
// when it ends: method, path, status, bytes and duration. Never headers or
// query strings: those carry tokens and file paths. A handler that panics
// is logged with its stack and answered 500 (if it had not answered yet)
// instead of dropping the connection.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := newRequestID()
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		w.Header().Set("X-Request-Id", id)
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "handler panicked", "request_id", id, "panic", v, "stack", string(debug.Stack()))
				if rec.status == 0 {
					s.writeError(rec, r, fmt.Errorf("panic: %v", v))
				}
			}
		}()
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("request_id", id),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", rec.bytes),
			slog.Duration("duration", time.Since(start)))
	})
}

type requestIDKey struct{}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// recorder captures the status and size of a response. Unwrap lets
// http.ResponseController and the WebSocket upgrade reach the real writer
// (the upgrade's 101 still passes through WriteHeader, so it is logged).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
