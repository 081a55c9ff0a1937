package memory_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/memory"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

func TestMain(m *testing.M) {
	// Every agent, stand-in watcher and readiness probe must be gone once
	// the runtimes are closed.
	goleak.VerifyTestMain(m)
}

// root returns a short per-test root (unix socket paths are at most 107
// bytes, and t.TempDir's names are long).
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbmem-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newRuntime(t *testing.T, o runtimetest.Options, dir string) *memory.Runtime {
	t.Helper()
	rt, err := memory.New(memory.Options{
		NodeID: o.NodeID, Root: dir, AgentReadyTimeout: o.AgentReadyTimeout,
		Images: []string{testImage},
	})
	if err != nil {
		t.Fatalf("memory.New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

const testImage = "sandboxd/busybox:latest"

// agentBinary is any regular file that is not a script: the agent runs
// in-process, so the file only has to exist (the test binary does).
func agentBinary(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	dir := root(t)
	runtimetest.Run(t, runtimetest.Config{
		New:         func(t *testing.T, o runtimetest.Options) runtime.Runtime { return newRuntime(t, o, dir) },
		Image:       testImage,
		AgentBinary: agentBinary(t),
		SocketDir:   func(id string) string { return filepath.Join(dir, id, "sock") },
		Lacks: map[runtimetest.Capability]string{
			runtimetest.EngineFacts:   "no engine: limits, labels and mounts are recorded, not applied",
			runtimetest.ResourceUsage: "Stats measures nothing",
			runtimetest.Isolation:     "processes run on the host, as the test's user",
		},
	})
}

func TestNew_Options(t *testing.T) {
	for name, opts := range map[string]memory.Options{
		"NoNode":           {Root: "/tmp/x"},
		"RelativeRoot":     {NodeID: "n", Root: "sandboxes"},
		"RootTooLongForUN": {NodeID: "n", Root: "/" + strings.Repeat("a", 100)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := memory.New(opts); err == nil {
				t.Errorf("New(%+v) = nil error, want one", opts)
			}
		})
	}
}

// TestCreate_RelativePathsStayInTheSandboxDir: each sandbox's homes are
// under its own directory, so relative paths of two sandboxes never meet.
func TestCreate_RelativePathsStayInTheSandboxDir(t *testing.T) {
	dir := root(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "n"}, dir)
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: agentBinary(t), AgentToken: "t"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, sub := range []string{"root", "home/user", "etc/passwd"} {
		if _, err := os.Stat(filepath.Join(rt.Dir(id), sub)); err != nil {
			t.Errorf("sandbox dir lacks %s: %v", sub, err)
		}
	}
	if err := rt.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rt.Dir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after Destroy: stat = %v, want not exist", err)
	}
}

// TestClose_StopsAgents: Close stops every agent; later calls fail.
func TestClose_StopsAgents(t *testing.T) {
	rt := newRuntime(t, runtimetest.Options{NodeID: "n"}, root(t))
	id := runtimetest.NewSandboxID()
	spec := runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: agentBinary(t), AgentToken: "t"}
	if _, err := rt.Create(t.Context(), spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := rt.WaitAgentReady(ctx, id); !errors.Is(err, runtime.ErrAgentNotReady) {
		t.Errorf("WaitAgentReady after Close = %v, want ErrAgentNotReady", err)
	}
	spec.SandboxID = runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec); err == nil {
		t.Errorf("Create after Close succeeded")
	}
}
