package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// layerOf writes the upper directory upper over lower as a layer and
// returns its entries by name.
func layerOf(t *testing.T, upper, lower string) (map[string]*tar.Header, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := writeLayer(&buf, upper, lower); err != nil {
		return nil, err
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = hdr
	}
}

// TestWriteLayer_OverlayMarks: an upper directory as overlay leaves it
// (a whiteout, an opaque directory, overlay's own attributes) is written
// in the layer format; a redirected directory or a metadata-only copy,
// whose content is in the lower directory, is errLayerUnreadable (the
// commit then takes the whole file system).
func TestWriteLayer_OverlayMarks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: whiteouts and trusted.* attributes need root")
	}
	lower, upper := t.TempDir(), t.TempDir()
	for _, d := range []string{"etc", "usr/lib", "gone"} {
		if err := os.MkdirAll(filepath.Join(lower, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(upper, "usr/lib"), 0o755))
	must(unix.Mknod(filepath.Join(upper, "gone"), unix.S_IFCHR, 0))
	must(unix.Setxattr(filepath.Join(upper, "usr/lib"), xattrOpaque, []byte("y"), 0))
	must(os.WriteFile(filepath.Join(upper, "usr/lib/new"), []byte("n"), 0o644))
	must(os.MkdirAll(filepath.Join(upper, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(upper, "etc/hostname"), []byte("h\n"), 0o644))
	must(unix.Setxattr(filepath.Join(upper, "etc"), "trusted.overlay.impure", []byte("y"), 0))
	got, err := layerOf(t, upper, lower)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".wh.gone", "usr/", "usr/lib/", "usr/lib/.wh..wh..opq", "usr/lib/new"} {
		if got[name] == nil {
			t.Errorf("no %s in the layer", name)
		}
	}
	for _, name := range []string{"gone", "etc/", "etc/hostname"} {
		if got[name] != nil {
			t.Errorf("%s in the layer", name)
		}
	}
	for name, h := range got {
		if len(h.PAXRecords) > 0 {
			t.Errorf("%s carries %v", name, h.PAXRecords)
		}
	}

	for attr, where := range map[string]string{xattrRedirect: "usr/lib", xattrMetacopy: "usr/lib/new"} {
		must(unix.Setxattr(filepath.Join(upper, where), attr, []byte("x"), 0))
		if _, err := layerOf(t, upper, lower); !errors.Is(err, errLayerUnreadable) {
			t.Errorf("with %s on %s: %v, want errLayerUnreadable", attr, where, err)
		}
		must(unix.Removexattr(filepath.Join(upper, where), attr))
	}
	// Without a lower directory (the whole file system), a 0/0 device is
	// no whiteout.
	got, err = layerOf(t, upper, "")
	if err != nil {
		t.Fatal(err)
	}
	if got[".wh.gone"] != nil || got["usr/lib/.wh..wh..opq"] != nil {
		t.Errorf("whiteouts in a whole file system's layer: %v", got)
	}
}
