package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrRefused is an entry the archive may not create: a path outside
	// the destination, through a symbolic link, a device node, or past a
	// limit.
	ErrRefused = errors.New("archive entry refused")
	// ErrFormat is a stream that is not a well-formed tar archive.
	ErrFormat = errors.New("malformed tar archive")
)

// Limits bound what one archive may hold. Zero fields take the defaults.
type Limits struct {
	// Entries is the most entries (headers) an archive may have;
	// default 1,000,000.
	Entries int
	// NameLen is the longest entry name or link target in bytes; default
	// 4096 (PATH_MAX).
	NameLen int
	// Root, when set, is the one name an extraction may create in its
	// directory: every entry must be Root or beneath it. sbx cp -r sets it
	// when unpacking a sandbox's tree into an existing directory, so a
	// hostile sandbox cannot add a sibling (say ~/.bashrc beside ~/app).
	Root string
	// Mask holds mode bits cleared from every entry's mode (setuid and
	// setgid are cleared always). sbx cp -r, writing on the user's
	// machine, passes LocalMask(): the process's umask and the sticky
	// bit, as tar does for a user who is not root, so a sandbox's
	// world-writable files arrive as the user's other new files would.
	// The agent passes none: an upload into a sandbox keeps the archive's
	// permission bits and sticky bit as docker cp does (the caller owns
	// the sandbox and chose them; nothing runs setuid from them).
	Mask uint32
}

// LocalMask is the Mask for an extraction onto the user's machine: the
// process's umask (from /proc/self/status; where that is missing, read
// by setting it and back) and the sticky bit.
func LocalMask() uint32 {
	return umask() | unix.S_ISVTX
}

func umask() uint32 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return uint32(m) & 0o777
				}
			}
		}
	}
	m := unix.Umask(0o077) // briefly the strictest, never looser
	unix.Umask(m)
	return uint32(m) & 0o777
}

func (l Limits) entries() int {
	if l.Entries > 0 {
		return l.Entries
	}
	return 1_000_000
}

func (l Limits) nameLen() int {
	if l.NameLen > 0 {
		return l.NameLen
	}
	return 4096
}

// copyBuffer is the buffer one extraction or archive copies through.
const copyBuffer = 1 << 20

// Stats says what an extraction or an archive held.
type Stats struct {
	Entries int
	Bytes   int64 // regular files' content
}

// Extract unpacks the tar stream r beneath dir, an existing directory that
// is itself opened normally (the caller chose it); nothing beneath it is
// reached through a symbolic link. An entry named "." (or the archive's
// empty root) sets dir's own mode. Errors: ErrRefused or ErrFormat for
// the archive's faults, the read error of r, or the file system's (ENOSPC
// and EDQUOT when the disk is full), each naming the entry.
func Extract(dir string, r io.Reader, lim Limits) (Stats, error) {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	x := &extractor{root: root, lim: lim, buf: make([]byte, copyBuffer), parent: -1}
	defer x.close()
	err = x.run(tar.NewReader(r))
	if err == nil {
		err = x.finishDirs()
	}
	return x.stats, err
}

type extractor struct {
	root  int
	lim   Limits
	buf   []byte
	stats Stats
	// parent caches the descriptor of the last entry's parent directory
	// (tar streams list a directory's files together).
	parent     int
	parentPath string
	// dirs are the modes to give directories without the owner's rwx
	// once their entries are in: such a directory is writable until then.
	dirs     []dirMode
	deferred int // bytes of the paths in dirs
	// made holds the regular files this extraction wrote, the only
	// targets a hard link may name (madeBytes: their paths' bytes).
	made      map[string]struct{}
	madeBytes int
}

type dirMode struct {
	path string
	mode uint32
}

func (x *extractor) close() {
	if x.parent >= 0 {
		unix.Close(x.parent)
	}
	unix.Close(x.root)
}

func (x *extractor) run(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("%w: %w", ErrFormat, err)
			}
			return err
		}
		x.stats.Entries++
		if x.stats.Entries > x.lim.entries() {
			return fmt.Errorf("%w: more than %d entries", ErrRefused, x.lim.entries())
		}
		if err := x.entry(h, tr); err != nil {
			return err
		}
	}
}

