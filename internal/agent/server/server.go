package server

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/files"
	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	"github.com/sandboxd/sandboxd/internal/agent/server/logbook"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
)

// HeaderToken carries the agent token on every request but GET /health.
const HeaderToken = "X-Access-Token"

// PathConfig is the daemon's route for what it hands the agent once it
// runs: PUT a [Configuration]. Paths under /sandboxd/ are the daemon's
// own; the client's Transport, which facades proxy through, never sends
// them.
const PathConfig = "/sandboxd/config"

// Configuration is the body of PUT PathConfig.
type Configuration struct {
	// Env replaces what every process started from then on gets after the
	// agent's own environment (process.Service.SetEnv): the sandbox's
	// secret env, and all of its env for a sandbox claimed from the pool.
	Env map[string]string `json:"env"`
	// Token, when set, replaces the agent token from the next request on
	// (the token a pooled sandbox booted with stops working).
	Token string `json:"token,omitempty"`
}

// maxConfigBody bounds a PathConfig body: the daemon allows 2 × 256
// variables of at most 4 KiB each, and JSON may escape a byte in six.
const maxConfigBody = 16 << 20

// minTokenLen is the shortest token PathConfig accepts.
const minTokenLen = 16

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
// /filesystem.Filesystem/*, GET and POST /files, PUT [PathConfig], GET
// logbook.Path (the sandbox's log of process output), and
// CONNECT tunnels to sandbox-local ports (package tunnel). Every request except GET /health
// must carry [HeaderToken] equal to cfg.Token, or it is answered 401 with
// a Connect error body whose code is "unauthenticated".
//
// The handler holds what PUT [PathConfig] hands over (the token; the env
// lives in cfg.Process): an agent that serves again after closing its
// listener serves the same handler (a new one starts from cfg.Token).
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
	token := new(atomic.Pointer[[]byte])
	want := []byte(cfg.Token)
	token.Store(&want)
	mux.HandleFunc("PUT "+PathConfig, configure(cfg.Process, token))
	mux.Handle("GET "+logbook.Path, logbook.Handler(cfg.Process.Logbook()))
	cfg.Process.Handle(mux)
	cfg.Filesystem.Handle(mux)
	files.New(files.Options{Users: cfg.Users, Log: cfg.Log}).Handle(mux)
	return authenticate(token, mux, tunnel.Handler())
}

// configure serves PUT PathConfig: a Configuration whose variable names
// are valid and whose token, if any, is long enough is applied; anything
// else is 400 and changes nothing.
func configure(procs *process.Service, token *atomic.Pointer[[]byte]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var c Configuration
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxConfigBody))
		if err := dec.Decode(&c); err != nil || dec.More() {
			http.Error(w, "the body must be one JSON configuration", http.StatusBadRequest)
			return
		}
		for k, v := range c.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				http.Error(w, fmt.Sprintf("variable %q: a name is non-empty without '=' or NUL, a value without NUL", k), http.StatusBadRequest)
				return
			}
		}
		if c.Token != "" && len(c.Token) < minTokenLen {
			http.Error(w, fmt.Sprintf("a token has at least %d bytes", minTokenLen), http.StatusBadRequest)
			return
		}
		procs.SetEnv(c.Env)
		if c.Token != "" {
			b := []byte(c.Token)
			token.Store(&b)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// authenticate admits GET /health as is and every other request only with
// the right token; authenticated CONNECT requests go to connect (a ServeMux
// does not route CONNECT's authority-form targets).
func authenticate(token *atomic.Pointer[[]byte], next, connect http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		got, want := []byte(r.Header.Get(HeaderToken)), *token.Load()
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
