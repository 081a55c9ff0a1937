package store_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/store"
)

// TestOpen_FilesPrivate: the database, its WAL and its shared-memory
// index are 0600 whatever the umask, and a looser database left by an
// older binary is tightened on open.
func TestOpen_FilesPrivate(t *testing.T) {
	old := unix.Umask(0o022)
	t.Cleanup(func() { unix.Umask(old) })
	dir := t.TempDir()
	path := filepath.Join(dir, "sandboxd.db")
	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sb := store.Sandbox{ID: "sb-0000000000000001", Image: "debian", State: store.StateRunning, Owner: "alice"}
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", filepath.Base(p), err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode = %o, want 600", filepath.Base(p), got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("a 0644 database reopened is %o, want 600", fi.Mode().Perm())
	}
}

// TestWrite_ImmutableWAL: a write whose WAL the filesystem refuses (the
// file made immutable under the open store; ext4 enforces that on open
// descriptors) is ErrUnwritable, not an opaque error, and the store writes
// again once the file is writable.
func TestWrite_ImmutableWAL(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type != unix.EXT4_SUPER_MAGIC || os.Geteuid() != 0 {
		t.Skip("needs root and an ext4 temp dir (chattr +i on an open file)")
	}
	path := filepath.Join(dir, "sandboxd.db")
	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	chattr(t, "+i", path, path+"-wal")
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path, path+"-wal").Run() }) // when the test failed before it did

	sb := store.Sandbox{ID: "sb-0000000000000002", Image: "debian", State: store.StateRunning, Owner: "alice"}
	err = s.CreateSandbox(t.Context(), &sb)
	if !errors.Is(err, store.ErrUnwritable) {
		t.Fatalf("CreateSandbox on an immutable WAL = %v, want ErrUnwritable", err)
	}
	chattr(t, "-i", path, path+"-wal")
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatalf("CreateSandbox once writable: %v", err)
	}
}

// TestWrite_DiskFull: a write on a full filesystem (a tmpfs of the
// test's, filled) is ErrDiskFull, and succeeds once space is freed.
func TestWrite_DiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "sandboxd.db")
	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	var werr error
	for i := range 64 { // until the WAL needs a page it cannot have
		sb := store.Sandbox{ID: sandboxID(100 + i), Image: strings.Repeat("x", 8000), State: store.StateRunning, Owner: "alice"}
		if werr = s.CreateSandbox(t.Context(), &sb); werr != nil {
			break
		}
	}
	if !errors.Is(werr, store.ErrDiskFull) {
		t.Fatalf("writes on a full disk = %v, want ErrDiskFull", werr)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	sb := store.Sandbox{ID: sandboxID(999), Image: "debian", State: store.StateRunning, Owner: "alice"}
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatalf("CreateSandbox once space is freed: %v", err)
	}
}

func chattr(t *testing.T, flag string, paths ...string) {
	t.Helper()
	if out, err := exec.Command("chattr", append([]string{flag}, paths...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s: %v: %s", flag, err, out)
	}
}

// fill writes path until its filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return
		}
	}
}
