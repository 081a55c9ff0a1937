package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// layerOf writes the upper directory upper over lower as a layer and
// returns its entries by name.
func layerOf(t *testing.T, upper, lower string) (map[string]*tar.Header, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := writeLayer(context.Background(), &buf, upper, lower, layerLimits{maxBytes: maxLayerBytes}); err != nil {
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

// TestWriteLayer_Bounds: a sparse file longer than the layer's bound, a
// path longer than maxLayerPath and a done context are refused before
// anything of them is read or built; a hard-linked inode is forgotten
// once all its links were written.
func TestWriteLayer_Bounds(t *testing.T) {
	write := func(root string, ctx context.Context, max int64) (*layerWriter, error) {
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		cw := &countWriter{w: io.Discard}
		lw := &layerWriter{ctx: ctx, lim: layerLimits{maxBytes: max}, cw: cw, tw: tar.NewWriter(cw), seen: map[[2]uint64]*seenInode{}}
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		lw.dev = st.Dev
		return lw, lw.dir(fd, -1, "", 0)
	}
	t.Run("sparse", func(t *testing.T) {
		root := t.TempDir()
		f, err := os.Create(filepath.Join(root, "big"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 40); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := write(root, context.Background(), 64<<20); !errors.Is(err, runtime.ErrInvalidSpec) {
			t.Errorf("a 1 TiB sparse file under a 64 MiB bound: %v, want ErrInvalidSpec", err)
		}
	})
	t.Run("long path", func(t *testing.T) {
		root := t.TempDir()
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Repeat("n", 255)
		for range maxLayerPath/256 + 1 {
			if err := unix.Mkdirat(fd, name, 0o755); err != nil {
				t.Fatal(err)
			}
			nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			unix.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			fd = nfd
		}
		unix.Close(fd)
		t.Cleanup(func() { _ = os.RemoveAll(root) })
		if _, err := write(root, context.Background(), maxLayerBytes); !errors.Is(err, runtime.ErrInvalidSpec) {
			t.Errorf("a path of %d bytes: %v, want ErrInvalidSpec", (maxLayerPath/256+1)*256, err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := write(root, ctx, maxLayerBytes); !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled walk: %v, want context.Canceled", err)
		}
	})
	t.Run("links forgotten", func(t *testing.T) {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "a"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"b", "c"} {
			if err := os.Link(filepath.Join(root, "a"), filepath.Join(root, n)); err != nil {
				t.Fatal(err)
			}
		}
		lw, err := write(root, context.Background(), maxLayerBytes)
		if err != nil || len(lw.seen) != 0 || lw.seenBytes != 0 {
			t.Errorf("after all links: err %v, %d inodes and %d bytes remembered, want none", err, len(lw.seen), lw.seenBytes)
		}
	})
}
