package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Block I/O limits. Every sandbox's cgroup gets IOLimit's rates on the
// block devices that hold Options.Dir (the disks of its btrfs file
// system's devices, or the disk of its partition: a partition is not
// throttled): the OCI runtime writes them as
// blkio.throttle.{read,write}_{bps,iops}_device on cgroup v1 and io.max
// on v2. What the sandbox writes lands on those devices, through its
// overlay's upper directory.
//
// What the throttle holds on cgroup v1 (this host: Options.Dir on btrfs
// in a loop file, measured with dd at a 5 MB/s limit): direct I/O and
// reads that reach the disk, at the limit (5.5 and 5.0 MB/s); writes
// that are synced (fsync, O_SYNC, conv=fsync: the writeback runs in the
// writer's context), at the limit (5.3 MB/s). A plain buffered write
// goes to the page cache at memory speed and is written back by the
// kernel's flusher threads, which v1 throttles for no cgroup: its
// writeback is bounded only by the sandbox's memory limit (the dirty
// pages it may hold) and its disk limit (what it may keep). On cgroup v2
// io.max also throttles the writeback of a cgroup's dirty pages.
//
// The device numbers are looked up at New and written at every boot
// (refreshBlockIO): a loop device may get another number after a reboot,
// and a rule naming a device that no longer exists fails the start.

// IOLimit is a sandbox's block I/O limit on the devices of Options.Dir;
// zero fields do not limit.
type IOLimit struct {
	ReadBPS, WriteBPS   uint64 // bytes per second
	ReadIOPS, WriteIOPS uint64 // operations per second
}

func (l IOLimit) zero() bool { return l == IOLimit{} }

type ociBlockIO struct {
	ThrottleReadBpsDevice   []ociThrottle `json:"throttleReadBpsDevice,omitempty"`
	ThrottleWriteBpsDevice  []ociThrottle `json:"throttleWriteBpsDevice,omitempty"`
	ThrottleReadIOPSDevice  []ociThrottle `json:"throttleReadIOPSDevice,omitempty"`
	ThrottleWriteIOPSDevice []ociThrottle `json:"throttleWriteIOPSDevice,omitempty"`
}

type ociThrottle struct {
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
	Rate  uint64 `json:"rate"`
}

// blockDevice is a block device's numbers.
type blockDevice struct{ major, minor int64 }

// blockIO is the OCI configuration of limit on devs; nil when there is
// nothing to limit.
func blockIO(limit IOLimit, devs []blockDevice) *ociBlockIO {
	if limit.zero() || len(devs) == 0 {
		return nil
	}
	rules := func(rate uint64) []ociThrottle {
		if rate == 0 {
			return nil
		}
		out := make([]ociThrottle, len(devs))
		for i, d := range devs {
			out[i] = ociThrottle{Major: d.major, Minor: d.minor, Rate: rate}
		}
		return out
	}
	return &ociBlockIO{
		ThrottleReadBpsDevice: rules(limit.ReadBPS), ThrottleWriteBpsDevice: rules(limit.WriteBPS),
		ThrottleReadIOPSDevice: rules(limit.ReadIOPS), ThrottleWriteIOPSDevice: rules(limit.WriteIOPS),
	}
}

// blockDevices finds the block devices that hold dir's file system: a
// btrfs file system's devices (from sysfs), else the device of dir; each
// a whole disk, the disk of it when it is a partition (the kernel's
// throttle refuses a partition: -ENODEV, and the boot fails). why says
// what was found or why nothing was.
func blockDevices(dir string) (devs []blockDevice, why string) {
	return blockDevicesIn("/sys", dir)
}

