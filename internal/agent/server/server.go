package server

import (
	"crypto/subtle"
	"log/slog"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/files"
	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
)

// HeaderToken carries the agent token on every request but GET /health.
const HeaderToken = "X-Access-Token"

// Config configures [NewHandler].
type Config struct {
	// Token is the agent token. Empty refuses every authenticated request.
	Token string
	// Process serves process.Process. The caller keeps it to shut its
	// processes down; nil serves a default service nobody can shut down
	// (for tests).
	Process *process.Service
	// Filesystem serves filesystem.Filesystem. The caller keeps it to close
	// its watchers; nil serves a default service (for tests).
	Filesystem *filesystem.Service
	// Users resolves request users; default /etc/passwd.
	Users *account.Directory
	// Log receives server-side failures; default discards.
	Log *slog.Logger
}

// NewHandler returns the agent's HTTP API on one mux: GET /health
// (unauthenticated, 204), the Connect services /process.Process/* and
// /filesystem.Filesystem/*, GET and POST /files, and CONNECT tunnels to
// sandbox-local ports (package tunnel). Every request except GET /health
// must carry [HeaderToken] equal to cfg.Token, or it is answered 401 with
// a Connect error body whose code is "unauthenticated".
//
// The handler streams: serve it with no read or write timeout.
func NewHandler(cfg Config) http.Handler {
	if cfg.Users == nil {
		cfg.Users = account.NewDirectory(account.DefaultPasswd)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Process == nil {
		cfg.Process = process.New(process.Options{Users: cfg.Users, Log: cfg.Log})
	}
	if cfg.Filesystem == nil {
		cfg.Filesystem = filesystem.New(filesystem.Options{Users: cfg.Users, Log: cfg.Log})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	cfg.Process.Handle(mux)
	cfg.Filesystem.Handle(mux)
	files.New(files.Options{Users: cfg.Users, Log: cfg.Log}).Handle(mux)
	return authenticate(cfg.Token, mux, tunnel.Handler())
}

// authenticate admits GET /health as is and every other request only with
// the right token; authenticated CONNECT requests go to connect (a ServeMux
// does not route CONNECT's authority-form targets).
func authenticate(token string, next, connect http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		got := []byte(r.Header.Get(HeaderToken))
		if len(want) == 0 || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":"unauthenticated","message":"missing or invalid access token"}`))
			return
		}
		if r.Method == http.MethodConnect {
			connect.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
