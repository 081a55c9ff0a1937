package adversarial_test

import (
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Issue 27, item 3: one 512 MB sandbox ran `fallocate -l 20G` and took
// 20 GB of the host. Every sandbox now has a disk limit the kernel
// enforces: the write that goes over gets ENOSPC or EDQUOT, and the host
// and the other sandboxes see nothing.

// engineDisk reports the engine's storage driver and the free bytes of
// the file system under its data root.
func engineDisk(t *testing.T) (driver string, free uint64) {
	t.Helper()
	out, err := exec.Command("docker", "info", "--format", "{{.Driver}} {{.DockerRootDir}}").Output()
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	driver, root, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		t.Fatalf("statfs %s: %v", root, err)
	}
	return driver, st.Bavail * uint64(st.Bsize)
}

// needsEnforcement skips on an engine whose storage driver cannot limit a
// container's size (the daemon answers disk_enforced false there and says
// so at start), and fails where it can but the sandbox was not limited.
func needsEnforcement(t *testing.T, sb *sandboxd.Sandbox, driver string) {
	t.Helper()
	if sb.DiskEnforced {
		return
	}
	if driver == "btrfs" {
		t.Fatalf("sandbox %s on a btrfs engine: disk_mb %d, disk_enforced false", sb.ID, sb.DiskMB)
	}
	t.Skipf("the engine's storage driver %q enforces no disk limit (scripts/setup-docker.sh gives it a btrfs data root)", driver)
}

const mib = 1 << 20

func TestDisk_SandboxCannotFillTheHostsDisk(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "disk-fill")
	attacker := tenant(t, d, "filler")
	sb := sandbox(t, attacker, sandboxd.CreateRequest{DiskMB: 64, MemoryMB: 512})
	driver, freeBefore := engineDisk(t)
	if sb.DiskMB != 64 {
		t.Errorf("create answered disk_mb %d, want 64", sb.DiskMB)
	}
	needsEnforcement(t, sb, driver)
	if got, err := attacker.GetSandbox(t.Context(), sb.ID); err != nil || got.DiskMB != 64 || !got.DiskEnforced {
		t.Errorf("read back: %+v, %v; want disk_mb 64, disk_enforced", got, err)
	}

	nc := tenant(t, d, "neighbour")
	neighbour := sandbox(t, nc, sandboxd.CreateRequest{})

	// The attack: a 4 GiB preallocation, then writing until it stops.
	// With full btrfs qgroups the engine's removal of another container
	// stops the kernel's counting until the removing daemon's rescan
	// (internal/runtime/docker qgroup.go): an attempt that overlaps such a
	// window leaks, and is made again, at most twice; without the limit
	// every attempt leaks. Simple quotas (make setup's) have no window.
	var res sandboxd.ExecResult
	var out string
	for attempt := range 3 {
		res = *sh(t, attacker, sb.ID, `rm -f /big /fill; sync; fallocate -l 4G /big; echo "fallocate=$?"; dd if=/dev/zero of=/fill bs=1M count=1024 2>&1; echo "dd=$?"; sync; wc -c < /fill; ls /big 2>/dev/null | wc -l`)
		out = res.Stdout + res.Stderr
		t.Logf("the attack in a 64 MiB sandbox, attempt %d:\n%s", attempt+1, out)
		if strings.Contains(out, "fallocate=1") && !strings.Contains(out, "dd=0") {
			break
		}
	}
	if !strings.Contains(out, "fallocate=1") || strings.Contains(out, "dd=0") {
		t.Errorf("the writes past the limit succeeded:\n%s", out)
	}
	if !strings.Contains(out, "quota exceeded") && !strings.Contains(out, "No space left") {
		t.Errorf("the writes did not fail with EDQUOT or ENOSPC:\n%s", out)
	}
	lines := strings.Fields(res.Stdout)
	if len(lines) >= 2 {
		if n, err := strconv.ParseInt(lines[len(lines)-2], 10, 64); err != nil || n > 96*mib {
			t.Errorf("the sandbox wrote %q bytes past a 64 MiB limit:\n%s", lines[len(lines)-2], out)
		}
	}
	_, freeAfter := engineDisk(t)
	// Others share this file system (other tests' sandboxes and images
	// come and go), hence the margin; what matters is that the 5 GiB
	// never landed: a limited sandbox costs the host ~64 MiB.
	if freeBefore > freeAfter && freeBefore-freeAfter > 2048*mib {
		t.Errorf("the host's free space fell by %d MiB during the attack", (freeBefore-freeAfter)/mib)
	}

	// The attacker's sandbox still answers; its neighbour still writes.
	if r := sh(t, attacker, sb.ID, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("the full sandbox no longer answers: %+v", r)
	}
	if r := sh(t, nc, neighbour.ID, "dd if=/dev/zero of=/data bs=1M count=32 2>/dev/null && sync && wc -c < /data"); r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(32*mib) {
		t.Errorf("the neighbour could not write 32 MiB: %+v", r)
	}
}

