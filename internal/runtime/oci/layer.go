package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// A commit's layer is what the sandbox wrote: its overlay's upper
// directory, as a tar in the layer format the engine loads (the OCI image
// layer format, with Docker's whiteouts). The sandbox owns that tree, and
// every name, link, mode and extended attribute in it is the sandbox's to
// choose, so writeLayer:
//
//   - walks it by descriptor: each directory is opened relative to its
//     parent's descriptor with O_NOFOLLOW, each file the same way and
//     checked to be the inode that was listed, so no symlink (a link to
//     "/" where a directory was) leads out of the tree; a symlink is
//     written as a link, never followed;
//   - writes an overlay whiteout (a 0/0 character device) as ".wh.<name>"
//     and an opaque directory (trusted.overlay.opaque "y", a directory the
//     sandbox removed and made again) as its entry and ".wh..wh..opq" in
//     it; leaves out names that start with ".wh." (a layer cannot carry
//     them: the engine would read them as whiteouts), sockets, devices and
//     what is mounted on the tree (another device);
//   - keeps owners, modes (setuid bits included), modification times,
//     hard links (as links to the first name) and of the extended
//     attributes only security.capability, as the engine's commit does
//     (user.* and the rest go, whatever their size: none is read);
//   - leaves out what the runtime, not the sandbox, wrote: /etc/hostname,
//     /etc/hosts and /etc/resolv.conf (writeEtc: the engine bind-mounts its
//     own and does not commit them), the mount points of the agent and of
//     its socket directory (and the directories above them that the image
//     does not have) when nothing under them is in the layer, and a
//     directory nothing under which is in the layer and whose mode and
//     owner are its image's (the /etc that writeEtc made; a directory the
//     sandbox only wrote and removed a file in);
//   - nests at most maxLayerDepth directories deep, names no path longer
//     than maxLayerPath bytes (refused before its header is built: the
//     engine could not unpack it), and stays under lim.maxBytes of file
//     data and headers (a sparse file counts its whole length: the layer
//     holds it all, so `truncate -s 8E` is refused before one byte of it
//     is read); hard links are remembered only until all of an inode's
//     links were seen, and at most maxLayerSeenBytes of their names;
//   - stops when ctx is done (checked at every entry and every chunk of a
//     file's data), and asks lim.free before each file's data whether the
//     layer's own file system has room for it.
//
// Overlay features that keep a file's data or a directory's entries in
// the lower directory (redirect_dir, metacopy: off by default, and off on
// the overlays this runtime mounts unless the kernel's defaults say
// otherwise) cannot be said as a layer: errLayerUnreadable, and the commit
// takes the whole file system instead.

// errLayerUnreadable: the upper directory holds what no layer can say.
var errLayerUnreadable = errors.New("the overlay's upper directory is not a layer")

// maxLayerDepth bounds how deep a committed tree may nest (each level
// holds two descriptors while the walk is under it).
const maxLayerDepth = 1000

// maxLayerPath bounds a committed path's length: the engine unpacks a
// layer with paths under its own data root (PATH_MAX 4096 with a prefix
// of its own), and a longer one would fail late, after the whole layer
// was written and copied. It also bounds what the walk holds: the
// pending directories' headers (at most maxLayerDepth of them, each
// under this) and each remembered hard link's name.
const maxLayerPath = 4096 - 256

// maxLayerSeenBytes bounds the names of hard-linked files remembered
// until all their links were seen.
const maxLayerSeenBytes = 64 << 20

// layerLimits bound a layer's writing.
type layerLimits struct {
	// maxBytes bounds the layer: its headers and its files' data.
	maxBytes int64
	// free, when set, is asked before a file's data is written whether
	// the layer's file system has need bytes more; it returns why not.
	free func(need int64) error
	// tick, when set, is called at every entry (the runtime's fault hook).
	tick func() error
}

// errLayerTooLarge: the sandbox's tree makes a layer larger than its bound.
func errLayerTooLarge(max int64) error {
	return fmt.Errorf("%w: the sandbox's files come to more than %d MiB (sparse files count their whole length); it cannot be committed", runtime.ErrInvalidSpec, max>>20)
}

