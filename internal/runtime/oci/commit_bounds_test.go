package oci_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

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

// committedImages lists the engine's images labelled test=mark (what the
// commits of one test loaded), tagged or not.
func committedImages(t *testing.T, mark string) []string {
	t.Helper()
	res, err := env.cli.ImageList(t.Context(), client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", "test="+mark)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, im := range res.Items {
		ids = append(ids, im.ID)
	}
	return ids
}

// removeImagesOnCleanup removes what committedImages lists when the test ends.
func removeImagesOnCleanup(t *testing.T, mark string) {
	t.Cleanup(func() {
		res, err := env.cli.ImageList(context.Background(), client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", "test="+mark)})
		if err != nil {
			return
		}
		for _, im := range res.Items {
			_, _ = env.cli.ImageRemove(context.Background(), im.ID, client.ImageRemoveOptions{Force: true})
		}
	})
}

// TestCommit_TwoCommitsToOneRef: two commits to one ref at once, the
// second tagging between the first's tag and its answer: each answers
// with its own image or an error, and an image whose tag the other took
// is removed, not left untagged. (The fault hook holds the first commit
// after its tag until the second has tagged.)
func TestCommit_TwoCommitsToOneRef(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	mark := runtimetest.NewSandboxID()
	removeImagesOnCleanup(t, mark)
	ref := "sandboxd/oci-commit-test:" + mark + "-race"
	removeImageOnCleanup(t, ref)
	var ids [2]string
	for i := range ids {
		ids[i] = runtimetest.NewSandboxID()
		if _, err := rt.Create(t.Context(), spec(ids[i])); err != nil {
			t.Fatal(err)
		}
		execIn(t, rt, ids[i], fmt.Sprintf("echo %d > /which", i))
	}
	var mu sync.Mutex
	tagged := 0
	second := make(chan struct{})
	secondTagged := sync.OnceFunc(func() { close(second) })
	rt.SetFault(func(step string) error {
		if step != "commit-tagged" {
			return nil
		}
		mu.Lock()
		tagged++
		first := tagged == 1
		mu.Unlock()
		if first {
			select { // until the second commit has tagged (or gave up)
			case <-second:
			case <-time.After(2 * time.Minute):
			}
		} else {
			secondTagged()
		}
		return nil
	})
	defer rt.SetFault(nil)
	type result struct {
		img runtime.Image
		err error
	}
	results := make(chan result, 2)
	for _, id := range ids {
		go func() {
			img, err := rt.Commit(t.Context(), id, ref, runtime.ImageConfig{Labels: map[string]string{"test": mark}})
			if err != nil {
				secondTagged() // a failure before the tag: let the other go on
			}
			results <- result{img, err}
		}()
	}
	var ok []string
	for range ids {
		r := <-results
		t.Logf("Commit: %s %v", r.img.ID, r.err)
		if r.err == nil {
			ok = append(ok, r.img.ID)
		} else if !errors.Is(r.err, runtime.ErrUnavailable) {
			t.Errorf("a commit that lost the race: %v, want ErrUnavailable (retry)", r.err)
		}
	}
	rt.SetFault(nil)
	ins, err := env.cli.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(ok) != 1 || ok[0] != ins.ID {
		t.Errorf("commits answered %v, the ref is %s: want one answer, the ref's image", ok, ins.ID)
	}
	if left := committedImages(t, mark); len(left) != 1 || left[0] != ins.ID {
		t.Errorf("the commits' images in the engine: %v, want only the ref's %s", left, ins.ID)
	}
}

// TestCommit_LoadAnswerFails: when reading the engine's answer to the
// load fails after the engine registered the image, the image is
// removed, not left untagged.
func TestCommit_LoadAnswerFails(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	mark := runtimetest.NewSandboxID()
	removeImagesOnCleanup(t, mark)
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, "echo x > /x")
	rt.SetFault(func(step string) error {
		if step == "commit-load-answer" {
			return errors.New("injected: the answer was cut")
		}
		return nil
	})
	defer rt.SetFault(nil)
	ref := "sandboxd/oci-commit-test:" + mark + "-cut"
	removeImageOnCleanup(t, ref)
	if _, err := rt.Commit(t.Context(), id, ref, runtime.ImageConfig{Labels: map[string]string{"test": mark}}); err == nil {
		t.Fatal("Commit with its load answer cut worked")
	}
	if left := committedImages(t, mark); len(left) != 0 {
		t.Errorf("a failed load left images %v", left)
	}
}

// TestCommit_SparseFileRefused_NoDiskLimit: without a disk limit, an
// 8 EiB sparse file is refused by the fixed cap before a byte is read.
func TestCommit_SparseFileRefused_NoDiskLimit(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	sp := spec(id)
	sp.DiskMB = 0
	if _, err := rt.Create(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, rt, id, `{ truncate -s 9223372036854775807 /big 2>/dev/null || truncate -s 1099511627776 /big; } && ls -l /big | grep -q "^-" && echo made`); got != "made\n" {
		t.Fatalf("no sparse file: %q", got)
	}
	refusedCommit(t, t.Context(), rt, id, runtime.ErrInvalidSpec, func() { execIn(t, rt, id, "rm /big") })
}
