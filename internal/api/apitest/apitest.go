// Package apitest runs the native API over the real stack for tests: a
// SQLite store in a temporary directory, the Docker runtime, a real keyring,
// the real agent binary, the service and the v1 handler on a loopback
// httptest server. Nothing is faked.
//
// An Env is expensive (a build of the agent, a store, an engine
// connection) and is meant to be shared by a test package: build it in
// TestMain with New and Close it there, and have each test make its own
// sandboxes (or share read-only ones). Env.Close destroys every sandbox the
// Env's service created.
package apitest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Images built by scripts/build-images.sh.
const (
	BaseImage    = "sandboxd/base:bookworm" // the daemon's default image
	BusyboxImage = "sandboxd/busybox:latest"
)

// Options configure New.
type Options struct {
	// AgentBinary is the static toolboxd to run in sandboxes (see
	// runtimetest.BuildAgent). Required.
	AgentBinary string
	// Logger receives the daemon's logs (default: discard).
	Logger *slog.Logger
}

// Env is a running API over the real stack.
type Env struct {
	// URL is the API's base URL (http://127.0.0.1:port).
	URL string
	// AdminToken is an admin token's plaintext.
	AdminToken string
	Service    *service.Service
	Store      *store.Store
	Registry   *prometheus.Registry

	dir    string
	nodeID string
	server *httptest.Server
	daemon *daemon.Daemon
}

// New builds the stack — the same assembly as the sandboxd binary
// (internal/daemon) — and starts serving. The caller must Close it.
func New(ctx context.Context, opts Options) (_ *Env, err error) {
	if opts.AgentBinary == "" {
		return nil, errors.New("apitest: AgentBinary is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// A short directory: agent socket paths must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "apitest")
	if err != nil {
		return nil, err
	}
	e := &Env{dir: dir, nodeID: "apitest-" + filepath.Base(dir)}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	cfg, err := config.Parse([]string{
		"--data-dir", dir,
		"--listen", "127.0.0.1:0",
		"--node-id", e.nodeID,
		"--agent-binary", opts.AgentBinary,
		"--default-image", BaseImage,
		"--tls-listen", "127.0.0.1:0",
		"--cpu-budget", "1000000", "--memory-budget", "1000000",
		"--pool", "none", // the background work (the pool's refill) does not run here
		"--registry-allow", "127.0.0.1", // pulls stay on this machine
	}, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.daemon, err = daemon.New(ctx, cfg, ln, opts.Logger, daemon.Options{})
	if err != nil {
		ln.Close()
		return nil, err
	}
	e.Service, e.Store, e.Registry = e.daemon.Service, e.daemon.Store, e.daemon.Registry
	if e.AdminToken, err = e.IssueToken(ctx, auth.RoleAdmin, ""); err != nil {
		return nil, err
	}
	e.server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: e.daemon.Handler}}
	e.server.Start()
	e.URL = e.server.URL
	return e, nil
}

// NodeID is the daemon's node id, the sandboxd.node label of every
// container it makes.
func (e *Env) NodeID() string { return e.nodeID }

// DataDir is the daemon's data directory (volumes live in its volumes/).
func (e *Env) DataDir() string { return e.dir }

// IssueToken stores a new token and returns its plaintext.
func (e *Env) IssueToken(ctx context.Context, role auth.Role, owner string) (string, error) {
	plaintext, tok, hash := auth.Generate(role, owner)
	rec := store.APIToken{ID: tok.ID, Name: "apitest", Role: store.Role(role), Owner: owner}
	if err := e.Store.CreateAPIToken(ctx, &rec, hash); err != nil {
		return "", fmt.Errorf("create token: %w", err)
	}
	return plaintext, nil
}

// Close stops serving, destroys every sandbox the Env created (containers
// included) and removes its directory. It keeps the first error.
func (e *Env) Close() error {
	if e.server != nil {
		e.server.Close()
	}
	var errs []error
	if e.Service != nil {
		errs = append(errs, e.destroyAll())
	}
	if e.daemon != nil {
		errs = append(errs, e.daemon.Close())
	}
	errs = append(errs, os.RemoveAll(e.dir))
	return errors.Join(errs...)
}

func (e *Env) destroyAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := service.Caller{Admin: true}
	var errs []error
	for {
		sbs, _, err := e.Service.List(ctx, admin, service.ListFilter{Limit: store.MaxListLimit})
		if err != nil || len(sbs) == 0 {
			return errors.Join(append(errs, err)...)
		}
		for _, sb := range sbs {
			if err := e.Service.Destroy(ctx, admin, sb.ID); err != nil && !errors.Is(err, service.ErrNotFound) {
				return errors.Join(append(errs, fmt.Errorf("destroy %s: %w", sb.ID, err))...)
			}
		}
	}
}

// Do sends a request to the API with token as the bearer credential ("" for
// none) and returns the response; the caller closes its body.
func (e *Env) Do(ctx context.Context, token, method, path string, body string, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return http.DefaultClient.Do(req)
}