// An upload larger than the sandbox's disk limit fails with the API's
// disk_full (507), leaves the sandbox working, and takes nothing from the
// host beyond the limit.
func TestDisk_UploadPastTheLimitIsDiskFull(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "disk-upload")
	c := tenant(t, d, "uploader")
	sb := sandbox(t, c, sandboxd.CreateRequest{DiskMB: 32})
	driver, _ := engineDisk(t)
	needsEnforcement(t, sb, driver)

	err := c.UploadFile(t.Context(), sb.ID, "/tmp/big.bin", io.LimitReader(zeros{}, 128*mib))
	var apiErr *sandboxd.APIError
	if !errors.Is(err, sandboxd.ErrDiskFull) || !errors.As(err, &apiErr) || apiErr.Status != 507 {
		t.Fatalf("upload of 128 MiB into a 32 MiB sandbox: %v, want 507 disk_full", err)
	}
	if r := sh(t, c, sb.ID, "rm -f /tmp/big.bin; echo small > /tmp/ok && cat /tmp/ok"); r.Stdout != "small\n" {
		t.Errorf("after the refused upload the sandbox cannot write: %+v", r)
	}
	if err := c.UploadFile(t.Context(), sb.ID, "/tmp/fits.bin", io.LimitReader(zeros{}, 4*mib)); err != nil {
		t.Errorf("an upload within the limit: %v", err)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A token's disk quota bounds the sum of its owner's disk limits: the
// create that would pass it is refused with the quota error (429), and
// one within it, or another owner's, is not.
func TestDisk_OwnerDiskQuotaRefusesACreate(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "disk-quota")
	tok, err := adminClient(d).CreateToken(t.Context(), sandboxd.CreateTokenRequest{
		Name: "hoarder", Role: sandboxd.RoleUser, Owner: "hoarder", Quota: &sandboxd.Quota{DiskMB: 100},
	})
	if err != nil {
		t.Fatalf("create a token with a disk quota: %v", err)
	}
	c := sandboxd.New(d.URL(), tok.Secret)
	first := sandbox(t, c, sandboxd.CreateRequest{DiskMB: 64})
	_, err = c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Image: busyboxImage, DiskMB: 64})
	var apiErr *sandboxd.APIError
	if !errors.Is(err, sandboxd.ErrCapacityExhausted) || !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "disk") {
		t.Fatalf("a create past the disk quota: %v, want 429 capacity_exhausted naming the disk", err)
	}
	// A stopped sandbox keeps its files, so its disk still counts: stop
	// and create again is no way past the quota.
	if _, err := c.StopSandbox(t.Context(), first.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	_, err = c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Image: busyboxImage, DiskMB: 64})
	if !errors.Is(err, sandboxd.ErrCapacityExhausted) || !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "disk") {
		t.Fatalf("a create past the disk quota beside a stopped sandbox: %v, want 429 capacity_exhausted naming the disk", err)
	}
	if _, err := c.StartSandbox(t.Context(), first.ID); err != nil {
		t.Fatalf("start the stopped sandbox again within its own disk: %v", err)
	}
	// The default (10 GiB) is past the quota too: a create that asks for
	// nothing is still counted.
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Image: busyboxImage}); err == nil {
		t.Error("a create with the default disk limit passed a 100 MiB quota")
	}
	sandbox(t, c, sandboxd.CreateRequest{DiskMB: 32})
	sandbox(t, tenant(t, d, "other"), sandboxd.CreateRequest{DiskMB: 64})

	// Nonsense is a typed 400, and creates nothing.
	for _, mb := range []int{-1, 1, 1 << 30} {
		_, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Image: busyboxImage, DiskMB: mb})
		if !errors.Is(err, sandboxd.ErrInvalidArgument) {
			t.Errorf("disk_mb %d: %v, want 400 invalid_argument", mb, err)
		}
	}
	if list, err := c.ListSandboxes(t.Context(), sandboxd.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Errorf("the owner holds %v (%v), want its 2 sandboxes", list, err)
	}
}
