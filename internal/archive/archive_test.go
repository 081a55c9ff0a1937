package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/archive"
)

// entry is one header of a test archive; body is a regular file's content.
type entry struct {
	name string
	typ  byte
	link string
	mode int64
	body string
}

func tarOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		if e.typ == 0 {
			e.typ = tar.TypeReg
		}
		if e.mode == 0 {
			e.mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil && h.Size > 0 {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestExtract_Hostile unpacks archives that a naive extractor (join the
// name to the destination, os.Create, os.Symlink, os.Link, mknod, chmod
// the header's mode) would let out of the destination or turn into
// something dangerous. Each must be refused (or neutralized) and leave
// the directory beside the destination untouched.
func TestExtract_Hostile(t *testing.T) {
	cases := []struct {
		name    string
		root    string                              // Limits.Root
		plant   func(t *testing.T, dst, out string) // before the extraction
		entries func(out string) []entry
		want    error // nil: succeeds, but check still runs
		check   func(t *testing.T, dst, out string)
	}{
		{name: "absolute path", entries: func(out string) []entry {
			return []entry{{name: filepath.Join(out, "evil"), body: "x"}}
		}, want: archive.ErrRefused},
		{name: "dotdot", entries: func(string) []entry {
			return []entry{{name: "../out/evil", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "dotdot inside", entries: func(string) []entry {
			return []entry{{name: "a/../../out/evil", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "symlink out, then written through", entries: func(out string) []entry {
			return []entry{{name: "l", typ: tar.TypeSymlink, link: out}, {name: "l/evil", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "relative symlink out, then a directory through it", entries: func(string) []entry {
			return []entry{{name: "l", typ: tar.TypeSymlink, link: "../out"}, {name: "l/sub/", typ: tar.TypeDir, mode: 0o755}}
		}, want: archive.ErrRefused},
		{name: "symlink planted on disk, then written through", plant: func(t *testing.T, dst, out string) {
			if err := os.Symlink(out, filepath.Join(dst, "planted")); err != nil {
				t.Fatal(err)
			}
		}, entries: func(string) []entry {
			return []entry{{name: "planted/evil", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "symlink to a file out, then the file written", entries: func(out string) []entry {
			return []entry{{name: "l", typ: tar.TypeSymlink, link: filepath.Join(out, "secret")}, {name: "l", body: "x"}}
		}, check: func(t *testing.T, dst, _ string) {
			if b, err := os.ReadFile(filepath.Join(dst, "l")); err != nil || string(b) != "x" {
				t.Errorf("l = %q, %v; want the file replacing the link", b, err)
			}
		}},
		{name: "hard link out", entries: func(string) []entry {
			return []entry{{name: "h", typ: tar.TypeLink, link: "../out/secret"}}
		}, want: archive.ErrRefused},
		{name: "hard link to an absolute path", entries: func(out string) []entry {
			return []entry{{name: "h", typ: tar.TypeLink, link: filepath.Join(out, "secret")}}
		}, want: archive.ErrRefused},
		{name: "hard link through a symlink out", entries: func(out string) []entry {
			return []entry{{name: "l", typ: tar.TypeSymlink, link: out}, {name: "h", typ: tar.TypeLink, link: "l/secret"}}
		}, want: archive.ErrRefused},
		{name: "character device", entries: func(string) []entry {
			return []entry{{name: "null", typ: tar.TypeChar}}
		}, want: archive.ErrRefused},
		{name: "block device", entries: func(string) []entry {
			return []entry{{name: "sda", typ: tar.TypeBlock}}
		}, want: archive.ErrRefused},
		{name: "fifo", entries: func(string) []entry {
			return []entry{{name: "p", typ: tar.TypeFifo}}
		}, want: archive.ErrRefused},
		{name: "setuid and setgid dropped", entries: func(string) []entry {
			return []entry{{name: "suid", mode: 0o6755, body: "#!/bin/sh\n"}, {name: "d/", typ: tar.TypeDir, mode: 0o2775}}
		}, check: func(t *testing.T, dst, _ string) {
			for p, want := range map[string]os.FileMode{"suid": 0o755, "d": 0o775 | os.ModeDir} {
				fi, err := os.Lstat(filepath.Join(dst, p))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode() != want {
					t.Errorf("%s mode = %v, want %v", p, fi.Mode(), want)
				}
			}
		}},
		{name: "too many entries", entries: func(string) []entry {
			es := make([]entry, 0, 20)
			for i := range 20 {
				es = append(es, entry{name: "f" + strings.Repeat("x", i), body: "x"})
			}
			return es
		}, want: archive.ErrRefused},
		{name: "name too long", entries: func(string) []entry {
			return []entry{{name: strings.Repeat("a/", 2100) + "f", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "root entry that is a file", entries: func(string) []entry {
			return []entry{{name: ".", body: "x"}}
		}, want: archive.ErrRefused},
		{name: "hard link to a file already in the destination", root: "app",
			plant: func(t *testing.T, dst, _ string) {
				if err := os.MkdirAll(filepath.Join(dst, ".ssh"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dst, ".ssh", "id_rsa"), []byte("key"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			entries: func(string) []entry {
				return []entry{{name: "app/", typ: tar.TypeDir, mode: 0o755}, {name: "app/notes", typ: tar.TypeLink, link: ".ssh/id_rsa"}}
			}, want: archive.ErrRefused, check: func(t *testing.T, dst, _ string) {
				if _, err := os.Lstat(filepath.Join(dst, "app", "notes")); err == nil {
					t.Error("app/notes was made: a second name for a file the archive did not write")
				}
			}},
		{name: "hard link to a file of the archive", entries: func(string) []entry {
			return []entry{{name: "a", body: "same"}, {name: "b", typ: tar.TypeLink, link: "a"}}
		}, check: func(t *testing.T, dst, _ string) {
			if b, err := os.ReadFile(filepath.Join(dst, "b")); err != nil || string(b) != "same" {
				t.Errorf("b = %q, %v; want a link to a", b, err)
			}
		}},
		{name: "a sibling of the expected root", root: "app", entries: func(string) []entry {
			return []entry{{name: "app/", typ: tar.TypeDir, mode: 0o755}, {name: ".bashrc", body: "evil"}}
		}, want: archive.ErrRefused, check: func(t *testing.T, dst, _ string) {
			if _, err := os.Lstat(filepath.Join(dst, ".bashrc")); err == nil {
				t.Error("the sibling .bashrc was written")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			dst, out := filepath.Join(base, "dst"), filepath.Join(base, "out")
			for _, d := range []string{dst, out} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(out, "secret"), []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			if c.plant != nil {
				c.plant(t, dst, out)
			}
			_, err := archive.Extract(dst, bytes.NewReader(tarOf(t, c.entries(out)...)), archive.Limits{Entries: 10, Root: c.root})
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Extract: %v, want %v", err, c.want)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != 1 {
				t.Errorf("the directory beside the destination has %d entries, want only its secret", len(ents))
			}
			if b, _ := os.ReadFile(filepath.Join(out, "secret")); string(b) != "secret" {
				t.Errorf("out/secret = %q: written through", b)
			}
			if c.check != nil {
				c.check(t, dst, out)
			}
		})
	}
}

func TestExtract_Malformed(t *testing.T) {
	dst := t.TempDir()
	b := tarOf(t, entry{name: "f", body: strings.Repeat("x", 2000)})
	_, err := archive.Extract(dst, bytes.NewReader(b[:1000]), archive.Limits{})
	if !errors.Is(err, archive.ErrFormat) {
		t.Fatalf("a cut archive: %v, want ErrFormat", err)
	}
	_, err = archive.Extract(dst, strings.NewReader(strings.Repeat("garbage!", 128)), archive.Limits{})
	if !errors.Is(err, archive.ErrFormat) {
		t.Fatalf("garbage: %v, want ErrFormat", err)
	}
}

// TestWriteExtract_RoundTrip archives a tree (nested directories, an
// empty one, a read-only one, a symlink inside and one pointing out) and
// extracts it elsewhere: same tree, same modes, links kept as links and
// nothing of what the outward link names in the archive.
func TestWriteExtract_RoundTrip(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	mk := func(p string, mode os.FileMode, body string) {
		t.Helper()
		p = filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("a.txt", 0o644, "a")
	mk("bin/run.sh", 0o755, "#!/bin/sh\n")
	mk("deep/er/still/f", 0o600, "deep")
	mk("ro/file", 0o444, "ro")
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "outside"), []byte("SECRET-OUTSIDE"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside"), filepath.Join(src, "out")); err != nil {
		t.Fatal(err)
	}

	var b bytes.Buffer
	st, err := archive.Write(&b, src, "copy", archive.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b.Bytes(), []byte("SECRET-OUTSIDE")) {
		t.Error("the archive holds what a symlink out of the root names")
	}
	if st.Entries != 13 {
		t.Errorf("Write: %d entries, want 13", st.Entries)
	}
	dst := filepath.Join(base, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Extract(dst, &b, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "copy", "ro"), 0o755) })
	err = filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		gi, err := os.Lstat(filepath.Join(dst, "copy", rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if gi.Mode() != fi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, gi.Mode(), fi.Mode())
		}
		switch {
		case fi.Mode().IsRegular():
			want, _ := os.ReadFile(p)
			got, _ := os.ReadFile(filepath.Join(dst, "copy", rel))
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %q, want %q", rel, got, want)
			}
		case fi.Mode()&os.ModeSymlink != 0:
			want, _ := os.Readlink(p)
			got, _ := os.Readlink(filepath.Join(dst, "copy", rel))
			if got != want {
				t.Errorf("%s -> %q, want %q", rel, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExtract_Mask: with a mask (sbx cp -r on the user's machine) modes
// lose the mask's bits and the sticky bit, as tar gives a user who is not
// root; without one (the agent, in a sandbox) they are the archive's,
// sticky bit included. Setuid and setgid go either way.
func TestExtract_Mask(t *testing.T) {
	arc := tarOf(t,
		entry{name: "t/", typ: tar.TypeDir, mode: 0o777},
		entry{name: "t/shared/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "t/world", mode: 0o666, body: "w"},
		entry{name: "t/suid", mode: 0o4777, body: "s"},
		entry{name: "t/sticky", mode: 0o1644, body: "k"},
	)
	for _, tc := range []struct {
		name string
		mask uint32
		want map[string]os.FileMode
	}{
		{"umask 027 and sticky", 0o027 | 0o1000, map[string]os.FileMode{
			"t": 0o750, "t/shared": 0o750, "t/world": 0o640, "t/suid": 0o750, "t/sticky": 0o640,
		}},
		{"no mask", 0, map[string]os.FileMode{
			"t": 0o777, "t/shared": 0o777 | os.ModeSticky, "t/world": 0o666, "t/suid": 0o777, "t/sticky": 0o644 | os.ModeSticky,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := archive.Extract(dir, bytes.NewReader(arc), archive.Limits{Mask: tc.mask}); err != nil {
				t.Fatal(err)
			}
			for p, want := range tc.want {
				fi, err := os.Lstat(filepath.Join(dir, p))
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid); got != want {
					t.Errorf("%s: mode %v, want %v", p, got, want)
				}
			}
		})
	}
}

// TestLocalMask_IsTheUmaskAndSticky: LocalMask reads the process's umask
// without changing it.
func TestLocalMask_IsTheUmaskAndSticky(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	if got := archive.LocalMask(); got != 0o1027 {
		t.Errorf("LocalMask() = %#o under umask 027, want 01027", got)
	}
	if now := syscall.Umask(0o027); now != 0o027 {
		t.Errorf("the umask after LocalMask is %#o, want 027", now)
	}
}
