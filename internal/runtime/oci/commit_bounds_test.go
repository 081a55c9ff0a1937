package oci_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// refusedCommit commits sandbox id as a new ref with ctx and checks what
// a refused commit leaves: an error matching want (returned), no image,
// no layer file, and the sandbox running, thawed and unlocked (a commit
// after the cause is removed works).
func refusedCommit(t *testing.T, ctx context.Context, rt *oci.Runtime, id string, want error, undo func()) {
	t.Helper()
	ref := "sandboxd/oci-commit-test:" + id + "-refused"
	removeImageOnCleanup(t, ref)
	start := time.Now()
	_, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{})
	t.Logf("Commit: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if !errors.Is(err, want) || strings.Contains(err.Error(), env.dir) {
		t.Fatalf("Commit = %v, want %v naming no host path", err, want)
	}
	if _, err := env.cli.ImageInspect(t.Context(), ref); err == nil {
		t.Errorf("a refused commit made %s", ref)
	}
	if m, _ := filepath.Glob(filepath.Join(env.dir, "images", ".tmp-layer*")); len(m) > 0 {
		t.Errorf("layer files left: %v", m)
	}
	if st, _ := rt.Inspect(t.Context(), id); st.State != runtime.StateRunning || st.Paused {
		t.Errorf("after a refused commit the sandbox is %+v, want running", st)
	}
	if got := execIn(t, rt, id, "echo ok"); got != "ok\n" {
		t.Errorf("exec after a refused commit: %q", got)
	}
	undo()
	// Its lock is free: a commit (and a stop) goes through.
	ok := "sandboxd/oci-commit-test:" + id + "-after"
	removeImageOnCleanup(t, ok)
	if _, err := rt.Commit(t.Context(), id, ok, runtime.ImageConfig{}); err != nil {
		t.Errorf("Commit after the cause went: %v", err)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Errorf("Stop after a refused commit: %v", err)
	}
}

// TestCommit_SparseFileRefused: a sandbox with a 64 MiB disk makes a
// 1 GiB sparse file (its disk holds a few KiB of it): the commit is
// refused (ErrInvalidSpec) before it reads the file, not written as a
// 1 GiB layer to the runtime's own file system and loaded again.
func TestCommit_SparseFileRefused(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	if lim, _ := rt.DiskLimits(t.Context()); !lim.Enforced {
		t.Skipf("SKIP: no disk limit here (%s): the layer's bound is the fixed cap", lim.How)
	}
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec(id)); err != nil { // DiskMB 64
		t.Fatal(err)
	}
	execIn(t, rt, id, `truncate -s 1G /big && du -k /big`)
	refusedCommit(t, t.Context(), rt, id, runtime.ErrInvalidSpec, func() { execIn(t, rt, id, "rm /big") })
}

// TestCommit_LongPathRefused: a tree of 255-byte names nested past 4096
// bytes (each header ~ its path, which the engine cannot unpack anyway)
// is refused (ErrInvalidSpec) at the first path too long, before it is
// built or written.
func TestCommit_LongPathRefused(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	n := strings.Repeat("n", 255)
	execIn(t, rt, id, `mkdir /deep && cd /deep && i=0; while [ $i -lt 20 ]; do mkdir `+n+` && cd `+n+` || exit 1; i=$((i+1)); done; echo x > f`)
	// (busybox's rm cannot reach that deep; the host's openat walk can.)
	refusedCommit(t, t.Context(), rt, id, runtime.ErrInvalidSpec, func() {
		if err := os.RemoveAll(filepath.Join(rt.BundleDir(id), "rootfs", "deep")); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCommit_CancelledMidWalk: a commit whose context ends while it
// walks the sandbox's files stops there and returns, and leaves the
// sandbox thawed and unlocked. (The walk's fault hook cancels the
// context at the first entry.)
func TestCommit_CancelledMidWalk(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, `mkdir /many && cd /many && i=0; while [ $i -lt 200 ]; do echo $i > f$i; i=$((i+1)); done`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	walked := 0
	rt.SetFault(func(step string) error {
		if step == "commit-walk" {
			if walked++; walked == 10 {
				cancel()
			}
		}
		return nil
	})
	defer rt.SetFault(nil)
	ref := "sandboxd/oci-commit-test:" + id + "-cancelled"
	removeImageOnCleanup(t, ref)
	_, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{})
	rt.SetFault(nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with its context cancelled mid-walk = %v, want context.Canceled", err)
	}
	if walked > 11 {
		t.Errorf("the walk went on for %d entries after its context ended", walked-10)
	}
	if _, err := os.Stat(rt.BundleDir(id)); err != nil {
		t.Fatal(err)
	}
	refusedCommitAfter(t, rt, id)
}

// refusedCommitAfter checks what refusedCommit checks after the refusal.
func refusedCommitAfter(t *testing.T, rt *oci.Runtime, id string) {
	t.Helper()
	if st, _ := rt.Inspect(t.Context(), id); st.State != runtime.StateRunning || st.Paused {
		t.Errorf("after a cancelled commit the sandbox is %+v, want running", st)
	}
	ok := "sandboxd/oci-commit-test:" + id + "-after"
	removeImageOnCleanup(t, ok)
	if _, err := rt.Commit(t.Context(), id, ok, runtime.ImageConfig{}); err != nil {
		t.Errorf("Commit after a cancelled one: %v", err)
	}
}
