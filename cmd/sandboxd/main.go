// Command sandboxd is the sandbox daemon: it creates isolated sandboxes, runs
// commands and moves files inside them, exposes their ports, and serves the
// native API and the E2B and Daytona facades on one loopback listener.
//
//	sandboxd [flags]                 run the daemon
//	sandboxd token create|list|revoke   manage API tokens (operators)
//	sandboxd cluster init|join|members|leave   cluster mode (docs/cluster.md)
//	sandboxd mcp [--url URL] [--token-file FILE]   an MCP server on stdio (docs/mcp.md)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/mcp"
	"github.com/sandboxd/sandboxd/internal/operator"
	"github.com/sandboxd/sandboxd/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "token" {
		os.Exit(operator.TokenCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "cluster" {
		os.Exit(operator.ClusterCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := mcp.Command(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr, mcp.Env{Getenv: os.Getenv, Getwd: os.Getwd}, version.Version)
		stop()
		os.Exit(code)
	}
	cfg, err := config.Parse(os.Args[1:], os.LookupEnv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: parseLevel(cfg.LogLevel)}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("sandboxd stopped", "err", err)
		os.Exit(1)
	}
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
