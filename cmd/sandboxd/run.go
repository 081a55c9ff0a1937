package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/sandboxd/sandboxd/internal/admission"
	v1 "github.com/sandboxd/sandboxd/internal/api/v1"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/version"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// reapEvery is how often expired sandboxes are looked for: the granularity
// of timeouts.
const reapEvery = time.Second

// run builds every part in order and serves until ctx is cancelled. A
// cancelled context is a clean shutdown, not an error.
func run(ctx context.Context, cfg config.Daemon, logger *slog.Logger) error {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	agentBinary, err := filepath.Abs(cfg.AgentBinary)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	if _, err := os.Stat(agentBinary); err != nil {
		return fmt.Errorf("agent binary (build it with `make build` or pass --agent-binary): %w", err)
	}

	st, err := store.Open(ctx, filepath.Join(dataDir, "sandboxd.db"), store.Options{})
	if err != nil {
		return fmt.Errorf("store.Open: %w", err)
	}
	defer st.Close()

	keyring, err := secrets.OpenKeyring(dataDir)
	if err != nil {
		return fmt.Errorf("secrets.OpenKeyring: %w", err)
	}
	rt, err := docker.New(docker.Options{NodeID: cfg.NodeID, SocketRoot: socketRoot(dataDir), Logger: logger})
	if err != nil {
		return fmt.Errorf("docker.New: %w", err)
	}
	defer rt.Close()
	volumes, err := volume.New(filepath.Join(dataDir, "volumes"))
	if err != nil {
		return fmt.Errorf("volume.New: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	routes := ingress.NewTable()
	svc, err := service.New(service.Config{
		NodeID:       cfg.NodeID,
		DefaultImage: cfg.DefaultImage,
		AgentBinary:  agentBinary,
	}, service.Deps{
		Store:     st,
		Runtime:   rt,
		Router:    routes,
		Admission: admission.New(admission.Budget{MilliCPU: cfg.MilliCPU, MemoryMB: cfg.MemoryMB}),
		Volumes:   volumes,
		Keyring:   keyring,
		Logger:    logger,
		Metrics:   service.NewMetrics(reg),
	})
	if err != nil {
		return fmt.Errorf("service.New: %w", err)
	}
	// Before serving: finish or undo whatever a previous process left.
	if err := svc.Reconcile(ctx, true); err != nil {
		logger.Warn("startup reconcile incomplete; the periodic pass retries", "err", err)
	}

	tokenFile, err := ensureAdminToken(ctx, st, dataDir)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	logger.Info("admin token ready", "file", tokenFile)

	api, err := v1.New(v1.Options{
		Service:  svc,
		Auth:     auth.NewAuthenticator(tokenLookup{st}),
		Tokens:   st,
		Logger:   logger,
		Registry: reg,
	})
	if err != nil {
		return fmt.Errorf("v1.New: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"status\":\"ok\",\"version\":%q}\n", version.Version)
	})
	mux.Handle("/", api)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// No read or write timeouts: exec streams and file transfers are long.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("sandboxd listening", "addr", ln.Addr().String(), "data_dir", dataDir, "version", version.Version)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		svc.RunBackground(gctx, reapEvery, cfg.ReconcileEvery)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	logger.Info("sandboxd stopped cleanly")
	return nil
}

// socketRoot is where the per-sandbox agent socket directories live: in
// the data directory when its path is short enough for unix socket
// addresses (108 bytes with the sandbox id and file name), else in a
// directory under /tmp named by a hash of the data directory.
func socketRoot(dataDir string) string {
	root := filepath.Join(dataDir, "run")
	if len(root) <= 32 {
		return root
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), "sandboxd-"+hex.EncodeToString(sum[:6]))
}
