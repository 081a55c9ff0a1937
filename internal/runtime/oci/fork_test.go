package oci_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestFork_RestoresAnotherSandboxsCheckpoint: a gVisor sandbox counting
// in a loop is checkpointed, its file system committed while it is, and
// restored; a new sandbox (another id, its own root file system from the
// commit, its own socket directory and cgroup) is created from the
// commit with Spec.RestoreImage: it runs the parent's processes, its
// counter going on from the parent's count, independently of the
// parent's. Its agent still takes the parent's token (the service
// rotates it) and not the spec's; a file it writes is not the parent's.
func TestFork_RestoresAnotherSandboxsCheckpoint(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	id := runtimetest.NewSandboxID()
	s := gvisorSpec(t, id)
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	read := counter(t, rt, s)
	dir := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(ctx, id, dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	ref := "sandboxd/oci-fork-test:" + id
	t.Cleanup(func() {
		_, _ = env.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	if _, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}}); err != nil {
		t.Fatalf("Commit of the checkpointed sandbox: %v", err)
	}
	if err := rt.Restore(ctx, id, dir); err != nil {
		t.Fatalf("Restore of the parent: %v", err)
	}
	parentAt := read()

	fid := runtimetest.NewSandboxID()
	fs := gvisorSpec(t, fid)
	fs.Image, fs.RestoreImage = ref, dir
	if _, err := rt.Create(ctx, fs); err != nil {
		t.Fatalf("Create with RestoreImage: %v", err)
	}
	// The agent restored is the parent's, with the parent's token.
	if err := agentWith(rt, fid, fs.AgentToken).Check(ctx); err == nil {
		t.Errorf("the fork's agent takes the fork's spec token before a rotation; want only the checkpointed one's")
	}
	forkRead := func() int {
		t.Helper()
		n, _ := strconv.Atoi(strings.TrimSpace(execAs(t, rt, fid, s.AgentToken, "cat /tmp/n 2>/dev/null || echo 0")))
		return n
	}
	forkAt := forkRead()
	if forkAt < parentAt-50 || forkAt < 2 {
		t.Errorf("the fork's counter = %d, the parent's %d when it was restored; want the fork to go on from the parent's count", forkAt, parentAt)
	}
	for deadline := time.Now().Add(time.Minute); forkRead() <= forkAt || read() <= parentAt; {
		if time.Now().After(deadline) {
			t.Fatal("the parent's and the fork's counters do not both go on")
		}
	}
	// Independent file systems: the fork's write is not the parent's.
	execAs(t, rt, fid, s.AgentToken, "echo fork > /mark")
	if got := execAs(t, rt, id, s.AgentToken, "cat /mark 2>/dev/null || echo none"); got != "none\n" {
		t.Errorf("the parent sees the fork's file: %q", got)
	}
	// Independent processes: stopping the fork's loop leaves the parent's.
	execAs(t, rt, fid, s.AgentToken, "kill -STOP -1 2>/dev/null; true")
	p := read()
	for deadline := time.Now().Add(time.Minute); read() <= p; {
		if time.Now().After(deadline) {
			t.Fatal("the parent's counter stopped with the fork's processes")
		}
	}
	if st, _ := rt.Inspect(ctx, fid); st.State != runtime.StateRunning {
		t.Errorf("fork: Inspect = %+v, want running", st)
	}
	for _, x := range []string{fid, id} {
		if err := rt.Destroy(ctx, x); err != nil {
			t.Fatalf("Destroy %s: %v", x, err)
		}
		if left := leftovers(t, rt, x); len(left) > 0 {
			t.Errorf("after Destroy of %s: left %v", x, left)
		}
	}
}

// TestFork_RestoreImageRefusedWhereNoCheckpoint: a runc-class spec with
// RestoreImage is refused with ErrCheckpointUnsupported and leaves
// nothing.
func TestFork_RestoreImageRefusedWhereNoCheckpoint(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.RestoreImage = t.TempDir()
	if _, err := rt.Create(t.Context(), s); !errors.Is(err, runtime.ErrCheckpointUnsupported) {
		t.Fatalf("Create of a runc-class sandbox with RestoreImage = %v, want ErrCheckpointUnsupported", err)
	}
	if left := leftovers(t, rt, id); len(left) > 0 {
		t.Errorf("left %v", left)
	}
}

// agentWith is a client of sandbox id's agent with token.
func agentWith(rt interface {
	DialAgent(context.Context, string) (net.Conn, error)
}, id, token string) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, token)
}

// execAs runs script in sandbox id with token and returns its stdout.
func execAs(t *testing.T, rt interface {
	DialAgent(context.Context, string) (net.Conn, error)
}, id, token, script string) string {
	t.Helper()
	c := agentWith(rt, id, token)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return string(res.Stdout)
}
