package docker

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Qgroup repair. On a btrfs engine a sandbox's disk limit is its container
// subvolume's qgroup limit. With simple quotas (kernel 6.7+, what
// scripts/setup-docker.sh enables) an extent counts toward the subvolume
// that wrote it and counting never stops: there is nothing to repair. With
// full qgroups the kernel only enforces a limit while its qgroup numbers
// are consistent. The engine's btrfs driver removes a
// container (or an image layer) by deleting its subvolume and then, at
// once, its qgroup; the kernel drops the subvolume's extents later, so the
// qgroup still has numbers when it goes, and the kernel (6.x) then marks
// every qgroup of the file system inconsistent and stops counting: until a
// rescan, no sandbox's writes are counted and none is held to its limit.
//
// So the runtime rescans after each removal it makes (and before a create
// with a limit, in case another daemon of the engine removed something):
// a sysfs read when the numbers are consistent, a rescan (~0.3 s with a few
// dozen containers) when not. What remains is the window between the
// engine's removal and the rescan's end, during which writes already under
// way are not counted; it is stated in the README's security model.

// btrfs ioctl commands (linux/btrfs.h).
const (
	btrfsIocFSInfo          = 0x8400941F // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args), 1024 bytes
	btrfsIocQuotaRescan     = 0x4040942C // _IOW(0x94, 44, struct btrfs_ioctl_quota_rescan_args), 64 bytes
	btrfsIocQuotaRescanWait = 0x0000942E // _IO(0x94, 46)
)

// qgroups repairs the qgroups of the btrfs file system that holds the
// engine's data root. The zero value (or nil) repairs nothing.
type qgroups struct {
	root string // the engine's data root, on the btrfs file system
	flag string // its qgroups' sysfs "inconsistent" file
	// simple: the file system counts with simple quotas; a limit then
	// counts what the container wrote, never its image's extents, and
	// there is nothing to repair.
	simple bool
	mu     sync.Mutex
}

// newQgroups finds the sysfs flag of root's btrfs file system. It fails
// where root is not on this host (a remote engine) or not on btrfs.
func newQgroups(root string) (*qgroups, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the engine's data root %s: %w", root, err)
	}
	defer unix.Close(fd)
	var info [1024]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocFSInfo, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return nil, fmt.Errorf("btrfs file system info of %s: %w", root, errno)
	}
	id := info[16:32] // after max_id and num_devices
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
	dir := "/sys/fs/btrfs/" + uuid + "/qgroups/"
	if _, err := os.Stat(dir + "inconsistent"); err != nil {
		return nil, fmt.Errorf("qgroups of %s: %w", root, err)
	}
	// Kernels before 6.7 have no mode file: full qgroups.
	mode, _ := os.ReadFile(dir + "mode")
	return &qgroups{root: root, flag: dir + "inconsistent", simple: strings.TrimSpace(string(mode)) == "squota"}, nil
}

// inconsistent reports whether the kernel has stopped counting.
func (q *qgroups) inconsistent() bool {
	b, err := os.ReadFile(q.flag)
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// repair rescans the qgroups and waits for the rescan when the kernel
// marked them inconsistent; one rescan at a time in this process (a
// rescan another process started is waited for). Without a file system to
// repair it does nothing.
func (q *qgroups) repair() error {
	if q == nil || q.simple || !q.inconsistent() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.inconsistent() {
		return nil
	}
	fd, err := unix.Open(q.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rescan qgroups: %w", err)
	}
	defer unix.Close(fd)
	var args [64]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocQuotaRescan, uintptr(unsafe.Pointer(&args[0]))); errno != 0 && errno != unix.EINPROGRESS {
		return fmt.Errorf("rescan qgroups of %s: %w", q.root, errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocQuotaRescanWait, 0); errno != 0 {
		return fmt.Errorf("wait for the qgroup rescan of %s: %w", q.root, errno)
	}
	return nil
}
