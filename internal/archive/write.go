package archive

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// WriteOptions configure [Write].
type WriteOptions struct {
	Limits
	// SkipDir, when set, is asked about every directory below the root
	// (an open descriptor of it); true archives the directory empty.
	// The agent skips kernel file systems (/proc, /sys).
	SkipDir func(fd int) bool
}

// Write archives p to w as a tar stream whose entries are named under
// name (a single path component): name itself, then name/<relative
// path> for what a directory holds, in lexical order. p is opened
// normally, but if p is itself a symbolic link the link is archived; below
// it no link is followed. Only directories, regular files and symbolic
// links are archived (sockets, FIFOs and devices are skipped). A file that
// shrinks while it is read is padded with zeros, one that grows is cut at
// the size it had. An error after the first bytes leaves w with an
// unterminated archive, which readers see as a failure.
func Write(w io.Writer, p, name string, o WriteOptions) (Stats, error) {
	if name == "" || name == "." || name == ".." || slices.Contains([]byte(name), '/') {
		return Stats{}, fmt.Errorf("%w: bad root name %q", ErrRefused, name)
	}
	a := &archiver{tw: tar.NewWriter(w), o: o, buf: make([]byte, copyBuffer)}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return a.stats, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		var target string
		if target, err = os.Readlink(p); err == nil {
			err = a.header(name, tar.TypeSymlink, &st, target)
		}
	case unix.S_IFDIR:
		var fd int
		if fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return a.stats, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		err = a.dir(fd, name, &st, false)
	case unix.S_IFREG:
		var fd int
		if fd, err = unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
			return a.stats, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		err = a.file(fd, name)
	default:
		return a.stats, fmt.Errorf("%w: %s is not a directory, file or symbolic link", ErrRefused, p)
	}
	if err != nil {
		return a.stats, err
	}
	return a.stats, a.tw.Close()
}

type archiver struct {
	tw    *tar.Writer
	o     WriteOptions
	buf   []byte
	stats Stats
}

func (a *archiver) header(name string, typ byte, st *unix.Stat_t, link string) error {
	a.stats.Entries++
	if a.stats.Entries > a.o.entries() {
		return fmt.Errorf("%w: more than %d entries", ErrRefused, a.o.entries())
	}
	if len(name) > a.o.nameLen() {
		return fmt.Errorf("%w: %s: a name longer than %d bytes", ErrRefused, name, a.o.nameLen())
	}
	h := &tar.Header{
		Typeflag: typ,
		Name:     name,
		Linkname: link,
		Mode:     int64(st.Mode & 0o7777),
		Uid:      int(st.Uid),
		Gid:      int(st.Gid),
		ModTime:  time.Unix(st.Mtim.Unix()).Truncate(time.Second),
	}
	switch typ {
	case tar.TypeDir:
		h.Name += "/"
	case tar.TypeReg:
		h.Size = st.Size
	}
	return a.tw.WriteHeader(h)
}

// dir archives the directory open at fd (closed here) as name, then its
// entries. skip archives it empty.
func (a *archiver) dir(fd int, name string, st *unix.Stat_t, skip bool) error {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := a.header(name, tar.TypeDir, st, ""); err != nil {
		return err
	}
	if skip {
		return nil
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if len(names) > a.o.entries() {
		return fmt.Errorf("%w: %s holds more than %d entries", ErrRefused, name, a.o.entries())
	}
	slices.Sort(names)
	for _, n := range names {
		if err := a.child(fd, n, path.Join(name, n)); err != nil {
			return err
		}
	}
	return nil
}

// child archives the entry n of the directory open at dfd as name,
// without following a symbolic link.
func (a *archiver) child(dfd int, n, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT { // removed since the listing
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dfd, n)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		return a.header(name, tar.TypeSymlink, &st, target)
	case unix.S_IFDIR:
		fd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		// The directory opened may not be the one stat saw: use its own.
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "stat", Path: name, Err: err}
		}
		return a.dir(fd, name, &st, a.o.SkipDir != nil && a.o.SkipDir(fd))
	case unix.S_IFREG:
		fd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return a.file(fd, name)
	}
	return nil // a socket, FIFO or device: not archived
}

// file archives the regular file open at fd (closed here) as name: the
// size it has now, padded or cut to it.
func (a *archiver) file(fd int, name string) error {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG { // swapped since the listing
		return nil
	}
	if err := a.header(name, tar.TypeReg, &st, ""); err != nil {
		return err
	}
	n, err := io.CopyBuffer(a.tw, io.LimitReader(f, st.Size), a.buf)
	a.stats.Bytes += n
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for n < st.Size { // it shrank: keep the archive well formed
		z := min(int64(len(a.buf)), st.Size-n)
		clear(a.buf[:z])
		if _, err := a.tw.Write(a.buf[:z]); err != nil {
			return err
		}
		n += z
	}
	return nil
}

func readlinkat(dfd int, n string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		k, err := unix.Readlinkat(dfd, n, b)
		if err != nil {
			return "", err
		}
		if k < size {
			return string(b[:k]), nil
		}
		if size > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}
