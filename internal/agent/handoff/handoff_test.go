package handoff_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
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
	go func() { offered <- handoff.Offer(t.Context(), ln, sock, os.Getpid(), nil) }()
	agentLn, err := handoff.Take(t.Context(), filepath.Join(dir, "handoff.sock"))
	if err != nil {
		t.Fatalf("Take: %v", err)
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
		offered <- handoff.Offer(ctx, ln, sock, os.Getpid()+1, func(p int) { refused = append(refused, p) })
	}()
	agentLn, err := handoff.Take(ctx, filepath.Join(dir, "handoff.sock"))
	if err == nil {
		agentLn.Close()
		t.Fatal("Take succeeded from a process the offer did not expect")
	}
	if err := <-offered; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Offer = %v, want the deadline", err)
	}
	if len(refused) == 0 || refused[0] != os.Getpid() {
		t.Errorf("refused peers = %v, want our pid %d", refused, os.Getpid())
	}
}
