package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

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
