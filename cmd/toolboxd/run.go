package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
	"github.com/sandboxd/sandboxd/internal/agent/server"
	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
)

// stopGrace is how long processes get between SIGTERM and SIGKILL when the
// agent stops. Docker's default stop timeout is 10 s; stay well inside it.
const stopGrace = 5 * time.Second

// run serves until ctx ends, then stops every process and returns nil.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	pid1 := os.Getpid() == 1
	var waiter waiter = reaper.Own{}
	var atExec func(pid int)
	var wg sync.WaitGroup
	defer wg.Wait()
	if pid1 {
		reserveThreads(reservedThreads) // see oom.go
		r := reaper.New(log)
		waiter, atExec = guardOOM(r, log)
		if cfg.gvisor {
			// gVisor refuses PTRACE_TRACEME to the child of a process that
			// is not dumpable (Linux does not), and its sentry has no OOM
			// killer of its own: the hold would fail every start and order
			// nothing.
			atExec = nil
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel() // after the processes are gone: runs before wg.Wait
		wg.Go(func() { _ = r.Run(rctx) })
	}

	users := account.NewDirectory(account.DefaultPasswd)
	// The sandbox's environment is the agent's own (the daemon sets it on the
	// container), less the agent's control variables: every process gets it,
	// under what the request sets.
	procs := process.New(process.Options{Users: users, Waiter: waiter, AtExec: atExec, Env: sandboxEnv(os.Environ()), Log: log})
	fsys := filesystem.New(filesystem.Options{Users: users, Log: log, Protected: ownPaths(cfg.socket)})
	defer fsys.Close()

	ln, token, err := serveSocket(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it served: nothing to clean up
		}
		return err
	}
	if token != "" {
		cfg.token = token // the daemon's, handed over with the socket
	}
	if cfg.token == "" {
		ln.Close()
		return errNoToken
	}
	// One handler for the agent's whole life: it holds what the daemon's
	// PUT config hands over (the token, and through procs the env), and
	// every server the park/wake loop below builds serves it. A handler
	// per server would start from the boot token again after each wake,
	// refusing the token a claim or a restore handed over.
	handler := server.NewHandler(server.Config{
		Token: cfg.token, Process: procs, Filesystem: fsys, Users: users, Log: log,
	})
	newServer := func() *http.Server {
		srv := &http.Server{
			Handler: handler,
			// Streams live as long as processes do: no read or write timeout.
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			Protocols:         new(http.Protocols),
		}
		srv.Protocols.SetHTTP1(true)
		return srv
	}
	// Under gVisor the daemon parks the agent before a checkpoint and
	// wakes it after the restore (see park.go).
	var parking *parker
	if cfg.gvisor && cfg.handoff == "" {
		parking = newParker()
		defer parking.stop()
	}
	var srv *http.Server
	for {
		srv = newServer()
		var hijacked *connSet
		if parking != nil {
			hijacked = trackHijacked(srv)
		}
		serveErr := make(chan error, 1)
		go func() { serveErr <- srv.Serve(ln) }()
		log.Info("toolboxd serving", "socket", cfg.socket, "handed_over", cfg.handoff != "", "pid1", pid1)
		var wake <-chan struct{}
		if parking != nil {
			wake = parking.parkRequests()
		}
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-wake:
			if ln, err = parking.park(ctx, srv, hijacked, cfg.socket, log); err != nil {
				return err
			}
			if ln != nil {
				continue
			}
		}
		break
	}

	// Stop: processes first (their streams then end with their end
	// events), then everything else in the sandbox, then the server.
	sctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if err := procs.Shutdown(sctx); err != nil {
		log.Warn("stopping processes", "err", err)
	}
	if pid1 {
		killAll(sctx)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	defer hcancel()
	if err := srv.Shutdown(hctx); err != nil {
		srv.Close()
	}
	if cfg.handoff == "" {
		_ = os.Remove(cfg.socket) // a handed-over socket is the daemon's to remove
	}
	log.Info("toolboxd stopped")
	return nil
}

// serveSocket is the listener the agent serves on: the socket the daemon
// hands over, with the token (the runc-class way of both runtimes: see
// package agent/handoff), or one it creates itself at cfg.socket.
func serveSocket(ctx context.Context, cfg config, log *slog.Logger) (net.Listener, string, error) {
	if cfg.handoff == "" {
		ln, err := listen(cfg.socket)
		return ln, "", err
	}
	log.Info("waiting for the daemon to hand over the agent socket", "handoff", cfg.handoff)
	return handoff.Take(ctx, cfg.handoff)
}

// listen opens the unix socket, replacing a stale one from an earlier run
// of the sandbox. The socket is made 0600 (by the umask, before anyone can
// connect): only root (the daemon, through the bind mount) may connect.
// Under gVisor the socket is the host's, made by runsc's gofer, which
// refuses a chmod; its mode is then the gofer's, and a process that
// reaches it still needs the agent token.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen: remove stale socket: %w", err)
	}
	old := unix.Umask(0o177) // called before any other goroutine makes files
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil && !errors.Is(err, unix.EPERM) {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// killAll stops every other process in the sandbox (orphans and daemons
// the tracked processes left behind): SIGTERM to all (kill(-1) never
// signals PID 1 itself), then SIGKILL to what is left when ctx ends. The
// reaper collects them.
func killAll(ctx context.Context) {
	_ = unix.Kill(-1, unix.SIGTERM)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if unix.Kill(-1, 0) != nil { // ESRCH: nobody left
			return
		}
		select {
		case <-ctx.Done():
			_ = unix.Kill(-1, unix.SIGKILL)
			return
		case <-t.C:
		}
	}
}

// sandboxEnv is the environment every process in the sandbox starts with:
// the container's variables except the agent's own (SANDBOXD_*) and those
// the agent sets per user (HOME, USER, LOGNAME) or itself (PATH).
func sandboxEnv(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.HasPrefix(k, "SANDBOXD_") {
			continue
		}
		switch k {
		case "HOME", "USER", "LOGNAME", "PATH", "HOSTNAME":
			continue
		}
		env[k] = v
	}
	return env
}

// ownPaths are the agent's socket directory and its binary: a file call
// that removed or renamed them would cut the daemon off from the sandbox.
func ownPaths(socket string) []string {
	paths := []string{filepath.Dir(socket)}
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, exe)
	}
	return paths
}
