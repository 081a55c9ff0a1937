package docker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// Tests of what code inside a sandbox can do to the daemon through the
// agent socket (issue 11): each plays the attack for real, from inside a
// container.

// logBuffer collects a runtime's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// box is one sandbox of a test, with a client of its agent.
type box struct {
	rt     *docker.Runtime
	id     string
	client *agent.Client
}

// newBox creates a sandbox from the test image on rt; mod may change the
// spec first. It is destroyed when t ends.
func newBox(t *testing.T, rt *docker.Runtime, mod func(*runtime.Spec)) *box {
	t.Helper()
	id := runtimetest.NewSandboxID()
	spec := runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: env.agent, AgentToken: "tok-" + id}
	if mod != nil {
		mod(&spec)
	}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	if _, err := rt.Create(t.Context(), spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, spec.AgentToken)
	t.Cleanup(c.Close)
	return &box{rt: rt, id: id, client: c}
}

// sh runs script in the sandbox and returns its combined output.
func (b *box) sh(t *testing.T, script string) string {
	t.Helper()
	res, err := b.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// TestDialAgent_RefusesAnImpostor: a process in the sandbox listens on a
// socket of its own (on a directory the sandbox can write) and that
// socket is put where the daemon dials the agent. The daemon must refuse
// the connection, before sending or reading a byte, and log it; with the
// real agent's socket back, it talks to the agent again.
func TestDialAgent_RefusesAnImpostor(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	var logs logBuffer
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *docker.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	share, err := os.MkdirTemp(filepath.Dir(env.socketRoot), "fake") // same filesystem as the socket root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(share) })
	copyFile(t, env.fake, filepath.Join(share, "fakeagent"))
	b := newBox(t, rt, func(s *runtime.Spec) {
		s.Mounts = []runtime.Mount{{HostPath: share, Path: "/mnt/fake"}}
	})
	p, err := b.client.StartProcess(t.Context(), agent.StartRequest{
		Cmd: []string{"/mnt/fake/fakeagent", "-mode", "health", "-listen", "/mnt/fake/fake.sock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if out, err := p.Recv(); err != nil || !strings.Contains(string(out.Data), "listening") {
		t.Fatalf("fake agent: %q, %v", out.Data, err)
	}

	// Swap the impostor in, keeping the real socket aside.
	real, fake := rt.AgentSocketPath(b.id), filepath.Join(share, "fake.sock")
	aside := filepath.Join(share, "real.sock")
	if err := os.Rename(real, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fake, real); err != nil {
		t.Fatal(err)
	}
	conn, err := rt.DialAgent(t.Context(), b.id)
	if err == nil {
		conn.Close()
		t.Fatal("DialAgent connected to a socket a sandbox process listens on")
	}
	if !errors.Is(err, runtime.ErrAgentImpostor) {
		t.Errorf("DialAgent = %v, want ErrAgentImpostor", err)
	}
	if got := logs.String(); !strings.Contains(got, "refused") || !strings.Contains(got, b.id) {
		t.Errorf("no log record of the refusal; logs:\n%s", got)
	}

	if err := os.Rename(aside, real); err != nil {
		t.Fatal(err)
	}
	if out := b.sh(t, "echo back"); out != "back\n" {
		t.Errorf("with the agent's socket back: %q", out)
	}
}

// TestSocketDir_ReadOnlyInTheSandbox: root in the sandbox cannot remove,
// replace or add anything in the agent socket directory, so it can
// neither plant an impostor nor fill the host's disk through it, and the
// agent keeps answering.
func TestSocketDir_ReadOnlyInTheSandbox(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	b := newBox(t, rt, nil)
	d := runtime.AgentSocketDir
	out := b.sh(t, `
		rm -f `+d+`/agent.sock && echo rm-ok
		mv `+d+`/agent.sock `+d+`/moved && echo mv-ok
		ln -s / `+d+`/link && echo ln-ok
		mkdir `+d+`/dir && echo mkdir-ok
		dd if=/dev/zero of=`+d+`/fill bs=1M count=8 && echo fill-ok
		mount -o remount,rw `+d+` && echo remount-ok
		true`)
	if strings.Contains(out, "-ok") {
		t.Errorf("the sandbox changed its agent socket directory:\n%s", out)
	}
	entries, err := os.ReadDir(rt.SocketDir(b.id))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{runtime.AgentSocketName}) {
		t.Errorf("socket dir holds %v, want only %s (the handoff socket goes once the agent has its socket)", names, runtime.AgentSocketName)
	}
	if out := b.sh(t, "echo alive"); out != "alive\n" {
		t.Errorf("after the attempts: %q", out)
	}
}

// TestDialAgent_FreshRuntimeFindsTheAgent: a runtime that did not boot the
// sandbox (a restarted daemon) has no pid cached, asks the engine, and
// reaches the agent.
func TestDialAgent_FreshRuntimeFindsTheAgent(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	node := "node-" + runtimetest.NewSandboxID()[3:]
	b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: node}), nil)
	fresh, err := docker.New(docker.Options{Client: env.cli, NodeID: node, SocketRoot: env.socketRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return fresh.DialAgent(ctx, b.id) }, "tok-"+b.id)
	defer c.Close()
	if err := c.Health(t.Context()); err != nil {
		t.Fatalf("Health through a fresh runtime: %v", err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
