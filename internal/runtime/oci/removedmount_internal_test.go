package oci

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// A directory removed under its staged mount (a sandbox sharing the
// volume ran rmdir on it) is told apart from one that is there, so that
// the OCI runtime's failure to bind it is the request's (invalid_argument),
// not an internal error.
func TestRemovedMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a bind mount")
	}
	dir := t.TempDir()
	src, staged, kept := filepath.Join(dir, "src"), filepath.Join(dir, "staged"), filepath.Join(dir, "kept")
	for _, d := range []string{src, staged, kept} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(src, staged, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(staged, unix.MNT_DETACH) })
	mounts := []runtime.Mount{{HostPath: kept, Path: "/kept"}, {HostPath: staged, Path: "/data"}}
	if got := removedMount(mounts); got != "" {
		t.Fatalf("removedMount with every directory there = %q, want none", got)
	}
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if got := removedMount(mounts); got != "/data" {
		t.Errorf("removedMount after the staged directory was removed = %q, want /data", got)
	}
	if got := removedMount([]runtime.Mount{{HostPath: filepath.Join(dir, "none"), Path: "/none"}}); got != "/none" {
		t.Errorf("removedMount of a missing directory = %q, want /none", got)
	}
}
