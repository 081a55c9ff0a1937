package oci

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestCollectImages_LeaseReleasedDuringScanKeepsImage: a create leased
// its image before a collection began, and while the collection's scan
// ran it renamed its temporary directory to the sandbox's (after the
// scan listed the directory: the scan sees neither meta.json) and
// released the lease. The image is in use; the pass must keep it.
func TestCollectImages_LeaseReleasedDuringScanKeepsImage(t *testing.T) {
	dir := t.TempDir()
	r := &Runtime{opts: Options{Dir: dir}, log: slog.New(slog.DiscardHandler)}
	sandboxes := filepath.Join(dir, "sandboxes")
	img := filepath.Join(r.imagesDir(), "feedface")
	tmp := filepath.Join(sandboxes, tmpPrefix+"create-sb-1")
	for _, d := range []string{img, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(img+".json", []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	release := leaseImage(img)
	t.Cleanup(func() {
		release()
		inflight.mu.Lock()
		delete(inflight.leases, img)
		inflight.mu.Unlock()
	})
	t.Cleanup(func() { imagesScanHook = nil })
	imagesScanHook = func() {
		imagesScanHook = nil
		// The create, all within the scan: meta.json into its temporary
		// directory, the rename to the sandbox's, the release.
		if err := writeJSON(filepath.Join(tmp, "meta.json"), sandboxMeta{ID: "sb-1", ImageDir: img}); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, filepath.Join(sandboxes, "sb-1")); err != nil {
			t.Error(err)
		}
		release()
	}
	res, err := r.CollectImages(t.Context(), nil)
	if err != nil {
		t.Fatalf("CollectImages: %v", err)
	}
	if res.Removed != 0 {
		t.Errorf("CollectImages removed %d images, want none", res.Removed)
	}
	for _, p := range []string{img, img + ".json"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the image of a sandbox made during the scan: %v", err)
		}
	}
	// The next pass sees the sandbox's meta.json and keeps it too.
	if res, err := r.CollectImages(t.Context(), nil); err != nil || res.Removed != 0 {
		t.Errorf("the next CollectImages = %+v, %v; want nothing removed", res, err)
	}
}
