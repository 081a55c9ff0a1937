package oci_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

// TestMeasureCommit prints, for a sandbox of the code interpreter image
// that wrote 1 MB: how long Commit takes and what the image costs (its
// size, its layers, and its size beyond the base image's), and how long
// its push to a registry (Debian's docker-registry on loopback, as a
// cluster's) takes: the first push of an image over the base sends the
// base's layers too, the next ones only their own. Set
// SANDBOXD_OCI_MEASURE=1; it asserts nothing.
func TestMeasureCommit(t *testing.T) {
	if os.Getenv(EnvMeasure) == "" {
		t.Skip("set " + EnvMeasure + "=1 to measure")
	}
	requireEnv(t)
	const image, n = "sandboxd/code-interpreter:v1", 3
	ctx := t.Context()
	base, err := env.cli.ImageInspect(ctx, image)
	if err != nil {
		t.Skipf("SKIP: %s: %v", image, err)
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: "measure-" + runtimetest.NewSandboxID()[3:]})
	var reg *registrytest.Registry
	if why := registrytest.Available(); why == "" {
		reg = registrytest.Start(t, registrytest.Options{})
	} else {
		t.Logf("no push: %s", why)
	}
	for i := range n {
		id := runtimetest.NewSandboxID()
		sp := spec(id)
		sp.Image, sp.MemoryMB, sp.DiskMB = image, 512, 0
		if _, err := rt.Create(ctx, sp); err != nil {
			t.Fatal(err)
		}
		execIn(t, rt, id, `head -c 1048576 /dev/urandom > /home/written.bin`)
		ref := "sandboxd/oci-commit-measure:" + id
		start := time.Now()
		img, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/usr/bin:/bin"}})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		ins, err := env.cli.ImageInspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		shared := 0
		for _, l := range ins.RootFS.Layers {
			if slices.Contains(base.RootFS.Layers, l) {
				shared++
			}
		}
		t.Logf("run %d: commit %v; image %.1f MB in %d layers (%d shared with the base's %d); beyond the base %.2f MB",
			i, took.Round(time.Millisecond), float64(img.Size)/1e6, len(ins.RootFS.Layers), shared, len(base.RootFS.Layers), float64(img.Size-base.Size)/1e6)
		if reg != nil {
			start := time.Now()
			pushed, err := reg.PushRef(ctx, ref, "measure/snapshot")
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			t.Logf("run %d: push %v", i, time.Since(start).Round(time.Millisecond))
			registrytest.RemoveLocal(pushed)
		}
		_, _ = env.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
		if err := rt.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
