package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// TestPark_WakeKeepsWhatConfigureHandedOver: the daemon hands a running
// agent a new token and env (PUT config: a pool claim, a restore from a
// memory image), then parks and wakes it (SIGUSR1, SIGUSR2: a gVisor
// hibernate and resume). After the wake the agent takes the token it was
// handed, refuses the one it booted with, and its processes still get the
// env it was handed. On the old code each wake built a new handler from
// the boot token: the handed token was refused (401) and the boot token
// taken again.
func TestPark_WakeKeepsWhatConfigureHandedOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the agent's server and a process")
	}
	// The parking signals must never take their default action (exit) on
	// the test binary, whether or not the agent has registered for them
	// yet: this channel keeps them handled for the whole test.
	held := make(chan os.Signal, 4)
	signal.Notify(held, sigPark, sigUnpark)
	defer signal.Stop(held)

	dir, err := os.MkdirTemp("", "tbx") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "agent.sock")
	const bootToken, handedToken = "boot-token-0123456789", "handed-token-0123456789"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{socket: sock, token: bootToken, gvisor: true}, slog.New(slog.DiscardHandler))
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after its context ended")
		}
	}()

	boot := agent.NewClient(agent.UnixDialer(sock), bootToken)
	defer boot.Close()
	handed := agent.NewClient(agent.UnixDialer(sock), handedToken)
	defer handed.Close()
	// Serving (answering over HTTP) means the parker is registered.
	waitFor(t, "the agent serves", func() bool { return boot.Health(ctx) == nil })
	if err := boot.Configure(ctx, agent.Configuration{Env: map[string]string{"HANDED": "over"}, NewToken: handedToken}); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if err := handed.Check(ctx); err != nil {
		t.Fatalf("the handed token before the park: %v", err)
	}

	// Park: the agent closes its socket and says so beside it.
	if err := unix.Kill(os.Getpid(), sigPark); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, parkedName)
	waitFor(t, "the agent parks", func() bool { _, err := os.Stat(marker); return err == nil })
	// Wake: it listens again at the same path.
	if err := unix.Kill(os.Getpid(), sigUnpark); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent serves again", func() bool {
		_, err := os.Stat(marker)
		return errors.Is(err, os.ErrNotExist) && boot.Health(ctx) == nil
	})

	if err := handed.Check(ctx); err != nil {
		t.Errorf("after the wake the agent refuses the token it was handed: %v", err)
	}
	if err := boot.Check(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("after the wake the boot token: %v; want it refused", err)
	}
	res, err := handed.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", `printf %s "$HANDED"`}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec after the wake: %v", err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "over" {
		t.Errorf("after the wake a process gets HANDED=%q (stderr %q); want the handed env's %q", got, res.Stderr, "over")
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline (a busy CI box).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
