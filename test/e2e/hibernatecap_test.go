package e2e_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestHibernate_StorageCapCountsImagesAcrossRestart: a daemon whose
// --hibernate-storage-max is such that one owner's share of it (half) is
// just above one sandbox's memory limit hibernates a first sandbox
// holding 24 MB of memory; killed with SIGKILL and started again, it
// counts that image from the disk, as its owner's, so a second hibernate
// of that owner's, which would pass the share, stops its sandbox and
// says why; once the first resumed, a hibernate fits again.
func TestHibernate_StorageCapCountsImagesAcrossRestart(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "hibcap", "--engine", "oci", "--hibernate-storage-max", "536") // half: 256 MB of memory + 12
	c := newClient(d, true)
	a := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
	b := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
	if res, err := c.Exec(ctx, a.ID, sandboxd.ExecRequest{Command: "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=24 2>/dev/null && echo ok"}); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("fill /dev/shm: %+v, %v", res, err)
	}
	if h, err := c.HibernateSandbox(ctx, a.ID); err != nil || h.Stopped {
		t.Fatalf("first hibernate = %+v, %v; want hibernated", h, err)
	}

	if err := d.Restart(ctx); err != nil { // SIGKILL, then start again
		t.Fatalf("restart: %v", err)
	}
	h, err := c.HibernateSandbox(ctx, b.ID)
	if err != nil || !h.Stopped || !strings.Contains(h.StoppedReason, "--hibernate-storage-max") {
		t.Fatalf("second hibernate after the restart = stopped %v (%q), %v; want stopped for the cap", h.Stopped, h.StoppedReason, err)
	}

	if _, err := c.ResumeSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if h, err := c.HibernateSandbox(ctx, b.ID); err != nil || h.Stopped {
		t.Fatalf("hibernate after the first resumed = %+v, %v; want hibernated", h, err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := c.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