// Overlay's extended attributes (on the upper directory's files; a
// sandbox cannot set trusted.* ones).
const (
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
	xattrMetacopy = "trusted.overlay.metacopy"
	xattrCaps     = "security.capability"
)

// Whiteouts in a layer (the OCI image specification's layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

var (
	// runtimeFiles are the files the runtime writes into the upper
	// directory (writeEtc), left out of every commit.
	runtimeFiles = map[string]bool{"etc/hostname": true, "etc/hosts": true, "etc/resolv.conf": true}
	// agentMountPoint is the empty file the OCI runtime makes to mount
	// the agent on.
	agentMountPoint = strings.TrimPrefix(runtime.AgentPath, "/")
	// mountPointDirs are the directories made to mount the agent and its
	// socket directory on, left out when nothing under them is in the
	// layer; runtimeDirs are those and the directories above them, left
	// out of a layer over an image too when the image has none there
	// (the OCI runtime made them).
	mountPointDirs = map[string]bool{path.Dir(agentMountPoint): true, strings.TrimPrefix(runtime.AgentSocketDir, "/"): true}
	runtimeDirs    = func() map[string]bool {
		m := map[string]bool{}
		for d := range mountPointDirs {
			for ; d != "." && d != "/" && d != ""; d = path.Dir(d) {
				m[d] = true
			}
		}
		return m
	}()
)

// writeLayer writes the tree at root to w as a layer. With lower (the
// image's unpacked root file system) root is an overlay's upper directory
// over it, and whiteouts and opaque directories are translated; without,
// root is a whole file system (the overlay as mounted).
func writeLayer(ctx context.Context, w io.Writer, root, lower string, lim layerLimits) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's file system: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	lowerFD := -1
	if lower != "" {
		// Without it (gone), nothing is compared with the image.
		if lowerFD, err = unix.Open(lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			lowerFD = -1
		} else {
			defer unix.Close(lowerFD)
		}
	}
	cw := &countWriter{w: w}
	lw := &layerWriter{ctx: ctx, lim: lim, cw: cw, tw: tar.NewWriter(cw), diff: lower != "", dev: st.Dev, seen: map[[2]uint64]*seenInode{}}
	if err := lw.dir(fd, lowerFD, "", 0); err != nil {
		return err
	}
	return lw.tw.Close()
}

type layerWriter struct {
	ctx  context.Context
	lim  layerLimits
	cw   *countWriter // what tw wrote
	tw   *tar.Writer
	diff bool   // root is an upper directory
	dev  uint64 // root's device: a directory on another is a mount point
	// seen are the hard-linked inodes written, until all their links are;
	// seenBytes their names' length.
	seen      map[[2]uint64]*seenInode
	seenBytes int
	// pending are the headers of the directories being walked that are
	// not written yet: a directory is written before the first entry
	// under it, or when it is left and was not dropped.
	pending []*tar.Header
}

// seenInode is a hard-linked file written: its first name, and how many
// of its links are still to come.
type seenInode struct {
	name string
	left uint64
}

// emit writes hdr, after the directories it is under.
func (lw *layerWriter) emit(hdr *tar.Header) error {
	if err := lw.flush(); err != nil {
		return err
	}
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if lw.cw.n > lw.lim.maxBytes {
		return errLayerTooLarge(lw.lim.maxBytes)
	}
	return nil
}

// stopped is why the walk stops before its next step: ctx done, or the
// fault hook.
func (lw *layerWriter) stopped() error {
	if err := lw.ctx.Err(); err != nil {
		return fmt.Errorf("the commit stopped: %w", context.Cause(lw.ctx))
	}
	if lw.lim.tick != nil {
		return lw.lim.tick()
	}
	return nil
}

func (lw *layerWriter) flush() error {
	for _, h := range lw.pending {
		if err := lw.tw.WriteHeader(h); err != nil {
			return err
		}
	}
	lw.pending = nil
	return nil
}

func header(name string, typ byte, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Typeflag: typ, Name: name, Mode: int64(st.Mode & 0o7777),
		Uid: int(st.Uid), Gid: int(st.Gid), ModTime: time.Unix(st.Mtim.Sec, 0),
	}
}

