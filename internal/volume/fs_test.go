package volume_test

import (
	"errors"
	"fmt"
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
	d, _, err := volume.New(root, volume.Options{SizeMB: sizeMB})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, why := d.Limits(); got != sizeMB {
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

	v, err := d.CreateVolume(ctx, "alice", "data", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeMB != 32 {
		t.Errorf("size %d MiB, want 32", v.SizeMB)
	}
	binds, err := d.Prepare(ctx, "alice", "sb-1", []service.Mount{{Volume: "data", Path: "/data"}}, nil)
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

	if _, err := d.Prepare(ctx, "bob", "sb-1", []service.Mount{{Volume: "tmp", Path: "/t"}}, nil); err != nil {
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

	binds, err := d.Prepare(ctx, "bob", "sb-2", []service.Mount{{Volume: "keep", Path: "/k"}}, nil)
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
	if _, _, err := volume.New(root, volume.Options{SizeMB: 16}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "f")); err != nil || string(b) != "kept" {
		t.Errorf("after New the volume reads %q, %v; want its file", b, err)
	}
}

// A volume holds its size in its owner's quota exactly while it exists:
// Reserve runs once, before its file system is made (never for one that
// exists), Dropped once when it goes; a refusal makes nothing. Creates
// and removes of one name racing each other keep that true.
func TestVolumeFS_ReservedExactlyWhileItExists(t *testing.T) {
	root := t.TempDir()
	d, _ := limitedDir(t, root, 16)
	ctx := t.Context()
	var mu sync.Mutex
	held := map[string]int{}
	d.Dropped = func(owner, name string) {
		mu.Lock()
		defer mu.Unlock()
		held[owner+"/"+name]--
	}
	reserve := func(owner string) volume.Reserve {
		return func(name string, sizeMB int64) error {
			if sizeMB != 16 {
				t.Errorf("reserved %d MiB, want 16", sizeMB)
			}
			mu.Lock()
			defer mu.Unlock()
			held[owner+"/"+name]++
			return nil
		}
	}
	refuse := func(string, int64) error { return service.ErrCapacityExhausted }
	if _, err := d.CreateVolume(ctx, "alice", "no", refuse); !errors.Is(err, service.ErrCapacityExhausted) {
		t.Fatalf("a refused reservation: %v, want its error", err)
	}
	if _, err := d.Prepare(ctx, "alice", "sb-0", []service.Mount{{Volume: "no", Path: "/n"}}, refuse); !errors.Is(err, service.ErrCapacityExhausted) {
		t.Fatalf("a refused reservation in Prepare: %v, want its error", err)
	}
	if all, _ := d.AllVolumes(ctx); len(all) != 0 {
		t.Fatalf("refused volumes were made: %+v", all)
	}

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 8 {
				switch (g + i) % 3 {
				case 0:
					_, _ = d.CreateVolume(ctx, "alice", "x", reserve("alice"))
				case 1:
					_ = d.RemoveVolume(ctx, "alice", "x")
				default:
					id := fmt.Sprintf("sb-%d-%d", g, i)
					if _, err := d.Prepare(ctx, "alice", id, []service.Mount{{Volume: "x", Path: "/x"}}, reserve("alice")); err == nil {
						_ = d.Abandon(ctx, id)
					}
				}
			}
		})
	}
	wg.Wait()
	_, err := d.StatVolume(ctx, "alice", "x")
	exists := err == nil
	mu.Lock()
	defer mu.Unlock()
	if want := map[bool]int{true: 1, false: 0}[exists]; held["alice/x"] != want {
		t.Errorf("after the race the volume exists=%v and holds %d reservations, want %d", exists, held["alice/x"], want)
	}
}

// The sizes of all volumes together are bounded (Options.MaxTotalMB):
// the volume past it is refused as the host's capacity, and one removed
// makes room again.
func TestVolumeFS_HostTotalIsBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a volume's file system needs root (mount)")
	}
	root := t.TempDir()
	t.Cleanup(func() { unmountUnder(root) })
	d, _, err := volume.New(root, volume.Options{SizeMB: 16, MaxTotalMB: 40})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := d.CreateVolume(ctx, "alice", n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.CreateVolume(ctx, "bob", "c", nil); !errors.Is(err, service.ErrCapacityExhausted) {
		t.Fatalf("a third 16 MiB volume of 40: %v, want ErrCapacityExhausted", err)
	}
	if err := d.RemoveVolume(ctx, "alice", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateVolume(ctx, "bob", "c", nil); err != nil {
		t.Fatalf("after a removal: %v", err)
	}
}

// What a crash leaves is settled at start: a half-made image goes, an
// image whose mount point was never made is mounted again, an empty
// directory without an image (a removal cut short) goes, and a directory
// with files but no image (a volume from before volume limits) is kept
// and named in a warning.
func TestVolumeFS_NewSettlesWhatACrashLeft(t *testing.T) {
	root := t.TempDir()
	d, _ := limitedDir(t, root, 16)
	ctx := t.Context()
	if _, err := d.CreateVolume(ctx, "carol", "img", nil); err != nil {
		t.Fatal(err)
	}
	owner := filepath.Join(root, filepath.Base(filepath.Dir(mustStat(t, d, "carol", "img"))))
	host := filepath.Join(owner, "img")
	if err := os.WriteFile(filepath.Join(host, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A crash between the image's rename and its mount point's making.
	if err := syscall.Unmount(host, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(owner, ".half"+".ext4.tmp")
	empty := filepath.Join(owner, "gone")
	legacy := filepath.Join(owner, "old")
	for _, p := range []string{empty, legacy} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(tmp, nil, 0o600)
	os.WriteFile(filepath.Join(legacy, "data"), []byte("keep"), 0o644)

	_, warnings, err := volume.New(root, volume.Options{SizeMB: 16})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(host, "f")); err != nil || string(b) != "x" {
		t.Errorf("the volume is not mounted again: %q, %v", b, err)
	}
	for _, p := range []string{tmp, empty} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(legacy, "data")); err != nil {
		t.Errorf("a volume from before limits lost its data: %v", err)
	}
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "no size limit") }) {
		t.Errorf("no warning names the unlimited volume: %q", warnings)
	}
}

// mustStat is the host directory of owner's volume name.
func mustStat(t *testing.T, d *volume.Dir, owner, name string) string {
	t.Helper()
	binds, err := d.Prepare(t.Context(), owner, "sb-stat", []service.Mount{{Volume: name, Path: "/s"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(t.Context(), "sb-stat"); err != nil {
		t.Fatal(err)
	}
	return binds[0].HostPath
}
