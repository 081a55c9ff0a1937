package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeSysfs makes a sysfs tree: disk sda (8:0) with partitions sda2 and
// sda3, a loop device loop0 (7:0), their links under class/block and
// dev/block, and a btrfs file system on sda2, sda3 and loop0.
func fakeSysfs(t *testing.T) (sys, uuid string) {
	t.Helper()
	sys, uuid = t.TempDir(), "0c1d2e3f-0000-4000-8000-00000000abcd"
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	disk := "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda"
	write(filepath.Join(sys, disk, "dev"), "8:0\n")
	for _, p := range []struct{ name, dev, n string }{{"sda2", "8:2", "2"}, {"sda3", "8:3", "3"}} {
		write(filepath.Join(sys, disk, p.name, "dev"), p.dev+"\n")
		write(filepath.Join(sys, disk, p.name, "partition"), p.n+"\n")
		link("../../"+disk+"/"+p.name, filepath.Join(sys, "class/block", p.name))
		link("../../"+disk+"/"+p.name, filepath.Join(sys, "dev/block", p.dev))
		link("../../../../class/block/"+p.name, filepath.Join(sys, "fs/btrfs", uuid, "devices", p.name))
	}
	link("../../"+disk, filepath.Join(sys, "class/block/sda"))
	write(filepath.Join(sys, "devices/virtual/block/loop0/dev"), "7:0\n")
	link("../../devices/virtual/block/loop0", filepath.Join(sys, "class/block/loop0"))
	link("../../../../class/block/loop0", filepath.Join(sys, "fs/btrfs", uuid, "devices", "loop0"))
	return sys, uuid
}

// TestBlockDevices_PartitionsAreTheirDisks: a btrfs file system on
// partitions is throttled on their disk (once), never on a partition,
// which the kernel's throttle refuses; a device that is not a partition
// is itself. So is the partition a non-btrfs file system is on.
func TestBlockDevices_PartitionsAreTheirDisks(t *testing.T) {
	sys, uuid := fakeSysfs(t)
	devs, err := btrfsDevices(sys, uuid)
	if err != nil {
		t.Fatal(err)
	}
	if want := []blockDevice{{7, 0}, {8, 0}}; !slices.Equal(devs, want) {
		t.Errorf("btrfsDevices = %v, want %v (loop0, and sda for sda2 and sda3)", devs, want)
	}
	if d, ok := sysDevice(wholeDisk(filepath.Join(sys, "dev/block/8:2"))); !ok || d != (blockDevice{8, 0}) {
		t.Errorf("the disk of dev/block/8:2 = %v, %v; want 8:0", d, ok)
	}
	if d, ok := sysDevice(wholeDisk(filepath.Join(sys, "class/block/loop0"))); !ok || d != (blockDevice{7, 0}) {
		t.Errorf("the disk of loop0 = %v, %v; want 7:0", d, ok)
	}
	if _, err := btrfsDevices(sys, "no-such-uuid"); err == nil {
		t.Error("btrfsDevices of an unknown file system: no error")
	}
}
