package e2e_test

import (
	"sync"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestOCIEngine_IOLimit: under --sandbox-io-mbps 4, two sandboxes
// writing 16 MiB at once with direct I/O each take at least what 4 MiB/s
// allows (unlimited: a fraction of a second on this disk).
func TestOCIEngine_IOLimit(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "ocio", "--engine", "oci", "--pool", "none", "--sandbox-io-mbps", "4")
	c := newClient(d, true)
	sbs := []*sandboxd.Sandbox{
		createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage}),
		createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage}),
	}
	const want = 2500 * time.Millisecond // 4 s at 4 MiB/s, less the throttle's first slice
	took := make([]time.Duration, len(sbs))
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Go(func() {
			start := time.Now()
			res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "dd if=/dev/zero of=/tmp/f bs=1M count=16 oflag=direct && rm /tmp/f"})
			took[i] = time.Since(start)
			if err != nil || res.ExitCode != 0 {
				t.Errorf("dd in %s: %+v, %v", sb.ID, res, err)
			}
		})
	}
	wg.Wait()
	for i, d := range took {
		if d < want {
			t.Errorf("sandbox %d wrote 16 MiB (direct, the other writing too) in %v, want at least %v", i, d, want)
		}
	}
}
