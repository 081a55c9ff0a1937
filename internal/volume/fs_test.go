package volume_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// limitedDir is a Dir whose volumes are file systems of sizeMB, with its
// Dropped calls recorded; every mount under its root goes with the test.
// It needs root (mount): elsewhere it skips.
func limitedDir(t *testing.T, root string, sizeMB int64) (*volume.Dir, func() []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a volume's file system needs root (mount)")
	}
	t.Cleanup(func() { unmountUnder(root) })
	d, err := volume.New(root, sizeMB)
	if err != nil {
		t.Fatal(err)
	}
	if got, why := d.Limits(); got != sizeMB {
		t.Fatalf("as root, volumes are not limited: %s", why)
	}
	var mu sync.Mutex
	var dropped []string
	d.Dropped = func(owner, name string) {
		mu.Lock()
		defer mu.Unlock()
		dropped = append(dropped, owner+"/"+name)
	}
	return d, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(dropped)
	}
}

// unmountUnder detaches every mount under dir, deepest first.
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var under []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			under = append(under, f[4])
		}
	}
	for _, m := range slices.Backward(under) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// isMounted reports whether p is a mount point.
func isMounted(t *testing.T, p string) bool {
	t.Helper()
	var st, parent syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return false
	}
	if err := syscall.Stat(filepath.Dir(p), &parent); err != nil {
		t.Fatal(err)
	}
	return st.Dev != parent.Dev
}

// A volume is a file system of its own size: a write past it fails with
// ENOSPC and the host keeps at most the size; removing it unmounts it and
// frees its file, and its owner's quota hears of it (Dropped).
func TestVolumeFS_HoldsItsSize(t *testing.T) {
	root := t.TempDir()
	d, dropped := limitedDir(t, root, 32)
	ctx := t.Context()

	v, err := d.CreateVolume(ctx, "alice", "data")
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeMB != 32 {
		t.Errorf("size %d MiB, want 32", v.SizeMB)
	}
	binds, err := d.Prepare(ctx, "alice", "sb-1", []service.Mount{{Volume: "data", Path: "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	host := binds[0].HostPath
	if !isMounted(t, host) {
		t.Fatalf("volume %s is not a file system of its own", host)
	}
	if names, _ := os.ReadDir(host); len(names) != 0 {
		t.Errorf("a new volume holds %v, want nothing", names)
	}
	if fi, err := os.Stat(host); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("volume mode %v (%v), want 0777", fi.Mode(), err)
	}

	f, err := os.Create(filepath.Join(host, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	var written int
	for written < 256<<20 {
		n, err := f.Write(chunk)
		written += n
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("the write past the size failed with %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written > 32<<20 {
		t.Errorf("wrote %d MiB into a 32 MiB volume", written>>20)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(host+".ext4", &st); err != nil || st.Blocks*512 > 40<<20 {
		t.Errorf("the volume's file takes %d MiB of the host (%v), want at most its size and a little", st.Blocks*512>>20, err)
	}

	all, err := d.AllVolumes(ctx)
	if err != nil || len(all) != 1 || all[0].Owner != "alice" || all[0].Name != "data" || all[0].SizeMB != 32 {
		t.Errorf("AllVolumes: %+v, %v; want alice's data of 32 MiB", all, err)
	}

	if err := d.RemoveVolume(ctx, "alice", "data"); !errors.Is(err, service.ErrConflict) {
		t.Errorf("remove while sb-1 mounts it: %v, want ErrConflict", err)
	}
	if err := d.Release(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveVolume(ctx, "alice", "data"); err != nil {
		t.Fatal(err)
	}
	if isMounted(t, host) {
		t.Error("a removed volume is still mounted")
	}
	for _, p := range []string{host, host + ".ext4"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if got := dropped(); !slices.Equal(got, []string{"alice/data"}) {
		t.Errorf("Dropped heard %v, want [alice/data]", got)
	}
}

// A failed create's new volume goes (unmounted, its file removed, Dropped
// told), its owner directory too; a volume whose mount a reboot took is
// mounted again by New, its files there.
func TestVolumeFS_AbandonAndRemount(t *testing.T) {
	root := t.TempDir()
	d, dropped := limitedDir(t, root, 16)
	ctx := t.Context()

	if _, err := d.Prepare(ctx, "bob", "sb-1", []service.Mount{{Volume: "tmp", Path: "/t"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Abandon(ctx, "sb-1"); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(root); len(names) != 0 {
		t.Errorf("after the only create abandoned the root holds %v, want nothing", names)
	}
	if got := dropped(); !slices.Equal(got, []string{"bob/tmp"}) {
		t.Errorf("Dropped heard %v, want [bob/tmp]", got)
	}

	binds, err := d.Prepare(ctx, "bob", "sb-2", []service.Mount{{Volume: "keep", Path: "/k"}})
	if err != nil {
		t.Fatal(err)
	}
	host := binds[0].HostPath
	if err := os.WriteFile(filepath.Join(host, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(host, 0); err != nil { // what a reboot does
		t.Fatal(err)
	}
	if _, err := volume.New(root, 16); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "f")); err != nil || string(b) != "kept" {
		t.Errorf("after New the volume reads %q, %v; want its file", b, err)
	}
}
