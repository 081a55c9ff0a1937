package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostileImage makes an image root with etc/ and returns it.
func hostileImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageUser_SymlinksResolveInTheImage: an image's /etc/passwd that
// is a symlink to a host path (absolute, or climbing with ..) is read as
// the sandbox would see it, inside the image, never the host's file.
func TestImageUser_SymlinksResolveInTheImage(t *testing.T) {
	host := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(host, []byte("leak:x:4242:4242::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{host, strings.Repeat("../", 20) + strings.TrimPrefix(host, "/")} {
		dir := hostileImage(t)
		if err := os.Symlink(target, filepath.Join(dir, "etc", "passwd")); err != nil {
			t.Fatal(err)
		}
		// The same path inside the image holds the image's own account.
		inside := filepath.Join(dir, host)
		if err := os.MkdirAll(filepath.Dir(inside), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(inside, []byte("leak:x:1111:1112::/:/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		uid, gid, err := imageUser(image{dir: dir, cfg: imageConfig{User: "leak"}})
		if err != nil || uid != 1111 || gid != 1112 {
			t.Errorf("etc/passwd -> %s: imageUser = %d:%d, %v; want the image's 1111:1112 (4242 is the host file's)", target, uid, gid, err)
		}
	}
	// A symlink to a host account file with no such path in the image:
	// the user is unknown, not the host's.
	dir := hostileImage(t)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "etc", "passwd")); err != nil {
		t.Fatal(err)
	}
	if uid, _, err := imageUser(image{dir: dir, cfg: imageConfig{User: "daemon"}}); err == nil {
		t.Errorf("etc/passwd -> /etc/passwd, User daemon: uid %d from the host's file, want an error", uid)
	}
}

// TestImageUser_FIFOAndOddFiles: a FIFO, a directory, a device link or
// a huge file at /etc/passwd or /etc/group fails at once, never blocks.
func TestImageUser_FIFOAndOddFiles(t *testing.T) {
	cases := map[string]func(dir string) error{
		"fifo passwd": func(dir string) error { return unix.Mkfifo(filepath.Join(dir, "etc", "passwd"), 0o644) },
		"fifo group": func(dir string) error {
			if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("u:x:5:5::/:/bin/sh\n"), 0o644); err != nil {
				return err
			}
			return unix.Mkfifo(filepath.Join(dir, "etc", "group"), 0o644)
		},
		"directory passwd": func(dir string) error { return os.Mkdir(filepath.Join(dir, "etc", "passwd"), 0o755) },
		"huge passwd": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "etc", "passwd"), make([]byte, maxImageFile+1), 0o644)
		},
		"device passwd": func(dir string) error {
			if err := os.MkdirAll(filepath.Join(dir, "dev"), 0o755); err != nil {
				return err
			}
			if err := unix.Mknod(filepath.Join(dir, "dev", "kmsg"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 11))); err != nil {
				return err
			}
			return os.Symlink("/dev/kmsg", filepath.Join(dir, "etc", "passwd"))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			dir := hostileImage(t)
			if err := mk(dir); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := imageUser(image{dir: dir, cfg: imageConfig{User: "u:g"}})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("imageUser succeeded, want an error")
				}
			case <-time.After(30 * time.Second):
				t.Errorf("imageUser still blocked after 30s")
				// Unblock it: a writer that closes at once.
				for _, f := range []string{"passwd", "group"} {
					if w, err := os.OpenFile(filepath.Join(dir, "etc", f), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
						w.Close()
					}
				}
				select { // a device read may stay blocked: leave it
				case <-done:
				case <-time.After(5 * time.Second):
				}
			}
		})
	}
}
