package service_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestSnapshotWithMemory_ImageGoneIsUnavailableNamingNoHostPath: a create
// from a snapshot with memory whose memory image is gone (removed by hand,
// a disk lost, a DeleteTemplate that won the race to it) or unreadable
// fails making nothing, as ErrUnavailable (503 naming the cause), and its
// message names no host path. Before the fix, the runtime's error
// comes back untyped (the edges answer an opaque 500 "internal error") and
// names the memory directory's host path ("no checkpoint image in
// /…/hibernate/.forkmem/tpl-…").
func TestSnapshotWithMemory_ImageGoneIsUnavailableNamingNoHostPath(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	g, snap := counterSnapshot(t, h)
	if err := h.svc.Destroy(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	memDir := filepath.Join(h.hibDir, ".forkmem", snap.ID)
	for _, c := range []struct {
		what  string
		spoil func() error
	}{
		{"gone", func() error { return os.RemoveAll(memDir) }},
		{"unreadable", func() error {
			if err := os.MkdirAll(memDir, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(memDir, "checkpoint.img"), []byte("not an image"), 0o600)
		}},
	} {
		if err := c.spoil(); err != nil {
			t.Fatal(err)
		}
		made, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: snap.ID})
		if err == nil {
			t.Errorf("memory image %s: the create succeeded (%s)", c.what, made.ID)
			_ = h.svc.Destroy(ctx, admin, made.ID)
			continue
		}
		if !errors.Is(err, service.ErrUnavailable) {
			t.Errorf("memory image %s: create = %v, want ErrUnavailable (503 naming why), not an untyped error (500)", c.what, err)
		}
		if strings.Contains(err.Error(), h.hibDir) {
			t.Errorf("memory image %s: the error names a host path: %v", c.what, err)
		}
	}
	if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, h)
}