// cleanName checks an entry name or hard link target and returns its
// components: never absolute, never "..", never empty components but
// the "." ones, which are dropped.
func (x *extractor) cleanName(name string) ([]string, error) {
	if len(name) > x.lim.nameLen() {
		return nil, fmt.Errorf("%w: a name of %d bytes (at most %d)", ErrRefused, len(name), x.lim.nameLen())
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("%w: %q has a NUL byte", ErrRefused, name)
	}
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%w: %q is absolute", ErrRefused, name)
	}
	var out []string
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("%w: %q leaves the destination (..)", ErrRefused, name)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// perm is the mode an entry gets: permission and sticky bits but those
// in the mask; setuid and setgid are dropped.
func (x *extractor) perm(h *tar.Header) uint32 { return uint32(h.Mode) & 0o1777 &^ x.lim.Mask }

func (x *extractor) entry(h *tar.Header, tr *tar.Reader) error {
	parts, err := x.cleanName(h.Name)
	if err != nil {
		return err
	}
	if x.lim.Root != "" && (len(parts) == 0 || parts[0] != x.lim.Root) {
		return fmt.Errorf("%w: %q is not under %q", ErrRefused, h.Name, x.lim.Root)
	}
	if len(parts) == 0 { // the root itself
		if h.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: %q names the destination but is not a directory", ErrRefused, h.Name)
		}
		x.dirs = append(x.dirs, dirMode{"", x.perm(h)})
		x.deferred++
		if x.deferred > maxDeferred {
			return fmt.Errorf("%w: too many root entries", ErrRefused)
		}
		return nil
	}
	name := strings.Join(parts, "/")
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, '\x00':
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock:
		return fmt.Errorf("%w: %q is a device node", ErrRefused, h.Name)
	case tar.TypeFifo:
		return fmt.Errorf("%w: %q is a FIFO", ErrRefused, h.Name)
	default:
		return fmt.Errorf("%w: %q has type %q", ErrRefused, h.Name, h.Typeflag)
	}
	pfd, err := x.dir(parts[:len(parts)-1])
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	base := parts[len(parts)-1]
	switch h.Typeflag {
	case tar.TypeDir:
		err = x.mkdir(pfd, base, name, x.perm(h))
	case tar.TypeSymlink:
		err = x.symlink(pfd, base, h.Linkname)
	case tar.TypeLink:
		err = x.link(pfd, base, h.Linkname)
	default:
		if err = x.file(pfd, base, x.perm(h), tr, h.Size); err == nil {
			err = x.remember(strings.Join(parts, "/"))
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// remember records a regular file this extraction wrote, as a target
// hard links may name, within maxDeferred bytes of paths.
func (x *extractor) remember(path string) error {
	if x.made == nil {
		x.made = make(map[string]struct{})
	}
	if _, ok := x.made[path]; ok {
		return nil
	}
	x.madeBytes += len(path)
	if x.madeBytes > maxDeferred {
		return fmt.Errorf("%w: over %d bytes of paths of files that hard links may name", ErrRefused, maxDeferred)
	}
	x.made[path] = struct{}{}
	return nil
}

// dir returns a descriptor of the directory parts names beneath the
// root, making missing directories (0755), never through a symbolic
// link. The descriptor belongs to x (cached); the caller does not close
// it.
func (x *extractor) dir(parts []string) (int, error) {
	if len(parts) == 0 {
		return x.root, nil
	}
	p := strings.Join(parts, "/")
	if x.parent >= 0 && x.parentPath == p {
		return x.parent, nil
	}
	fd, err := walk(x.root, parts, true)
	if err != nil {
		return -1, err
	}
	if x.parent >= 0 {
		unix.Close(x.parent)
	}
	x.parent, x.parentPath = fd, p
	return fd, nil
}

// walk opens the directory parts names beneath root, one component at a
// time with O_NOFOLLOW; with create, missing directories are made. A
// symbolic link on the way is ErrRefused. The caller closes the result.
func walk(root int, parts []string, create bool) (int, error) {
	fd := root
	for i, c := range parts {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || err == unix.EEXIST {
				next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if fd != root {
			unix.Close(fd)
		}
		if err != nil {
			p := strings.Join(parts[:i+1], "/")
			if err == unix.ELOOP || (err == unix.ENOTDIR && isSymlinkAt(root, parts[:i+1])) {
				return -1, fmt.Errorf("%w: %s is a symbolic link", ErrRefused, p)
			}
			return -1, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		fd = next
	}
	if fd == root { // never hand out the root to be closed
		return unix.Dup(root)
	}
	return fd, nil
}

// isSymlinkAt reports whether the path parts names beneath root is a
// symbolic link (for the error message of an ENOTDIR walk).
func isSymlinkAt(root int, parts []string) bool {
	pfd := root
	if len(parts) > 1 {
		fd, err := walk(root, parts[:len(parts)-1], false)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		pfd = fd
	}
	var st unix.Stat_t
	if unix.Fstatat(pfd, parts[len(parts)-1], &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// clearEntry removes what is at base in pfd unless it is a directory, so that
// a new entry takes its place (a symlink there is removed, never written
// through). A directory there is EISDIR for a non-directory entry.
func clearEntry(pfd int, base string) error {
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return unix.EISDIR
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

func (x *extractor) mkdir(pfd int, base, name string, mode uint32) error {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
	case err == nil || err == unix.ENOENT:
		if err == nil { // a file or link in the way: the directory replaces it
			if err := unix.Unlinkat(pfd, base, 0); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
	default:
		return err
	}
	return x.setDirMode(pfd, base, name, mode)
}

// maxDeferred bounds the bytes of directory paths kept for finishDirs.
const maxDeferred = 16 << 20

// setDirMode gives the directory base in pfd its mode now, with the
// owner's rwx kept until finishDirs when the mode lacks them (so its
// entries can still be made); only those are remembered, within
// maxDeferred bytes of paths.
func (x *extractor) setDirMode(pfd int, base, name string, mode uint32) error {
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.Fchmod(fd, mode|0o700)
	unix.Close(fd)
	if err != nil || mode&0o700 == 0o700 {
		return err
	}
	x.deferred += len(name)
	if x.deferred > maxDeferred {
		return fmt.Errorf("%w: over %d bytes of paths of directories without owner rwx", ErrRefused, maxDeferred)
	}
	x.dirs = append(x.dirs, dirMode{name, mode})
	return nil
}

func (x *extractor) symlink(pfd int, base, target string) error {
	if target == "" || len(target) > x.lim.nameLen() || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("%w: bad symbolic link target", ErrRefused)
	}
	if err := clearEntry(pfd, base); err != nil {
		return err
	}
	return unix.Symlinkat(target, pfd, base)
}

func (x *extractor) link(pfd int, base, target string) error {
	parts, err := x.cleanName(target)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return fmt.Errorf("%w: a hard link to the destination", ErrRefused)
	}
	// Only to a file this archive wrote: a link to one that was already
	// there would give the sender a second name for it (sbx cp -r into a
	// home directory, a link to .ssh/id_rsa beside the copied tree).
	if _, ok := x.made[strings.Join(parts, "/")]; !ok {
		return fmt.Errorf("%w: a hard link to %q, which this archive did not write", ErrRefused, target)
	}
	ofd, err := walk(x.root, parts[:len(parts)-1], false)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	if err := clearEntry(pfd, base); err != nil {
		return err
	}
	// No AT_SYMLINK_FOLLOW: a link to a symbolic link links the link.
	return unix.Linkat(ofd, parts[len(parts)-1], pfd, base, 0)
}

func (x *extractor) file(pfd int, base string, mode uint32, r io.Reader, size int64) error {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(pfd, base, flags, 0o600)
	if err == unix.EEXIST {
		if err = clearEntry(pfd, base); err == nil {
			fd, err = unix.Openat(pfd, base, flags, 0o600)
		}
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	n, err := io.CopyBuffer(onlyWriter{f}, io.LimitReader(r, size), x.buf)
	x.stats.Bytes += n
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err != nil {
		return err
	}
	if n < size {
		return fmt.Errorf("%w: %w", ErrFormat, io.ErrUnexpectedEOF)
	}
	if err := f.Chmod(fs.FileMode(mode&0o777) | stickyMode(mode)); err != nil {
		return err
	}
	return f.Close()
}

func stickyMode(mode uint32) fs.FileMode {
	if mode&unix.S_ISVTX != 0 {
		return fs.ModeSticky
	}
	return 0
}

// finishDirs gives directories their modes, deepest first (a read-only
// parent would refuse its children's chmod otherwise).
func (x *extractor) finishDirs() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		var parts []string
		if d.path != "" {
			parts = strings.Split(d.path, "/")
		}
		fd, err := walk(x.root, parts, false)
		if err != nil {
			return fmt.Errorf("%s: %w", d.path, err)
		}
		err = unix.Fchmod(fd, d.mode)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", d.path, err)
		}
	}
	return nil
}

// onlyWriter hides *os.File's ReadFrom so io.CopyBuffer uses the buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
