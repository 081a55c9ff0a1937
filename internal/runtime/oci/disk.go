package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Disk limits. Where the runtime's directory is on btrfs with quotas on
// (scripts/setup-oci.sh makes one), each sandbox's directory, which holds
// its overlay's upper and work directories and every other file the
// sandbox can make grow (its output, its /etc/hosts), is a subvolume of
// its own, and Spec.DiskMB is that subvolume's qgroup limit: a write past
// it fails with EDQUOT. The image (the overlay's lower directory) is
// outside it and not counted. Elsewhere the sandbox's directory is a
// plain directory and DiskLimits says no limit is enforced.

// btrfs ioctl commands and constants (linux/btrfs.h).
const (
	btrfsSuperMagic      = 0x9123683E
	btrfsIocSubvolCreate = 0x5000940E // _IOW(0x94, 14, struct btrfs_ioctl_vol_args), 4096 bytes
	btrfsIocSnapDestroy  = 0x5000940F // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	btrfsIocQgroupLimit  = 0x8030942B // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args), 48 bytes
	btrfsIocFSInfo       = 0x8400941F // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args), 1024 bytes
	btrfsIocInoLookup    = 0xD0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args), 4096 bytes
	btrfsQgroupMaxRfer   = 1 << 0
	btrfsQgroupMaxExcl   = 1 << 1
	btrfsVolNameMax      = 4087
)

// diskMode is how the runtime's directory holds sandboxes.
type diskMode struct {
	subvolumes bool // btrfs: each sandbox directory is a subvolume
	enforced   bool // and quotas are on: Spec.DiskMB is its qgroup limit
	how        string
	qgroups    string // the file system's sysfs qgroups directory, with quotas on
}

// probeDisk looks at the file system of dir.
func probeDisk(dir string) diskMode {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return diskMode{how: fmt.Sprintf("statfs %s: %v", dir, err)}
	}
	if st.Type != btrfsSuperMagic {
		return diskMode{how: fmt.Sprintf("%s is not on btrfs (scripts/setup-oci.sh makes one; pass it as --oci-dir)", dir)}
	}
	uuid, err := btrfsUUID(dir)
	if err != nil {
		return diskMode{subvolumes: true, how: err.Error()}
	}
	qdir := "/sys/fs/btrfs/" + uuid + "/qgroups/"
	if _, err := os.Stat(qdir); err != nil {
		return diskMode{subvolumes: true, how: fmt.Sprintf("btrfs quotas are off on %s (scripts/setup-oci.sh turns them on)", dir)}
	}
	mode, _ := os.ReadFile(qdir + "mode")
	kind := strings.TrimSpace(string(mode))
	if kind == "" {
		kind = "qgroup"
	}
	return diskMode{subvolumes: true, enforced: true, how: "btrfs qgroup of the sandbox's subvolume (" + kind + ")", qgroups: qdir}
}

// DiskLimits implements runtime.DiskLimiter. The answer is the file
// system's, found by New: it needs no engine.
func (r *Runtime) DiskLimits(context.Context) (runtime.DiskLimits, error) {
	return runtime.DiskLimits{Enforced: r.disk.enforced, How: r.disk.how}, nil
}

// volArgs is struct btrfs_ioctl_vol_args.
type volArgs struct {
	fd   int64
	name [btrfsVolNameMax + 1]byte
}

// makeSandboxDir makes the directory path (0700) and in it rwName,
// what the sandbox can make grow: a subvolume on btrfs, with limitMB as
// its qgroup limit (0: none), else a directory. The daemon's own files
// stay beside it, outside the limit: a sandbox that filled its disk can
// still be stopped, started and destroyed.
func (r *Runtime) makeSandboxDir(dir string, limitMB int64) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, rwName)
	if !r.disk.subvolumes {
		return os.Mkdir(path, 0o700)
	}
	if err := subvolIoctl(btrfsIocSubvolCreate, path); err != nil {
		return fmt.Errorf("create subvolume %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return err
	}
	if limitMB > 0 && r.disk.enforced {
		if err := qgroupLimit(path, uint64(limitMB)<<20); err != nil {
			return fmt.Errorf("disk limit of %s: %w", path, err)
		}
	}
	return nil
}

// rwName is the part of a sandbox's directory that its disk limit counts.
const rwName = "rw"

// removeSandboxDir removes a sandbox's directory: its subvolume, then the
// rest (nothing may be mounted there any more). Gone already is success.
func (r *Runtime) removeSandboxDir(dir string) error {
	if err := r.removeSubvolume(filepath.Join(dir, rwName)); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeSubvolume removes path, a subvolume or a directory.
func (r *Runtime) removeSubvolume(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	// A subvolume's root directory has inode 256.
	if r.disk.subvolumes && st.Ino == 256 {
		err := subvolIoctl(btrfsIocSnapDestroy, path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("delete subvolume %s: %w", path, err)
	}
	return os.RemoveAll(path)
}

// subvolIoctl runs a btrfs_ioctl_vol_args ioctl on path's parent with
// path's name.
func subvolIoctl(cmd uintptr, path string) error {
	dir, name := filepath.Split(filepath.Clean(path))
	if len(name) > btrfsVolNameMax {
		return unix.ENAMETOOLONG
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var args volArgs
	copy(args.name[:], name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return errno
	}
	return nil
}

// qgroupLimit sets the referenced and exclusive limits of the qgroup of
// the subvolume at path to bytes.
func qgroupLimit(path string, bytes uint64) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// struct btrfs_ioctl_qgroup_limit_args: qgroupid (0: the subvolume
	// of fd), then struct btrfs_qgroup_limit.
	args := [6]uint64{0, btrfsQgroupMaxRfer | btrfsQgroupMaxExcl, bytes, bytes, 0, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocQgroupLimit, uintptr(unsafe.Pointer(&args[0]))); errno != 0 {
		return errno
	}
	return nil
}

// subvolumeUsed is what the subvolume at path holds by its qgroup's
// count (sysfs), in bytes; false without quotas.
func (r *Runtime) subvolumeUsed(path string) (uint64, bool) {
	if r.disk.qgroups == "" {
		return 0, false
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	// struct btrfs_ioctl_ino_lookup_args: treeid 0 and the subvolume's
	// root directory (256) ask for the subvolume's id.
	var args [512]uint64
	args[1] = 256
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocInoLookup, uintptr(unsafe.Pointer(&args[0]))); errno != 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("%s0_%d/referenced", r.disk.qgroups, args[0]))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
