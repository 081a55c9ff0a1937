package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
)

// run builds the daemon and serves until ctx is cancelled. A cancelled
// context is a clean shutdown, not an error.
func run(ctx context.Context, cfg config.Daemon, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		// --allow-public: config refuses this address otherwise.
		logger.Warn("the API listens beyond loopback in plain HTTP: tokens cross the network in clear; serve users on --https-listen and keep --listen on a network only the nodes reach (docs/deploy.md)",
			"listen", ln.Addr().String())
	}
	if cfg.PprofListen != "" {
		stop, err := servePprof(cfg.PprofListen, logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	d, err := daemon.New(ctx, cfg, ln, logger, daemon.Options{})
	if err != nil {
		ln.Close()
		return err
	}
	defer d.Close()
	logger.Info("admin token ready", "file", d.AdminTokenFile)
	if err := d.Serve(ctx); err != nil {
		return err
	}
	logger.Info("sandboxd stopped cleanly")
	return nil
}

// servePprof serves net/http/pprof on addr (config has checked that it is
// a loopback address) on its own mux and server, never the API's, until
// stop is called.
func servePprof(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger.Warn("serving pprof", "addr", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server", "err", err)
		}
	}()
	return func() {
		srv.Close()
		<-done
	}, nil
}