// blockDevicesIn is blockDevices with sysfs at sys (tests give a tree of
// their own).
func blockDevicesIn(sys, dir string) (devs []blockDevice, why string) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return nil, err.Error()
	}
	if sfs.Type == btrfsSuperMagic {
		uuid, err := btrfsUUID(dir)
		if err != nil {
			return nil, err.Error()
		}
		if devs, err = btrfsDevices(sys, uuid); err != nil {
			return nil, err.Error()
		}
	} else {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return nil, err.Error()
		}
		path := filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
		if d, ok := sysDevice(wholeDisk(path)); ok {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return nil, fmt.Sprintf("no block device found under %s (not a block device's file system)", dir)
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = fmt.Sprintf("%d:%d", d.major, d.minor)
	}
	return devs, "devices " + strings.Join(names, ", ")
}

// btrfsDevices are the whole disks of the devices of the btrfs file
// system uuid, each once, with sysfs at sys.
func btrfsDevices(sys, uuid string) ([]blockDevice, error) {
	entries, err := os.ReadDir(filepath.Join(sys, "fs", "btrfs", uuid, "devices"))
	if err != nil {
		return nil, fmt.Errorf("the devices of btrfs %s: %w", uuid, err)
	}
	var devs []blockDevice
	for _, e := range entries {
		if d, ok := sysDevice(wholeDisk(filepath.Join(sys, "class", "block", e.Name()))); ok && !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// wholeDisk is the sysfs directory of the disk of the block device whose
// sysfs directory (a link, as under class/block and dev/block) is path:
// path itself unless it is a partition, whose directory is in its
// disk's. The link is resolved first: "path/.." would only drop its last
// element.
func wholeDisk(path string) string {
	if _, err := os.Stat(filepath.Join(path, "partition")); err != nil {
		return path
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return path
	}
	return filepath.Dir(real)
}

// sysDevice reads the numbers of the block device whose sysfs directory
// is dir.
func sysDevice(dir string) (blockDevice, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return blockDevice{}, false
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok {
		return blockDevice{}, false
	}
	ma, err1 := strconv.ParseInt(maj, 10, 64)
	mi, err2 := strconv.ParseInt(min, 10, 64)
	if err1 != nil || err2 != nil {
		return blockDevice{}, false
	}
	return blockDevice{ma, mi}, true
}

// btrfsUUID is the file system id of the btrfs holding dir.
func btrfsUUID(dir string) (string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var info [1024]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocFSInfo, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return "", fmt.Errorf("btrfs file system info of %s: %w", dir, errno)
	}
	id := info[16:32] // after max_id and num_devices
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16]), nil
}

// refreshBlockIO writes the sandbox's I/O limit, on the devices found at
// New, into its config.json (before a boot: the devices may have other
// numbers than when it was created). The rest of the file is kept as it
// is.
func (r *Runtime) refreshBlockIO(id string) error {
	path := filepath.Join(r.sandboxDir(id), "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	var linux map[string]json.RawMessage
	if err := json.Unmarshal(cfg["linux"], &linux); err != nil {
		return fmt.Errorf("config.json: linux: %w", err)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(linux["resources"], &res); err != nil {
		return fmt.Errorf("config.json: linux.resources: %w", err)
	}
	cur, want := res["blockIO"], []byte(nil)
	if bio := blockIO(r.opts.IOLimit, r.ioDevices); bio != nil {
		if want, err = json.Marshal(bio); err != nil {
			return err
		}
	}
	if string(cur) == string(want) {
		return nil
	}
	if want == nil {
		delete(res, "blockIO")
	} else {
		res["blockIO"] = want
	}
	if linux["resources"], err = json.Marshal(res); err != nil {
		return err
	}
	if cfg["linux"], err = json.Marshal(linux); err != nil {
		return err
	}
	return writeJSON(path, cfg)
}

// IOLimits reports the block I/O limit every sandbox gets, whether it
// is applied (a block device holds Dir), and on which devices or why on
// none.
func (r *Runtime) IOLimits() (limit IOLimit, applied bool, how string) {
	if r.opts.IOLimit.zero() {
		return IOLimit{}, false, "no limit asked for"
	}
	return r.opts.IOLimit, len(r.ioDevices) > 0, r.ioHow
}
