package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// An image's tar stream is attacker input: whoever built the image chose
// its entries. unpack writes every entry beneath dir and nowhere else,
// whatever the names say:
//
//   - a name is cleaned as if rooted ("../../etc/x" is "etc/x"), so no
//     entry names a path outside dir;
//   - the directory an entry goes into is opened with openat2 and
//     RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, and the entry is made relative
//     to that descriptor with calls that do not follow a final symlink: a
//     symlink the archive planted earlier ("etc" -> "/etc") is never
//     followed, it makes the entries under it fail;
//   - a hard link's target is opened the same way, beneath dir;
//   - device nodes are skipped (a sandbox has no business with the host's
//     disks; its /dev is a tmpfs the OCI runtime fills), and so are
//     extended attributes (file capabilities would need CAP_SETFCAP in
//     the sandbox, which it does not get).
//
// Owners, modes (setuid bits included) and modification times are kept:
// the image's files must behave inside the sandbox as they do under the
// engine.

// errUnsafeEntry is an archive entry unpack refuses.
var errUnsafeEntry = errors.New("unsafe archive entry")

// unpack extracts the tar stream r beneath dir, which must exist and be
// empty. It stops at the first error; the caller removes dir then.
func unpack(r io.Reader, dir string) error {
	rootFD, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(rootFD)
	u := &unpacker{root: rootFD, parents: map[string]int{}}
	defer u.close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read image archive: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("image archive entry %q: %w", hdr.Name, err)
		}
	}
}

// unpacker keeps descriptors of the directories entries went into, so
// that a directory's thousand files cost one openat2.
type unpacker struct {
	root    int
	parents map[string]int // cleaned relative path → O_PATH descriptor
}

func (u *unpacker) close() {
	for _, fd := range u.parents {
		unix.Close(fd)
	}
}

// cleanName is an entry's name relative to the root: "" for the root.
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// parent opens (once) the directory rel beneath the root, following no
// symlink and leaving the root nowhere.
func (u *unpacker) parent(rel string) (int, error) {
	if rel == "" || rel == "." {
		return u.root, nil
	}
	if fd, ok := u.parents[rel]; ok {
		return fd, nil
	}
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(u.root, rel, how)
	if errors.Is(err, unix.ENOENT) {
		// An archive may leave out its directories' own entries: make
		// the missing ones (0755, root's), one component at a time.
		up, base := path.Split(rel)
		var pfd int
		if pfd, err = u.parent(strings.TrimSuffix(up, "/")); err != nil {
			return -1, err
		}
		if err = unix.Mkdirat(pfd, base, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
			fd, err = unix.Openat2(u.root, rel, how)
		}
	}
	if err != nil {
		return -1, fmt.Errorf("%w: directory %q: %w", errUnsafeEntry, rel, err)
	}
	u.parents[rel] = fd
	return fd, nil
}

// forget drops the cached descriptors of rel and everything under it: an
// entry replaced a directory.
func (u *unpacker) forget(rel string) {
	for p, fd := range u.parents {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			unix.Close(fd)
			delete(u.parents, p)
		}
	}
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	rel := cleanName(hdr.Name)
	if rel == "" {
		return nil // the root's own entry: dir's mode stays the runtime's
	}
	dirRel, base := path.Split(rel)
	pfd, err := u.parent(strings.TrimSuffix(dirRel, "/"))
	if err != nil {
		return err
	}
	mode := uint32(hdr.Mode & 0o7777)
	// What is there already: a directory stays if a directory comes again
	// (its mode and owner are updated); anything else is replaced.
	var st unix.Stat_t
	exists := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	if exists && !(hdr.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		flags := 0
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := os.RemoveAll(fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base)); err != nil {
				return err
			}
			u.forget(rel)
		} else if err := unix.Unlinkat(pfd, base, flags); err != nil {
			return fmt.Errorf("replace: %w", err)
		}
		exists = false
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return err
			}
		}
	case tar.TypeReg:
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), base)
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		// The target is the image's business: it is resolved inside the
		// sandbox, and unpack itself never follows it.
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return err
		}
	case tar.TypeLink:
		target := cleanName(hdr.Linkname)
		tfd, err := unix.Openat2(u.root, target, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("%w: hard link target %q: %w", errUnsafeEntry, hdr.Linkname, err)
		}
		defer unix.Close(tfd)
		var ts unix.Stat_t
		if err := unix.Fstat(tfd, &ts); err != nil {
			return err
		}
		if ts.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%w: hard link to a non-regular file %q", errUnsafeEntry, hdr.Linkname)
		}
		return unix.Linkat(tfd, "", pfd, base, unix.AT_EMPTY_PATH)
	case tar.TypeFifo:
		if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		return nil // see the comment at the top
	default:
		return nil // pax headers and the like carry no file
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// After chown, which clears setuid bits.
		if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}