// dir writes the entries of the directory fd (which it closes), rel
// beneath the root; lowerFD is the image's same directory (-1: none).
func (lw *layerWriter) dir(fd, lowerFD int, rel string, depth int) error {
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := lw.entry(fd, lowerFD, rel, name, depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read a directory: %w", err)
		}
	}
}

func (lw *layerWriter) entry(dfd, lowerFD int, rel, name string, depth int) error {
	child := name
	if rel != "" {
		child = rel + "/" + name
	}
	if name == "." || name == ".." || strings.HasPrefix(name, whiteoutPrefix) || runtimeFiles[child] {
		return nil
	}
	if err := lw.stopped(); err != nil {
		return err
	}
	// Checked before anything is built of it (the longest header is a
	// whiteout's or an opaque directory's, a few bytes more).
	if len(child)+len(whiteoutOpaque)+1 > maxLayerPath {
		return fmt.Errorf("%w: the sandbox's file system has a path longer than %d bytes (%s); it cannot be committed", runtime.ErrInvalidSpec, maxLayerPath, shortName(child))
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stat %q: %w", shortName(child), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return lw.subdir(dfd, lowerFD, child, name, &st, depth)
	case unix.S_IFREG:
		return lw.file(dfd, child, name, &st)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return fmt.Errorf("read the link %q: %w", shortName(child), err)
		}
		if n >= len(buf) {
			return fmt.Errorf("the link %q is longer than %d bytes", shortName(child), len(buf)-1)
		}
		hdr := header(child, tar.TypeSymlink, &st)
		hdr.Linkname = string(buf[:n])
		return lw.emit(hdr)
	case unix.S_IFIFO:
		return lw.emit(header(child, tar.TypeFifo, &st))
	case unix.S_IFCHR:
		if lw.diff && st.Rdev == 0 { // overlay's whiteout: the image's file was removed
			hdr := header(strings.TrimSuffix(child, name)+whiteoutPrefix+name, tar.TypeReg, &st)
			hdr.Mode = 0o600
			return lw.emit(hdr)
		}
	}
	return nil // sockets and devices are no part of an image
}

func (lw *layerWriter) subdir(dfd, lowerFD int, child, name string, st *unix.Stat_t, depth int) error {
	if st.Dev != lw.dev {
		return nil // a mount point: what is mounted there is not the sandbox's file system
	}
	if depth+1 > maxLayerDepth {
		return fmt.Errorf("%w: the sandbox's file system nests directories deeper than %d; it cannot be committed", runtime.ErrInvalidSpec, maxLayerDepth)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", shortName(child), err)
	}
	if err := sameInode(fd, st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("%q: %w", shortName(child), err)
	}
	opaque := false
	if lw.diff {
		if hasXattr(fd, xattrRedirect) {
			unix.Close(fd)
			return fmt.Errorf("%w: %q is a redirected directory", errLayerUnreadable, shortName(child))
		}
		v, _ := getXattr(fd, xattrOpaque, 8)
		opaque = v == "y"
	}
	clfd := -1
	if lowerFD >= 0 && !opaque {
		if clfd, err = unix.Openat(lowerFD, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			clfd = -1
		} else {
			defer unix.Close(clfd)
		}
	}
	lw.pending = append(lw.pending, header(child+"/", tar.TypeDir, st))
	mark := len(lw.pending)
	if opaque {
		hdr := header(child+"/"+whiteoutOpaque, tar.TypeReg, st)
		hdr.Mode = 0o600
		if err := lw.emit(hdr); err != nil {
			unix.Close(fd)
			return err
		}
	}
	if err := lw.dir(fd, clfd, child, depth+1); err != nil {
		return err
	}
	if len(lw.pending) != mark {
		return nil // written: something under it was
	}
	// Nothing under it is in the layer: the directory itself is, unless
	// the runtime made it, or it is its image's own, unchanged.
	drop := mountPointDirs[child]
	if lw.diff {
		drop = drop || (clfd < 0 && runtimeDirs[child]) || (clfd >= 0 && sameDirMeta(clfd, st))
	}
	if drop {
		lw.pending = lw.pending[:mark-1]
		return nil
	}
	return lw.flush()
}

