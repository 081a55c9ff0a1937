package volume_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// TestPrepare_VolumesArePerOwner: two owners naming the same volume get
// two directories; one owner gets the same directory every time.
func TestPrepare_VolumesArePerOwner(t *testing.T) {
	d, _, err := volume.New(t.TempDir(), volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mounts := []service.Mount{{Volume: "data", Path: "/data"}}
	a, err := d.Prepare(t.Context(), "alice", "sb-1", mounts, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := d.Prepare(t.Context(), "alice", "sb-2", mounts, nil)
	b, err := d.Prepare(t.Context(), "bob", "sb-3", mounts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a[0].HostPath != again[0].HostPath {
		t.Errorf("one owner, two paths: %s, %s", a[0].HostPath, again[0].HostPath)
	}
	if a[0].HostPath == b[0].HostPath {
		t.Fatalf("alice and bob share %s", a[0].HostPath)
	}
	if err := os.WriteFile(filepath.Join(a[0].HostPath, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b[0].HostPath, "secret")); err == nil {
		t.Error("bob sees alice's file")
	}
	if _, err := d.Prepare(t.Context(), "alice", "sb-4", []service.Mount{{Volume: "../x", Path: "/x"}}, nil); err == nil {
		t.Error("a volume name with a path separator was accepted")
	}
}

// entries lists what is under root, relative to it.
func entries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAbandon_RemovesOnlyWhatTheFailedCreateMade: a failed create's
// volumes go (its owner directory too), but never a volume that existed
// before, that another sandbox prepared since, or that holds data.
func TestAbandon_RemovesOnlyWhatTheFailedCreateMade(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	d, _, err := volume.New(root, volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prepare(ctx, "alice", "sb-1", []service.Mount{{Volume: "a", Path: "/a"}, {Volume: "b", Path: "/b"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, root); len(got) != 0 {
		t.Fatalf("after the only create abandoned: %v, want nothing", got)
	}

	// kept: "old" existed (a committed sandbox made it), "shared" is
	// prepared by a live sandbox too, "full" holds data.
	old, _ := d.Prepare(ctx, "alice", "sb-2", []service.Mount{{Volume: "old", Path: "/o"}}, nil)
	if err := d.Release(ctx, "sb-2"); err != nil { // committed, then destroyed
		t.Fatal(err)
	}
	binds, err := d.Prepare(ctx, "alice", "sb-3", []service.Mount{
		{Volume: "old", Path: "/o"}, {Volume: "shared", Path: "/s"}, {Volume: "full", Path: "/f"}, {Volume: "gone", Path: "/g"},
	}, nil)

	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prepare(ctx, "alice", "sb-4", []service.Mount{{Volume: "shared", Path: "/s"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binds[2].HostPath, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, "sb-3"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old[0].HostPath, binds[1].HostPath, binds[2].HostPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Stat(binds[3].HostPath); !os.IsNotExist(err) {
		t.Errorf("%s, made only by the failed create, is still there (%v)", binds[3].HostPath, err)
	}
}
