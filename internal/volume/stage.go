package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// A subpath mount is the one place where a path inside a volume, which
// every sandbox of the owner that mounts the whole volume can change at
// any moment, becomes a bind source. The engine (runc) follows symbolic
// links in a bind source, so handing it <volume>/<subpath> would let a
// sandbox that swaps a directory for a link to "/" between the daemon's
// check and the engine's mount have the host's root mounted into another
// sandbox. So the engine is never given a path inside a volume:
//
//  1. the daemon opens the subpath beneath the volume's root with
//     openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
//     RESOLVE_NO_XDEV): a symbolic link anywhere, ".." out of the volume or
//     another file system is refused by the kernel, not by a check that a
//     later swap can outrun; a missing directory is made with mkdirat on
//     the parent's fd, one name at a time, then opened the same way;
//  2. the exact directory it holds is cloned with open_tree(fd, "",
//     OPEN_TREE_CLONE|AT_EMPTY_PATH) and attached with move_mount at a
//     staging path, <staging root>/<sandbox id>/<mount index>, under a
//     0700 directory no sandbox can reach;
//  3. the engine gets the staging path as the bind source. A sandbox can
//     still rename or replace names in the volume afterwards: the staged
//     mount is of the directory, not of its name, and nothing can move a
//     directory out of the file system it is on.
//
// The daemon and dockerd share the host's mount namespace, so the staged
// mount is what the engine sees. Staged mounts go with the sandbox
// (Release, Abandon) and those of sandboxes that no longer exist are swept
// at startup (Sweep), so a killed daemon leaks none.

// resolve is how every path inside a volume is resolved.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openRetries bounds the retries of an openat2 that answers EAGAIN (the
// kernel's answer when a rename raced a RESOLVE_BENEATH walk).
const openRetries = 4

// openBeneath opens rel (a name or a path) beneath dirfd as a directory,
// following nothing.
func openBeneath(dirfd int, rel string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve}
	for range openRetries {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// subpathError is the refusal of a subpath that does not resolve to a
// directory inside the volume: the request's fault (400) or, for a race
// the kernel reported, a conflict to retry.
func subpathError(volume, sub string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: volume %s: subpath %q goes through a symbolic link", service.ErrInvalidArgument, volume, sub)
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w: volume %s: subpath %q is not a directory", service.ErrInvalidArgument, volume, sub)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: volume %s: subpath %q leaves the volume", service.ErrInvalidArgument, volume, sub)
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("%w: volume %s: subpath %q is too long", service.ErrInvalidArgument, volume, sub)
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
		// A directory renamed or removed while the walk held its parent.
		return fmt.Errorf("%w: volume %s: subpath %q changed while it was opened", service.ErrConflict, volume, sub)
	}
	return fmt.Errorf("volume %s: subpath %q: %w", volume, sub, err)
}

// openSubpath opens sub beneath the volume directory vol, creating the
// directories that are missing, and returns its fd and the directories it
// made (relative to vol, parents first). Nothing is ever resolved by a
// path a sandbox can change: each step is relative to an fd it holds.
func openSubpath(vol, sub string) (fd int, made []string, err error) {
	root, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("open volume: %w", err)
	}
	defer unix.Close(root)
	// The common case, a subpath that exists: one syscall.
	fd, err = openBeneath(root, sub)
	if !errors.Is(err, unix.ENOENT) {
		return fd, nil, err
	}
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, nil, err
	}
	defer func() {
		if err != nil {
			unix.Close(cur)
			removeMade(vol, made)
			made = nil
		}
	}()
	done := ""
	for name := range strings.SplitSeq(sub, "/") {
		next, err := openBeneath(cur, name)
		if errors.Is(err, unix.ENOENT) {
			merr := unix.Mkdirat(cur, name, 0o777)
			switch {
			case merr == nil:
				made = append(made, join(done, name))
				next, err = openBeneath(cur, name)
				if err == nil {
					// 0777 as the volume's root: a sandbox's unprivileged
					// accounts write here too (the umask took some).
					err = unix.Fchmod(next, 0o777)
					if err != nil {
						unix.Close(next)
					}
				}
			case errors.Is(merr, unix.EEXIST):
				// Made meanwhile (by a sandbox): open what is there, which
				// may be a link and is then refused.
				next, err = openBeneath(cur, name)
			default:
				err = merr
			}
		}
		if err != nil {
			return -1, made, err
		}
		unix.Close(cur)
		cur = next
		done = join(done, name)
	}
	return cur, made, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// removeMade removes the directories of made (relative to vol, parents
// first) that are still empty, children first, each by its name in its
// parent opened beneath vol: a name a sandbox swapped for something else is
// left alone (unlinkat with AT_REMOVEDIR removes only an empty directory,
// never a link's target).
func removeMade(vol string, made []string) {
	if len(made) == 0 {
		return
	}
	root, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(root)
	for _, rel := range slices.Backward(made) {
		dir, name := filepath.Split(rel)
		parent := root
		if dir != "" {
			if parent, err = openBeneath(root, strings.TrimSuffix(dir, "/")); err != nil {
				continue
			}
		}
		_ = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR) // ENOTEMPTY: it holds data now
		if parent != root {
			unix.Close(parent)
		}
	}
}

