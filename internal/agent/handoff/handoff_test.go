package handoff_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// offer binds the agent socket and listens on the handoff socket in a
// fresh directory, like the daemon before a container starts.
func offer(t *testing.T) (dir string, sock *os.File, ln *net.UnixListener) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ho") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, err = handoff.Bind(filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "handoff.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return dir, sock, ln
}

func TestHandoff_AgentListensOnTheDaemonsSocket(t *testing.T) {
	dir, sock, ln := offer(t)
	agentPath := filepath.Join(dir, "agent.sock")
	// Bound but not listening: nobody answers yet.
	if c, err := net.Dial("unix", agentPath); err == nil {
		c.Close()
		t.Fatal("the bound socket accepted a connection before the handoff")
	}
	offered := make(chan error, 1)
	go func() { offered <- handoff.Offer(t.Context(), ln, sock, os.Getpid(), nil, nil) }()
	agentLn, token, err := handoff.Take(t.Context(), filepath.Join(dir, "handoff.sock"))
	if err != nil || token != "" {
		t.Fatalf("Take = %q, %v; want no token, no error", token, err)
	}
	defer agentLn.Close()
	if err := <-offered; err != nil {
		t.Fatalf("Offer: %v", err)
	}
	sock.Close() // the daemon drops its copy; the agent's keeps the socket

	go func() {
		if c, err := agentLn.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", agentPath)
	if err != nil {
		t.Fatalf("dial the agent socket after the handoff: %v", err)
	}
	defer c.Close()
	if pid, err := handoff.PeerPID(c); err != nil || pid != os.Getpid() {
		t.Errorf("PeerPID = %d, %v; want the listener's pid %d", pid, err, os.Getpid())
	}
}

func TestHandoff_WrongPeerGetsNothing(t *testing.T) {
	dir, sock, ln := offer(t)
	var refused []int
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	offered := make(chan error, 1)
	// Expect a pid that is not ours: the taker is refused every time.
	go func() {
		offered <- handoff.Offer(ctx, ln, sock, os.Getpid()+1, []byte("secret"), func(p int) { refused = append(refused, p) })
	}()
	agentLn, token, err := handoff.Take(ctx, filepath.Join(dir, "handoff.sock"))
	if err == nil || token != "" {
		if agentLn != nil {
			agentLn.Close()
		}
		t.Fatalf("Take = %q, %v from a process the offer did not expect", token, err)
	}
	if err := <-offered; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Offer = %v, want the deadline", err)
	}
	if len(refused) == 0 || refused[0] != os.Getpid() {
		t.Errorf("refused peers = %v, want our pid %d", refused, os.Getpid())
	}
}

// TestHandoff_TokenComesWithTheSocket: the daemon's token reaches the
// agent with the socket, whatever its length up to MaxToken; a longer
// one is refused before anything is sent.
func TestHandoff_TokenComesWithTheSocket(t *testing.T) {
	for _, want := range []string{"t", strings.Repeat("a", 64), strings.Repeat("z", handoff.MaxToken)} {
		dir, sock, ln := offer(t)
		offered := make(chan error, 1)
		go func() { offered <- handoff.Offer(t.Context(), ln, sock, os.Getpid(), []byte(want), nil) }()
		agentLn, got, err := handoff.Take(t.Context(), filepath.Join(dir, "handoff.sock"))
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		agentLn.Close()
		if err := <-offered; err != nil {
			t.Fatalf("Offer: %v", err)
		}
		if got != want {
			t.Errorf("token of %d bytes: got %d bytes %.16q", len(want), len(got), got)
		}
	}
	_, sock, ln := offer(t)
	if err := handoff.Offer(t.Context(), ln, sock, os.Getpid(), make([]byte, handoff.MaxToken+1), nil); err == nil {
		t.Error("Offer of an oversized token: want an error")
	}
}

// TestTokenFile_ReplacesWhatWasPlanted: WriteTokenFile removes whatever
// the sandbox left at the token's name (a symlink to a file of its own, a
// directory) and writes root's 0400 file; RemoveTokenFile removes it.
func TestTokenFile_ReplacesWhatWasPlanted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, handoff.TokenFileName)
	planted := filepath.Join(dir, "mine")
	if err := os.WriteFile(planted, []byte("known"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, plant := range []func() error{
		func() error { return os.Symlink(planted, path) },
		func() error { return os.MkdirAll(filepath.Join(path, "sub"), 0o755) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if err := handoff.WriteTokenFile(dir, []byte("daemons")); err != nil {
			t.Fatalf("WriteTokenFile: %v", err)
		}
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o400 {
			t.Fatalf("token file: %v, %v", fi, err)
		}
		if b, _ := os.ReadFile(path); string(b) != "daemons" {
			t.Errorf("token file holds %q", b)
		}
		if b, _ := os.ReadFile(planted); string(b) != "known" {
			t.Errorf("the planted symlink's target was written: %q", b)
		}
		if err := handoff.RemoveTokenFile(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after RemoveTokenFile: %v", err)
		}
	}
}
