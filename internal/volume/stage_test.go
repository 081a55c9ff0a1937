package volume_test

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// needRoot skips where mounts cannot be made (CI runs as root).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("staging a subpath mount needs root")
	}
}

// mountsUnder lists the mount points of this mount namespace under dir,
// from /proc/self/mountinfo (what the engine, in the same namespace, sees).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

type fixture struct {
	d       *volume.Dir
	base    string // the temp dir holding volumes/ and mounts/
	staging string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	needRoot(t)
	base := t.TempDir()
	d, _, err := volume.New(filepath.Join(base, "volumes"), volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{d: d, base: base, staging: filepath.Join(base, "mounts")}
	t.Cleanup(func() {
		// Whatever a failed test left mounted is detached, so TempDir's
		// removal never reaches through a mount and no mount outlives it.
		for _, m := range slices.Backward(mountsUnder(t, base)) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	return f
}

// volumeDir is the host directory of owner's volume, made by a whole mount.
func (f fixture) volumeDir(t *testing.T, owner, name string) string {
	t.Helper()
	binds, err := f.d.Prepare(t.Context(), owner, "sb-00000000000000aa", []service.Mount{{Volume: name, Path: "/v"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.d.Release(t.Context(), "sb-00000000000000aa")
	return binds[0].HostPath
}

// TestStage_SubpathIsItsOwnMountAndPersists: a subpath that does not exist
// is made; the runtime gets a staging path that is a mount of exactly that
// directory; writes through it land in the volume; Release detaches it.
func TestStage_SubpathIsItsOwnMountAndPersists(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	vol := f.volumeDir(t, "alice", "data")
	const id = "sb-0000000000000001"
	binds, err := f.d.Prepare(ctx, "alice", id, []service.Mount{
		{Volume: "data", Path: "/whole"},
		{Volume: "data", Path: "/part", Subpath: "users/alice"},
	}, nil)

	if err != nil {
		t.Fatal(err)
	}
	if binds[0].HostPath != vol {
		t.Errorf("whole mount: %s, want %s", binds[0].HostPath, vol)
	}
	staged := binds[1].HostPath
	if want := filepath.Join(f.staging, id, "1"); staged != want {
		t.Errorf("subpath staged at %s, want %s", staged, want)
	}
	if got := mountsUnder(t, f.staging); len(got) != 1 || got[0] != staged {
		t.Fatalf("mounts under the staging root: %v, want [%s]", got, staged)
	}
	if fi, err := os.Stat(filepath.Join(vol, "users", "alice")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("made subpath: %v (%v), want a 0777 directory", fi, err)
	}
	if err := os.WriteFile(filepath.Join(staged, "f"), []byte("through"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "users", "alice", "f")); string(b) != "through" {
		t.Errorf("in the volume: %q (%v)", b, err)
	}
	if err := f.d.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := mountsUnder(t, f.staging); len(got) != 0 {
		t.Errorf("mounts after Release: %v", got)
	}
	if _, err := os.Stat(filepath.Join(f.staging, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory after Release: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "users", "alice", "f")); string(b) != "through" {
		t.Errorf("data gone with the mount: %q", b)
	}
	if err := f.d.Release(ctx, id); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

// TestStage_LinksAndFilesAreRefused: a subpath through a symbolic link
// (to the host's root, to /etc, to another place in the volume), through
// a file, or through .. planted by a sandbox is ErrInvalidArgument and
// stages nothing.
func TestStage_LinksAndFilesAreRefused(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	vol := f.volumeDir(t, "alice", "data")
	os.Symlink("/", filepath.Join(vol, "root"))
	os.Symlink("/etc", filepath.Join(vol, "etc"))
	os.Mkdir(filepath.Join(vol, "real"), 0o755)
	os.Symlink("real", filepath.Join(vol, "inner"))
	os.Symlink("../../../..", filepath.Join(vol, "real", "up"))
	os.WriteFile(filepath.Join(vol, "file"), []byte("x"), 0o644)
	for _, sub := range []string{"root", "root/etc", "etc", "inner", "real/up", "real/up/etc", "file", "file/x", "../x", "/etc", "a/../b"} {
		_, err := f.d.Prepare(ctx, "alice", "sb-0000000000000002", []service.Mount{{Volume: "data", Path: "/p", Subpath: sub}}, nil)
		if !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("subpath %q: %v, want ErrInvalidArgument", sub, err)
		}
		if got := mountsUnder(t, f.staging); len(got) != 0 {
			t.Errorf("subpath %q left mounts %v", sub, got)
		}
	}
	if _, err := os.Stat(filepath.Join(f.staging, "sb-0000000000000002")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory of refused creates: %v", err)
	}
}

// TestAbandon_DetachesAndRemovesWhatTheSubpathMade: a failed create's
// staged mount goes, and so do the empty directories its subpath made
// (the volume too, when that create made it).
func TestAbandon_DetachesAndRemovesWhatTheSubpathMade(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	const id = "sb-0000000000000003"
	if _, err := f.d.Prepare(ctx, "alice", id, []service.Mount{{Volume: "fresh", Path: "/p", Subpath: "a/b/c"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.d.Abandon(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := mountsUnder(t, f.base); len(got) != 0 {
		t.Errorf("mounts after Abandon: %v", got)
	}
	if got := entries(t, filepath.Join(f.base, "volumes")); len(got) != 0 {
		t.Errorf("left in the volume root: %v", got)
	}
	if got := entries(t, f.staging); len(got) != 0 {
		t.Errorf("left in the staging root: %v", got)
	}
}

// TestSweep_RemovesOnlyTheGone: the startup sweep detaches the staged
// mounts of sandboxes the store no longer knows and keeps the others.
func TestSweep_RemovesOnlyTheGone(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	m := []service.Mount{{Volume: "data", Path: "/p", Subpath: "x"}}
	for _, id := range []string{"sb-0000000000000004", "sb-0000000000000005"} {
		if _, err := f.d.Prepare(ctx, "alice", id, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh Dir: what a restarted daemon has, nothing in memory.
	fresh, _, err := volume.New(filepath.Join(f.base, "volumes"), volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := fresh.Sweep(func(id string) bool { return id == "sb-0000000000000005" })
	if err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want 1 settled", n, err)
	}
	want := filepath.Join(f.staging, "sb-0000000000000005", "0")
	if got := mountsUnder(t, f.staging); len(got) != 1 || got[0] != want {
		t.Errorf("after the sweep: %v, want [%s]", got, want)
	}
}

// TestStage_RaceWithALinkSwapNeverMountsTheHost: while one goroutine (the
// sandbox that mounts the whole volume) swaps sub between a directory and
// a link to a host directory holding a marker, every Prepare either is
// refused or stages a directory of the volume: the marker is never seen
// through a staged mount.
func TestStage_RaceWithALinkSwapNeverMountsTheHost(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	vol := f.volumeDir(t, "alice", "data")
	host := filepath.Join(f.base, "host")
	os.MkdirAll(filepath.Join(host, "x"), 0o755)
	os.WriteFile(filepath.Join(host, "MARKER"), []byte("host"), 0o644)
	os.WriteFile(filepath.Join(host, "x", "MARKER"), []byte("host"), 0o644)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	var swaps atomic.Int64
	wg.Go(func() {
		sub, tmp, link := filepath.Join(vol, "sub"), filepath.Join(vol, "sub.tmp"), filepath.Join(vol, "sub.link")
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.MkdirAll(filepath.Join(tmp, "x"), 0o755)
			os.Rename(tmp, sub) // a directory (fails while sub is a non-empty dir: fine)
			os.Symlink(host, link)
			os.RemoveAll(filepath.Join(vol, "sub.old"))
			os.Rename(sub, filepath.Join(vol, "sub.old"))
			os.Rename(link, sub) // a link to the host
			swaps.Add(1)
		}
	})
	refused, staged := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline) || staged == 0 || refused == 0; i++ {
		if i > 20000 {
			break
		}
		const id = "sb-0000000000000006"
		sub := "sub"
		if i%2 == 1 {
			sub = "sub/x"
		}
		binds, err := f.d.Prepare(ctx, "alice", id, []service.Mount{{Volume: "data", Path: "/p", Subpath: sub}}, nil)
		if err != nil {
			if !errors.Is(err, service.ErrInvalidArgument) && !errors.Is(err, service.ErrConflict) {
				t.Fatalf("subpath %q: %v, want a refusal of the request", sub, err)
			}
			refused++
			continue
		}
		staged++
		if _, err := os.Stat(filepath.Join(binds[0].HostPath, "MARKER")); err == nil {
			t.Fatalf("subpath %q staged the host directory", sub)
		}
		if err := f.d.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d swaps: %d refused, %d staged a directory of the volume", swaps.Load(), refused, staged)
	if got := mountsUnder(t, f.staging); len(got) != 0 {
		t.Errorf("mounts left: %v", got)
	}
}

// TestAbandon_KeepsADirectoryAnotherSandboxStaged: a failed create made
// the subpath's directories, another sandbox staged the same subpath
// since; the failed create's undo keeps them, so the other sandbox's
// writes still land in the volume.
func TestAbandon_KeepsADirectoryAnotherSandboxStaged(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	m := []service.Mount{{Volume: "data", Path: "/p", Subpath: "a/b"}}
	if _, err := f.d.Prepare(ctx, "alice", "sb-0000000000000007", m, nil); err != nil {
		t.Fatal(err)
	}
	binds, err := f.d.Prepare(ctx, "alice", "sb-0000000000000008", m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.d.Abandon(ctx, "sb-0000000000000007"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binds[0].HostPath, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(f.base, "volumes")
	found := false
	for _, e := range entries(t, vol) {
		if strings.HasSuffix(e, "/data/a/b/f") {
			found = true
		}
	}
	if !found {
		t.Errorf("the other sandbox's write is not in the volume: %v", entries(t, vol))
	}
	if err := f.d.Release(ctx, "sb-0000000000000008"); err != nil {
		t.Fatal(err)
	}
}