// bindFD attaches the directory fd refers to at target (an empty
// directory), cloning only that one mount (no submounts).
func bindFD(fd int, target string) error {
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// stagingDir is where the staged mounts of sandboxID live.
func (d *Dir) stagingDir(sandboxID string) string {
	return filepath.Join(d.staging, sandboxID)
}

// stage mounts subpath sub of the volume directory vol (named volume) at
// the staging path of mount idx of sandboxID, and returns the runtime's
// bind source and the directories it made inside the volume.
func (d *Dir) stage(volume, vol, sub, sandboxID string, idx int) (string, []string, error) {
	if err := service.CheckSubpath(sub); err != nil {
		return "", nil, fmt.Errorf("%w: volume %s: %w", service.ErrInvalidArgument, volume, err)
	}
	if !runtime.ValidSandboxID(sandboxID) {
		return "", nil, fmt.Errorf("stage mount: %q is not a sandbox id", sandboxID)
	}
	fd, made, err := openSubpath(vol, sub)
	for try := 1; errors.Is(err, unix.ENOENT) && try < openRetries; try++ {
		fd, made, err = openSubpath(vol, sub) // a name removed under the walk
	}
	if err != nil {
		return "", nil, subpathError(volume, sub, err)
	}
	defer unix.Close(fd)
	target := filepath.Join(d.stagingDir(sandboxID), strconv.Itoa(idx))
	fail := func(err error) (string, []string, error) {
		removeMade(vol, made)
		return "", nil, fmt.Errorf("volume %s: stage subpath %q: %w", volume, sub, err)
	}
	if err := os.MkdirAll(d.stagingDir(sandboxID), 0o700); err != nil {
		return fail(err)
	}
	// A repeated Prepare of this sandbox finds its old mount: replace it.
	if err := unstageOne(target); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		return fail(err)
	}
	if err := bindFD(fd, target); err != nil {
		_ = os.Remove(target)
		if errors.Is(err, unix.ENOENT) {
			// The directory was removed after it was opened.
			removeMade(vol, made)
			return "", nil, subpathError(volume, sub, err)
		}
		return fail(err)
	}
	return target, made, nil
}

// unstageOne detaches every mount at target and removes the directory; a
// target that is gone is fine. A directory that is not a mount and is not
// empty is left (and reported): it is never removed recursively, since
// that could reach into a volume.
func unstageOne(target string) error {
	for range 8 { // a mount stacked by repeated stagings, bounded
		err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not a mount point (any more)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	err := os.Remove(target)
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		// Not a mount, yet written to: a container started on it while
		// its mount was gone (a host reboot, a start behind the daemon's
		// back). What is there is the container's own, never the volume's,
		// unless something is mounted below it, which is checked first.
		if below := mountsBelow(target); len(below) > 0 {
			return fmt.Errorf("remove staging %s: mounts below it: %v", target, below)
		}
		err = os.RemoveAll(target)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove staging %s: %w", target, err)
	}
	return nil
}

// mountsBelow lists the mount points at or under dir in this mount
// namespace.
func mountsBelow(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"(mountinfo unreadable: " + err.Error() + ")"}
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// isMountRoot reports whether p is the root of a mount.
func isMountRoot(p string) bool {
	var st unix.Statx_t
	return unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st) == nil &&
		st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// Restage stages again every subpath mount of sandboxID whose staged mount
// is gone (a host reboot takes them; the container's configuration still
// names the staging path), the same way Prepare stages them: a subpath
// that became a link since is refused. A staged mount that is there is
// kept. Start calls it before the container starts, so a container never
// starts on an empty staging directory.
func (d *Dir) Restage(_ context.Context, owner, sandboxID string, mounts []service.Mount) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, m := range mounts {
		if m.Subpath == "" || isMountRoot(filepath.Join(d.stagingDir(sandboxID), strconv.Itoa(i))) {
			continue
		}
		vol := filepath.Join(d.ownerDir(owner), m.Volume)
		if _, err := stat(vol, m.Volume); err != nil {
			return err
		}
		if _, _, err := d.stage(m.Volume, vol, m.Subpath, sandboxID, i); err != nil {
			return err
		}
	}
	return nil
}

// unstage removes every staged mount of sandboxID. It reads the staging
// directory, not memory, so it also works for a sandbox of a process that
// died. It is idempotent.
func (d *Dir) unstage(sandboxID string) error {
	if !runtime.ValidSandboxID(sandboxID) {
		return nil // nothing of ours can be staged under another name
	}
	dir := d.stagingDir(sandboxID)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unstage %s: %w", sandboxID, err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, unstageOne(filepath.Join(dir, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unstage %s: %w", sandboxID, err)
	}
	return nil
}

// Sweep removes the staged mounts of every sandbox live does not know (a
// daemon killed before a destroy or a failed create's undo). It runs at
// startup, before creates are served, with live answering for every row
// the store has, being destroyed or not.
func (d *Dir) Sweep(live func(sandboxID string) bool) (int, error) {
	entries, err := os.ReadDir(d.staging)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep staged mounts: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if live(e.Name()) {
			continue
		}
		if err := d.unstage(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Staged lists the staged mount points of sandboxID (for tests and
// audits): the directories under its staging directory that are mount
// roots.
func (d *Dir) Staged(sandboxID string) []string {
	entries, _ := os.ReadDir(d.stagingDir(sandboxID))
	var out []string
	for _, e := range entries {
		if p := filepath.Join(d.stagingDir(sandboxID), e.Name()); isMountRoot(p) {
			out = append(out, p)
		}
	}
	return out
}