func (lw *layerWriter) file(dfd int, child, name string, st *unix.Stat_t) error {
	if child == agentMountPoint && st.Size == 0 {
		return nil
	}
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if s, ok := lw.seen[key]; ok {
			hdr := header(child, tar.TypeLink, st)
			hdr.Linkname = s.name
			if s.left--; s.left == 0 {
				delete(lw.seen, key)
				lw.seenBytes -= len(s.name)
			}
			return lw.emit(hdr)
		}
	}
	// The data is refused before it is read: the layer would pass its
	// bound (a sparse file of exabytes costs its sandbox nothing).
	if st.Size < 0 || st.Size > lw.lim.maxBytes-lw.cw.n-int64(len(child))-2048 {
		return errLayerTooLarge(lw.lim.maxBytes)
	}
	if lw.lim.free != nil && st.Size > 0 {
		if err := lw.lim.free(st.Size); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", shortName(child), err)
	}
	f := os.NewFile(uintptr(fd), "file")
	defer f.Close()
	if err := sameInode(fd, st); err != nil {
		return fmt.Errorf("%q: %w", shortName(child), err)
	}
	if lw.diff && hasXattr(fd, xattrMetacopy) {
		return fmt.Errorf("%w: %q is a metadata-only copy", errLayerUnreadable, shortName(child))
	}
	hdr := header(child, tar.TypeReg, st)
	hdr.Size = st.Size
	// A capability set is at most 24 bytes (vfs_ns_cap_data).
	if v, ok := getXattr(fd, xattrCaps, 64); ok {
		hdr.PAXRecords = map[string]string{"SCHILY.xattr." + xattrCaps: v}
	}
	if err := lw.emit(hdr); err != nil {
		return err
	}
	if st.Nlink > 1 {
		if lw.seenBytes+len(child) > maxLayerSeenBytes {
			return fmt.Errorf("%w: the sandbox's file system has more hard-linked files than a commit remembers (%d MiB of their names); it cannot be committed", runtime.ErrInvalidSpec, maxLayerSeenBytes>>20)
		}
		lw.seen[key] = &seenInode{name: child, left: st.Nlink - 1}
		lw.seenBytes += len(child)
	}
	if _, err := io.CopyN(lw.tw, ctxReader{lw.ctx, f}, st.Size); err != nil {
		if cerr := lw.ctx.Err(); cerr != nil {
			return fmt.Errorf("the commit stopped: %w", context.Cause(lw.ctx))
		}
		return fmt.Errorf("read %q: %w", shortName(child), err)
	}
	return nil
}

// ctxReader reads r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// sameInode checks that fd is the inode st describes (nothing replaced
// the entry between its listing and its opening).
func sameInode(fd int, st *unix.Stat_t) error {
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		return err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino || got.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return errors.New("changed while it was being committed")
	}
	return nil
}

// sameDirMeta reports whether the directory lowerFD has st's mode and owner.
func sameDirMeta(lowerFD int, st *unix.Stat_t) bool {
	var l unix.Stat_t
	if err := unix.Fstat(lowerFD, &l); err != nil {
		return false
	}
	return l.Mode == st.Mode && l.Uid == st.Uid && l.Gid == st.Gid
}

// getXattr reads the extended attribute name of fd, at most max bytes
// (a longer one is not read, and not there).
func getXattr(fd int, name string, max int) (string, bool) {
	buf := make([]byte, max)
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// hasXattr reports whether fd has the extended attribute name.
func hasXattr(fd int, name string) bool {
	_, err := unix.Fgetxattr(fd, name, nil)
	return err == nil || errors.Is(err, unix.ERANGE)
}

// shortName is a path of the sandbox's tree as an error says it: its
// last 120 bytes at most (the whole could be a thousand names long).
func shortName(p string) string {
	if len(p) > 120 {
		return "…" + p[len(p)-120:]
	}
	return "/" + p
}
