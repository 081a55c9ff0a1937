package oci_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime/oci"
)

type entry struct {
	name, link string
	typ        byte
	body       string
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestUnpack_HostileArchive: an image's tar stream cannot write outside
// the directory it is unpacked into, whatever its names, symlinks and
// hard links say, and makes no device nodes.
func TestUnpack_HostileArchive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		wantErr bool
		// inside are files that must exist beneath root afterwards.
		inside []string
	}{
		{"DotDotNames", []entry{{name: "../../escape", typ: tar.TypeReg, body: "x"}}, false, []string{"escape"}},
		{"AbsoluteNames", []entry{{name: "/abs", typ: tar.TypeReg, body: "x"}}, false, []string{"abs"}},
		{"ThroughSymlinkToParent", []entry{
			{name: "link", link: "..", typ: tar.TypeSymlink},
			{name: "link/escape", typ: tar.TypeReg, body: "x"},
		}, true, []string{"link"}},
		{"ThroughAbsoluteSymlink", []entry{
			{name: "etc", link: "OUTSIDE", typ: tar.TypeSymlink},
			{name: "etc/escape", typ: tar.TypeReg, body: "x"},
		}, true, nil},
		{"HardLinkOut", []entry{{name: "hl", link: "../../../OUTSIDE/secret", typ: tar.TypeLink}}, true, nil},
		{"HardLinkThroughSymlink", []entry{
			{name: "l", link: "OUTSIDE", typ: tar.TypeSymlink},
			{name: "hl", link: "l/secret", typ: tar.TypeLink},
		}, true, nil},
		{"Device", []entry{{name: "dev/sda", typ: tar.TypeBlock}, {name: "ok", typ: tar.TypeReg, body: "x"}}, false, []string{"ok"}},
		{"ReplacedSymlinkIsNotFollowed", []entry{
			{name: "f", link: "OUTSIDE/secret", typ: tar.TypeSymlink},
			{name: "f", typ: tar.TypeReg, body: "overwritten"},
		}, false, []string{"f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "OUTSIDE")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			secret := filepath.Join(outside, "secret")
			if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(base, "a", "b", "root")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			// The absolute symlink case points at the real outside dir.
			for i := range tc.entries {
				if tc.entries[i].link == "OUTSIDE" {
					tc.entries[i].link = outside
				}
			}
			err := oci.Unpack(archive(t, tc.entries...), root)
			if (err != nil) != tc.wantErr {
				t.Fatalf("unpack = %v, want error %v", err, tc.wantErr)
			}
			for _, p := range []string{filepath.Join(base, "escape"), filepath.Join(base, "a", "escape"), filepath.Join(base, "a", "b", "escape"), filepath.Join(outside, "escape")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s written outside the root", p)
				}
			}
			if b, _ := os.ReadFile(secret); string(b) != "secret" {
				t.Errorf("the file outside was changed: %q", b)
			}
			var st os.FileInfo
			if st, err = os.Stat(secret); err == nil && st.Sys() != nil {
				if n := linkCount(st); n != 1 {
					t.Errorf("the file outside has %d links, want 1", n)
				}
			}
			for _, p := range tc.inside {
				if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s not unpacked beneath the root: %v", p, err)
				}
			}
			if _, err := os.Lstat(filepath.Join(root, "dev", "sda")); err == nil {
				t.Errorf("a device node was made")
			}
		})
	}
}

func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Nlink
	}
	return 0
}
