package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	sbruntime "github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// These tests play the hostile sandbox's attack for real: code inside a sandbox
// listens on a socket and answers the daemon's client like a hostile
// agent (runtimetest/fakeagent). Whatever it sends, each call must fail
// on its own, soon, and the daemon's heap must not grow by more than
// hostileHeapBound. The fake's socket is reached here directly, as if it
// had been planted where the daemon dials (the runtime's peer check is
// tested in runtime/docker): this is the second line of defence.
const (
	// hostileHeapBound is generous: the bombs are 1 GiB and more.
	hostileHeapBound = 64 << 20
	// hostileTimeBound: each call must give up by itself well before its
	// context (hostileCallTimeout) would end it.
	hostileTimeBound   = 15 * time.Second
	hostileCallTimeout = 45 * time.Second
)

var (
	fakeOnce sync.Once
	fakeBin  string
	fakeErr  error
)

// hostileAgent starts fakeagent in mode inside a fresh sandbox, listening
// on a socket in a host directory bind-mounted into it, and returns the
// socket's host path. The sandbox is destroyed when t ends.
func hostileAgent(t *testing.T, mode string) string {
	t.Helper()
	d := dockerSetup(t)
	fakeOnce.Do(func() { fakeBin, fakeErr = runtimetest.BuildFakeAgent(context.Background(), d.dir) })
	if fakeErr != nil {
		t.Fatalf("build fake agent: %v", fakeErr)
	}
	share, err := os.MkdirTemp("", "fa") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(share) })
	bin, err := os.ReadFile(fakeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "fakeagent"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := d.newSandboxWith(t.Context(), func(sp *sbruntime.Spec) {
		sp.Mounts = []sbruntime.Mount{{HostPath: share, Path: "/mnt/fake"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.destroy(s) })
	p, err := s.client.StartProcess(t.Context(), agent.StartRequest{
		Cmd: []string{"/mnt/fake/fakeagent", "-mode", mode, "-listen", "/mnt/fake/fake.sock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var out []byte
	for !bytes.Contains(out, []byte("listening")) {
		o, err := p.Recv()
		if err != nil {
			t.Fatalf("fake agent did not start: %v (output %q)", err, out)
		}
		out = append(out, o.Data...)
	}
	return filepath.Join(share, "fake.sock")
}

// heapWatch samples the heap until stop is called and reports the
// largest growth seen over the starting point, in two ways: the peak of
// HeapInuse (sampled) and the growth of HeapSys (address space the heap
// took from the OS, which never shrinks: a brief spike between samples
// still shows there).
type heapWatch struct {
	done      chan struct{}
	wg        sync.WaitGroup
	inuse0    uint64
	sys0      uint64
	peakInuse uint64
	sys       uint64
}

func watchHeap() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &heapWatch{done: make(chan struct{}), inuse0: ms.HeapInuse, sys0: ms.HeapSys, peakInuse: ms.HeapInuse}
	w.wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			w.peakInuse, w.sys = max(w.peakInuse, ms.HeapInuse), ms.HeapSys
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// stop ends sampling and returns the growth of the peak in use and of
// the heap's address space.
func (w *heapWatch) stop() (inuse, sys int64) {
	close(w.done)
	w.wg.Wait()
	return int64(w.peakInuse - w.inuse0), int64(w.sys) - int64(w.sys0)
}

// bounded runs call and fails t unless it returns an error of its own
// (not its context's) within hostileTimeBound with the heap bounded.
func bounded(t *testing.T, what string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hostileCallTimeout)
	defer cancel()
	w := watchHeap()
	begin := time.Now()
	err := call(ctx)
	took := time.Since(begin)
	inuse, sys := w.stop()
	t.Logf("%s: %v after %s; heap in use +%d KiB, heap address space +%d KiB", what, err, took.Round(time.Millisecond), inuse>>10, sys>>10)
	switch {
	case err == nil:
		t.Errorf("%s: succeeded against a hostile agent", what)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		t.Errorf("%s: still reading when its context ended (%s): %v", what, took, err)
	case took > hostileTimeBound:
		t.Errorf("%s: took %s to give up, want under %s", what, took, hostileTimeBound)
	}
	if inuse > hostileHeapBound || sys > hostileHeapBound {
		t.Errorf("%s: heap grew by %d MiB in use / %d MiB address space, want at most %d MiB", what, inuse>>20, sys>>20, hostileHeapBound>>20)
	}
}

// hostileCalls are the client calls the tests aim at a hostile agent:
// a stream (exec), a unary Connect call, a plain-HTTP upload, and the
// sandbox's log, read and followed; the port tunnel is added by
// runHostile.
func hostileCalls(c *agent.Client) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"exec": func(ctx context.Context) error {
			_, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"true"}})
			return err
		},
		"stat": func(ctx context.Context) error {
			_, err := c.Filesystem().Stat(ctx, connect.NewRequest(&fsrpc.StatRequest{Path: "/"}))
			return err
		},
		"upload": func(ctx context.Context) error {
			return c.Upload(ctx, "/tmp/x", strings.NewReader("x"), "")
		},
		"logs": func(ctx context.Context) error {
			_, err := c.Logs(ctx, agent.LogQuery{}, func([]agent.LogLine) error { return nil })
			return err
		},
		"logs-follow": func(ctx context.Context) error {
			_, err := c.Logs(ctx, agent.LogQuery{Follow: true}, func([]agent.LogLine) error { return nil })
			return err
		},
	}
}

// runHostile aims each named call at a fakeagent in mode.
func runHostile(t *testing.T, mode string, names ...string) {
	sock := hostileAgent(t, mode)
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	defer c.Close()
	calls := hostileCalls(c)
	calls["tunnel"] = func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return err
		}
		tc, err := tunnel.Dial(ctx, conn, testToken, 8080)
		if err == nil {
			tc.Close()
		}
		return err
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) { bounded(t, name, calls[name]) })
	}
}

// TestDocker_HostileAgent_GzipBomb: 1 MiB of gzip that inflates to 1 GiB,
// framed as a Connect stream message, a unary answer and an HTTP body.
func TestDocker_HostileAgent_GzipBomb(t *testing.T) {
	runHostile(t, "gzip-bomb", "exec", "stat", "upload", "logs", "logs-follow")
}

// TestDocker_HostileAgent_EndlessBody: a stream message announcing 4 GiB,
// an endless unary body, an endless upload answer.
func TestDocker_HostileAgent_EndlessBody(t *testing.T) {
	runHostile(t, "endless-body", "exec", "stat", "upload", "logs", "logs-follow")
}

// TestDocker_HostileAgent_EndlessHeaders: header lines that never end,
// to the Connect client and to the port tunnel's CONNECT.
func TestDocker_HostileAgent_EndlessHeaders(t *testing.T) {
	runHostile(t, "endless-headers", "exec", "stat", "tunnel", "logs", "logs-follow")
}
