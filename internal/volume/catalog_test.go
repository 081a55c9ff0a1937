package volume_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/volume"
)

func names(t *testing.T, d *volume.Dir, owner string) []string {
	t.Helper()
	vs, err := d.ListVolumes(t.Context(), owner)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestCatalog_CreateListStatRemovePerOwner(t *testing.T) {
	d, _, err := volume.New(t.TempDir(), volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if got := names(t, d, "alice"); len(got) != 0 {
		t.Errorf("fresh owner lists %v", got)
	}
	for _, n := range []string{"b-vol", "a-vol"} {
		if _, err := d.CreateVolume(ctx, "alice", n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.CreateVolume(ctx, "alice", "a-vol", nil); !errors.Is(err, service.ErrConflict) {
		t.Errorf("duplicate: %v, want ErrConflict", err)
	}
	if _, err := d.CreateVolume(ctx, "alice", "../x", nil); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("bad name: %v, want ErrInvalidArgument", err)
	}
	if diff := cmp.Diff([]string{"a-vol", "b-vol"}, names(t, d, "alice")); diff != "" {
		t.Errorf("alice's volumes (-want +got):\n%s", diff)
	}
	if got := names(t, d, "bob"); len(got) != 0 {
		t.Errorf("bob sees %v", got)
	}
	if _, err := d.StatVolume(ctx, "bob", "a-vol"); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("bob stats alice's volume: %v", err)
	}

	// A volume with data, a symbolic link out of it and a subdirectory is
	// removed whole; the link's target stays.
	binds, err := d.Prepare(ctx, "alice", "sb-1", []service.Mount{{Volume: "a-vol", Path: "/data"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := binds[0].HostPath
	if fi, err := os.Stat(host); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("volume mode %v (%v), want 0777", fi.Mode(), err)
	}
	outside := filepath.Join(t.TempDir(), "keep")
	os.WriteFile(outside, []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(host, "sub"), 0o755)
	os.WriteFile(filepath.Join(host, "sub", "f"), []byte("data"), 0o644)
	os.Symlink(outside, filepath.Join(host, "link"))

	// Mounted by a sandbox of this process: in use.
	if err := d.RemoveVolume(ctx, "alice", "a-vol"); !errors.Is(err, service.ErrConflict) {
		t.Errorf("remove while mounted: %v, want ErrConflict", err)
	}
	d.Release(ctx, "sb-1")
	if err := d.RemoveVolume(ctx, "alice", "a-vol"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(host); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume still there: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the link's target went too: %v", err)
	}
	if err := d.RemoveVolume(ctx, "alice", "a-vol"); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("second remove: %v, want ErrNotFound", err)
	}
}
