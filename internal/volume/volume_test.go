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
	d, err := volume.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mounts := []service.Mount{{Volume: "data", Path: "/data"}}
	a, err := d.Prepare(t.Context(), "alice", "sb-1", mounts)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := d.Prepare(t.Context(), "alice", "sb-2", mounts)
	b, err := d.Prepare(t.Context(), "bob", "sb-3", mounts)
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
	if _, err := d.Prepare(t.Context(), "alice", "sb-4", []service.Mount{{Volume: "../x", Path: "/x"}}); err == nil {
		t.Error("a volume name with a path separator was accepted")
	}
}
