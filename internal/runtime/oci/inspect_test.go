package oci_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestCreate_ConcurrentCreatesShareImageInspects: creates of one image
// at once ask the engine for the image fewer times than there are
// creates (each used to ask on its own; a burst queued at a busy engine).
func TestCreate_ConcurrentCreatesShareImageInspects(t *testing.T) {
	requireEnv(t)
	var inspects atomic.Int64
	cli, err := client.New(client.FromEnv, client.WithHTTPRequestHook(func(req *http.Request) error {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/images/") && strings.HasSuffix(req.URL.Path, "/json") {
			inspects.Add(1)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Client = cli })
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// The image's unpack, and its first inspect, before the burst.
	warm := runtimetest.NewSandboxID()
	if _, err := rt.Create(ctx, spec(warm)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := rt.Destroy(ctx, warm); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	const n = 8
	before := inspects.Load()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		id := runtimetest.NewSandboxID()
		t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
		wg.Go(func() {
			<-start
			_, errs[i] = rt.Create(ctx, spec(id))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Create %d: %v", i, err)
		}
	}
	got := inspects.Load() - before
	t.Logf("%d creates at once: %d image inspects", n, got)
	if got >= n || got < 1 {
		t.Errorf("%d creates at once inspected the image %d times, want at least once and fewer than once each", n, got)
	}
}
