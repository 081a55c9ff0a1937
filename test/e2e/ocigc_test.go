package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// unpackedImages lists the unpacked images in an oci daemon's directory.
func unpackedImages(t *testing.T, d *daemonProcess) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.OCIDir(), "images"))
	if err != nil {
		t.Fatalf("the oci images directory: %v", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name()[0] != '.' {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestOCIEngine_UnusedImagesCollected: the oci runtime's unpacked copy of
// a template's image goes once the template is deleted and no sandbox
// uses it; the copy of an image a destroyed sandbox ran goes at the next
// start; the copy of an image a stopped sandbox needs stays, and that
// sandbox starts again.
func TestOCIEngine_UnusedImagesCollected(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "ocigc", "--engine", "oci", "--pool", "none")
	c := newClient(d, true)

	src := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	busybox := unpackedImages(t, d)
	if len(busybox) != 1 {
		t.Fatalf("unpacked after the first create: %v, want busybox's", busybox)
	}
	if _, err := c.Exec(ctx, src.ID, sandboxd.ExecRequest{Command: "echo kept > /root/kept"}); err != nil {
		t.Fatal(err)
	}
	tpl, err := c.Snapshot(ctx, src.ID, "gc")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	fromTpl := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Template: tpl.ID})
	var tplImage string
	for _, name := range unpackedImages(t, d) {
		if !slices.Contains(busybox, name) {
			tplImage = name
		}
	}
	if tplImage == "" {
		t.Fatalf("no unpacked image for the template: %v", unpackedImages(t, d))
	}
	if _, err := c.StopSandbox(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroySandbox(ctx, fromTpl.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTemplate(ctx, tpl.ID); err != nil {
		t.Fatalf("delete the template: %v", err)
	}
	if err := testenv.Poll(ctx, time.Minute, func() error {
		if got := unpackedImages(t, d); slices.Contains(got, tplImage) {
			return fmt.Errorf("the deleted template's unpacked image %s is still there: %v", tplImage, got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := unpackedImages(t, d); !slices.Equal(got, busybox) {
		t.Errorf("unpacked images = %v, want the stopped sandbox's %v kept", got, busybox)
	}
	if _, err := c.StartSandbox(ctx, src.ID); err != nil {
		t.Fatalf("start the stopped sandbox: %v", err)
	}
	if res, err := c.Exec(ctx, src.ID, sandboxd.ExecRequest{Command: "cat /root/kept"}); err != nil || res.Stdout != "kept\n" {
		t.Errorf("exec in the restarted sandbox = %+v, %v", res, err)
	}

	// At start: busybox's copy, unused once its last sandbox is gone.
	if err := c.DestroySandbox(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(ctx, time.Minute, func() error {
		if got := unpackedImages(t, d); len(got) > 0 {
			return fmt.Errorf("unpacked images left after a start with no sandbox: %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
