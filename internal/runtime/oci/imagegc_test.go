package oci_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// buildImage builds an image of its own from the test image (a label
// makes its id new) and returns its reference and id; the test removes it.
func buildImage(t *testing.T, what string) (ref, id string) {
	t.Helper()
	ref = "sandboxd-oci-test-gc:" + what + "-" + strings.ToLower(runtimetest.NewSandboxID()[3:])
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+testImage+"\nLABEL t="+ref+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", ref, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{.ID}}", ref).Output()
	if err != nil {
		t.Fatalf("docker image inspect: %v", err)
	}
	return ref, strings.TrimPrefix(strings.TrimSpace(string(out)), "sha256:")
}

func unpacked(dir, id string) bool {
	_, err := os.Stat(filepath.Join(dir, "images", id))
	return err == nil
}

// TestCollectImages_RemovesOnlyWhatNothingUses: of three unpacked images,
// the one whose only sandbox was destroyed is removed; the one a stopped
// sandbox still needs and the one kept (the pool's, the default) stay,
// and the stopped sandbox starts again from its image.
func TestCollectImages_RemovesOnlyWhatNothingUses(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Dir = dir })
	ctx := t.Context()
	gone, goneID := buildImage(t, "gone")
	stopped, stoppedID := buildImage(t, "stopped")
	kept, keptID := buildImage(t, "kept")
	ids := map[string]string{}
	for _, ref := range []string{gone, stopped, kept} {
		id := runtimetest.NewSandboxID()
		s := spec(id)
		s.Image = ref
		if _, err := rt.Create(ctx, s); err != nil {
			t.Fatalf("Create from %s: %v", ref, err)
		}
		ids[ref] = id
	}
	if err := rt.Stop(ctx, ids[stopped]); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{gone, kept} {
		if err := rt.Destroy(ctx, ids[ref]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.CollectImages(ctx, []string{kept, "sandboxd-oci-test-gc:no-such-image"}); err != nil {
		t.Fatalf("CollectImages: %v", err)
	}
	if unpacked(dir, goneID) {
		t.Errorf("the unpacked image no sandbox uses is still there")
	}
	if _, err := os.Stat(filepath.Join(dir, "images", goneID+".json")); err == nil {
		t.Errorf("the unused image's configuration is still there")
	}
	if !unpacked(dir, stoppedID) {
		t.Errorf("the image of a stopped sandbox was removed")
	}
	if !unpacked(dir, keptID) {
		t.Errorf("a kept image was removed")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "images", ".tmp-*")); len(left) > 0 {
		t.Errorf("temporary directories left: %v", left)
	}
	if err := rt.Start(ctx, ids[stopped]); err != nil {
		t.Fatalf("Start of the stopped sandbox after a collection: %v", err)
	}
	if got := execIn(t, rt, ids[stopped], "echo ok"); got != "ok\n" {
		t.Errorf("exec in the restarted sandbox: %q", got)
	}
	// A create of the removed image unpacks it again.
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Image = gone
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatalf("Create from the collected image: %v", err)
	}
	if !unpacked(dir, goneID) {
		t.Errorf("a create of a collected image did not unpack it again")
	}
}

// TestCollectImages_RacesCreates: collections run back to back while
// creates of one image run and are destroyed again: every create
// succeeds and its sandbox runs from an intact image (a collection never
// takes the image from under a create about to mount it).
func TestCollectImages_RacesCreates(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Dir = dir })
	ctx := t.Context()
	ref, _ := buildImage(t, "race")
	stop := make(chan struct{})
	var removed int
	var gcErr error
	var gcDone sync.WaitGroup
	gcDone.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := rt.CollectImages(ctx, nil)
			if err != nil {
				gcErr = err
				return
			}
			removed += res.Removed
		}
	})
	const workers, rounds = 2, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for range workers {
		wg.Go(func() {
			for range rounds {
				id := runtimetest.NewSandboxID()
				s := spec(id)
				s.Image = ref
				if _, err := rt.Create(ctx, s); err != nil {
					errs <- err
					continue
				}
				if got := execIn(t, rt, id, "test -x /bin/sh && echo ok"); got != "ok\n" {
					errs <- &runtime.AgentNotReadyError{SandboxID: id, LogsTail: got}
				}
				if err := rt.Destroy(ctx, id); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	gcDone.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("create/exec/destroy while collecting: %v", err)
	}
	if gcErr != nil {
		t.Errorf("CollectImages: %v", gcErr)
	}
	t.Logf("%d creates, %d images removed, %d unpacks", workers*rounds, removed, rt.Unpacks())
	if removed == 0 {
		t.Logf("no collection fell between two creates (the race was not exercised this run)")
	}
}

// TestCollectImages_CreateAboutToMountKeepsIt: a collection that runs
// while a create holds its image but has not yet recorded it (the moment
// between the image's lookup and the sandbox's meta.json, held open by
// the fault hook) removes nothing, and the create's sandbox runs.
func TestCollectImages_CreateAboutToMountKeepsIt(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Dir = dir })
	ctx := t.Context()
	ref, imgID := buildImage(t, "lease")
	var res runtime.CollectResult
	var gcErr error
	rt.SetFault(func(step string) error {
		if step == "image" {
			res, gcErr = rt.CollectImages(ctx, nil)
		}
		return nil
	})
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Image = ref
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatalf("Create with a collection in its middle: %v", err)
	}
	if gcErr != nil || res.Removed != 0 {
		t.Errorf("the collection in the create's middle: %+v, %v; want nothing removed", res, gcErr)
	}
	if !unpacked(dir, imgID) {
		t.Errorf("the image the create was about to mount was removed")
	}
	if got := execIn(t, rt, id, "test -x /bin/sh && echo ok"); got != "ok\n" {
		t.Errorf("exec: %q", got)
	}
}
