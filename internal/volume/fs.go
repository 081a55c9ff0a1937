package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A volume's disk limit. Volumes are bind-mounted host directories, so the
// engine's per-container limit does not hold them; and the host's data
// directory is on whatever file system the operator has (ext4 here, with
// no project quotas). So where the daemon may (root, loop devices, ext4
// tools) each volume is a file system of its own: a sparse file
// <owner dir>/<name>.ext4 of the volume's size, formatted ext4 and
// loop-mounted (nodev, nosuid) on <owner dir>/<name>. A write past the size
// gets ENOSPC in every sandbox that mounts the volume, and the host loses
// at most the size: the file holds only what was written (an empty 10 GiB
// volume takes ~4 MiB). Making one costs a mkfs and a mount (~20 ms).
//
// The mount stays when the daemon stops (sandboxes that mount the volume
// keep running); New mounts again the volumes whose mount a reboot took.
// RemoveVolume unmounts before it removes the file.

// fsSuffix names a volume's file system image beside its mount point; a
// volume name is a DNS label, so no volume is named like an image.
const fsSuffix = ".ext4"

// fsToolTimeout bounds mkfs and mount.
const fsToolTimeout = 30 * time.Second

// makeFS makes the file system of the new volume host, of sizeMB, and
// mounts it on host (which must not exist). The image is made under a
// temporary name and renamed into place once formatted, so that a crash
// leaves either a whole image (mounted again at start) or a temporary one
// (removed at start). On failure nothing of it is left.
func makeFS(host string, sizeMB int64) (err error) {
	img := host + fsSuffix
	tmp := filepath.Join(filepath.Dir(host), "."+filepath.Base(host)+fsSuffix+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("volume file system: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
			if rerr := removeFS(host); rerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w", rerr))
			}
		}
	}()
	err = f.Truncate(sizeMB << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("volume file system: %w", err)
	}
	// No reserved blocks (the sandboxes are the only users), no discard
	// of a sparse file's blocks, inode tables and journal left to be
	// initialised lazily (mountFS turns the background zeroing off: the
	// file reads zeros where nothing was written).
	if err := runTool("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("volume file system: %w", err)
	}
	if err := os.Mkdir(host, 0o700); err != nil {
		return fmt.Errorf("volume file system: %w", err)
	}
	if err := mountFS(img, host); err != nil {
		return err
	}
	// Every account of the owner's sandboxes may write (Daytona's run as
	// an unprivileged user); only the daemon reaches it on the host, the
	// volume root is 0700. A volume starts empty: no lost+found.
	if err := errors.Join(os.Chmod(host, 0o777), os.Remove(filepath.Join(host, "lost+found"))); err != nil {
		return fmt.Errorf("volume file system: %w", err)
	}
	return nil
}

// mountFS loop-mounts the volume image img on mnt. The loop device goes
// with the mount (util-linux sets it to clear itself).
func mountFS(img, mnt string) error {
	return runTool("mount", "-t", "ext4", "-o", "loop,nodev,nosuid,noatime,noinit_itable", img, mnt)
}

// unmountFS unmounts a volume's file system from mnt; not mounted is
// success.
func unmountFS(mnt string) error {
	err := unix.Unmount(mnt, unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount volume %s: %w", mnt, err)
}

// removeFS unmounts the file system of the volume host and removes its
// image, then its mount point; a volume without one (a plain directory)
// is removed with everything in it. A crash between the two leaves an
// empty directory, which New removes.
func removeFS(host string) error {
	img := host + fsSuffix
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		return os.RemoveAll(host)
	}
	if err := unmountFS(host); err != nil {
		return err
	}
	if isMountRoot(host) {
		return fmt.Errorf("volume %s is still mounted", host)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(host) // the mount point, empty once unmounted
}

// fsSizeMB is the size of a volume's file system image in MiB; 0 when the
// volume has none (no limit).
func fsSizeMB(img string) int64 {
	fi, err := os.Lstat(img)
	if err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	return fi.Size() >> 20
}

// runTool runs a file system tool, its output in the error.
func runTool(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), fsToolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// probeFS reports why this process cannot give volumes file systems of
// their own, or nil when it can: it makes, mounts and removes a 16 MiB
// one under root (and any a crashed probe left).
func probeFS(root string) error {
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return err
		}
	}
	left, _ := filepath.Glob(filepath.Join(root, "*.probe-*"))
	for _, p := range left {
		if strings.HasSuffix(p, ".tmp") {
			_ = os.Remove(p)
		} else {
			_ = removeFS(strings.TrimSuffix(p, fsSuffix))
		}
	}
	host := filepath.Join(root, ".probe-"+strconv.Itoa(os.Getpid()))
	if err := makeFS(host, 16); err != nil {
		return err
	}
	return removeFS(host)
}
