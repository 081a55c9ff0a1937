package oci_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestIOLimit_TwoSandboxesWritingAreBothBounded: two sandboxes writing
// at once (direct I/O, and buffered writes synced at the end: what the
// cgroup v1 throttle holds, io.go) each take at least what their limit
// allows, where unlimited they take a fraction of a second; a stopped
// sandbox keeps its limit when it starts again.
func TestIOLimit_TwoSandboxesWritingAreBothBounded(t *testing.T) {
	requireEnv(t)
	const mib = 1 << 20
	limit := oci.IOLimit{WriteBPS: 4 * mib, ReadBPS: 4 * mib}
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.IOLimit = limit })
	if _, applied, how := rt.IOLimits(); !applied {
		t.Fatalf("the I/O limit applies to no device: %s", how)
	}
	ctx := t.Context()
	ids := []string{runtimetest.NewSandboxID(), runtimetest.NewSandboxID()}
	for _, id := range ids {
		if _, err := rt.Create(ctx, spec(id)); err != nil {
			t.Fatal(err)
		}
	}
	// 16 MiB at 4 MiB/s: 4 s; the throttle lets a first slice through
	// at once, so at least 2.5 s.
	const want = 2500 * time.Millisecond
	for _, how := range []string{"oflag=direct", "conv=fsync"} {
		var wg sync.WaitGroup
		took := make([]time.Duration, len(ids))
		for i, id := range ids {
			wg.Go(func() {
				start := time.Now()
				out := execIn(t, rt, id, fmt.Sprintf("dd if=/dev/zero of=/tmp/f bs=1M count=16 %s 2>&1 && rm /tmp/f && echo done", how))
				took[i] = time.Since(start)
				if !strings.HasSuffix(out, "done\n") {
					t.Errorf("dd %s in %s: %q", how, id, out)
				}
			})
		}
		wg.Wait()
		for i, d := range took {
			if d < want {
				t.Errorf("dd %s of 16 MiB in sandbox %d (with the other writing too) took %v, want at least %v at 4 MiB/s", how, i, d, want)
			}
		}
	}
	// After a stop and a reboot that gave the device another number
	// (played: config.json's rules name a device that is not there),
	// Start writes the rules for the devices there are.
	if err := rt.Stop(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(rt.BundleDir(ids[0]), "config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	stale := regexp.MustCompile(`"minor":\d+,"rate"`).ReplaceAll(b, []byte(`"minor":254,"rate"`))
	if bytes.Equal(stale, b) {
		t.Fatalf("no throttle rule in config.json: %s", b)
	}
	if err := os.WriteFile(cfgPath, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	execIn(t, rt, ids[0], "dd if=/dev/zero of=/tmp/f bs=1M count=16 oflag=direct 2>&1; rm /tmp/f")
	if d := time.Since(start); d < want {
		t.Errorf("after a restart, dd of 16 MiB took %v, want at least %v", d, want)
	}
}

// TestIOLimit_GVisorStarts: a gVisor sandbox starts under the limit.
func TestIOLimit_GVisorStarts(t *testing.T) {
	requireEnv(t)
	requireRunsc(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.IOLimit = oci.IOLimit{WriteBPS: 4 << 20} })
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Isolation = runtime.IsolationGVisor
	s.MemoryMB, s.PidsLimit = runtime.MinGVisorMemoryMB, runtime.MinGVisorPidsLimit
	if _, err := rt.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, rt, id, "echo ok"); got != "ok\n" {
		t.Errorf("exec: %q", got)
	}
}

func requireRunsc(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
}
