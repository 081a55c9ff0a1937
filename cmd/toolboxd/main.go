// Command toolboxd is the sandbox agent: PID 1 of every sandbox. It serves
// the agent API (package agent) on a unix socket, reaps orphaned
// processes, and on SIGTERM stops every process in the sandbox and exits 0.
//
// Configuration:
//
//	--listen PATH            socket path (env SANDBOXD_AGENT_SOCKET,
//	                         default /run/sandboxd/agent.sock)
//	--handoff PATH           take the listening socket from the daemon over
//	                         the handoff socket at PATH instead of creating
//	                         it (env SANDBOXD_AGENT_HANDOFF; the Docker
//	                         runtime sets it: the socket directory is
//	                         read-only in the sandbox, see package
//	                         agent/handoff); --listen is then ignored
//	SANDBOXD_AGENT_ISOLATION "gvisor" under gVisor: children are not held
//	                         at their exec (the agent is not dumpable, and
//	                         gVisor then refuses the child's PTRACE_TRACEME)
//	SANDBOXD_AGENT_TOKEN     the agent token of a sandbox created before
//	                         the daemon handed it over otherwise; removed
//	                         from the environment at once (see takeToken)
//	                         so no child, nor /proc/1/environ, ever shows
//	                         it
//
// The token comes with the socket over the handoff socket, or, under
// gVisor, from a file of the socket directory the agent removes (see
// token.go); without one the agent refuses to serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
)

// Environment variables toolboxd reads (only here).
const (
	envToken   = "SANDBOXD_AGENT_TOKEN"
	envSocket  = "SANDBOXD_AGENT_SOCKET"
	envHandoff = "SANDBOXD_AGENT_HANDOFF"
	// envIsolation is "gvisor" under gVisor: children are not held at
	// their exec there (see run).
	envIsolation = "SANDBOXD_AGENT_ISOLATION"
)

const defaultSocket = "/run/sandboxd/agent.sock"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Before the token is in memory (an exec, takeToken's re-exec, makes
	// a process dumpable again: the new image comes back here).
	if err := undumpable(); err != nil {
		log.Warn("make the agent non-dumpable", "err", err)
	}
	// Take the token before anything else can read or inherit it.
	token, err := takeToken()
	if err != nil {
		log.Warn("agent token", "err", err)
	}
	cfg, err := parseConfig(os.Args[1:], token)
	if err == nil && cfg.handoff == "" {
		// gVisor's way (token.go); the handoff brings it otherwise. The
		// daemon's file wins over the environment, as the handoff's
		// token does.
		var fromFile string
		if fromFile, err = takeTokenFile(filepath.Join(filepath.Dir(cfg.socket), handoff.TokenFileName)); fromFile != "" {
			cfg.token = fromFile
		}
		if err == nil && cfg.token == "" {
			err = errNoToken
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "toolboxd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("toolboxd exiting", "err", err)
		os.Exit(1)
	}
}

// config is everything toolboxd is told.
type config struct {
	socket  string
	handoff string // when set, the daemon hands the socket over here
	token   string // from the environment; the handoff's replaces it
	gvisor  bool   // envIsolation
}

// errNoToken: nothing handed the agent a token.
var errNoToken = errors.New("no agent token (handoff, token file or " + envToken + "): refusing to serve without one")

func parseConfig(args []string, token string) (config, error) {
	fs := flag.NewFlagSet("toolboxd", flag.ContinueOnError)
	socket := os.Getenv(envSocket)
	if socket == "" {
		socket = defaultSocket
	}
	fs.StringVar(&socket, "listen", socket, "unix socket to serve on")
	handoff := fs.String("handoff", os.Getenv(envHandoff), "take the listening socket from the daemon over this handoff socket")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	return config{socket: socket, handoff: *handoff, token: token, gvisor: os.Getenv(envIsolation) == "gvisor"}, nil
}
