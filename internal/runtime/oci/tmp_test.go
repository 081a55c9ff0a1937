package oci_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestGVisor_TmpSurvivesStopStart: a gVisor sandbox's /tmp is its root
// file system's (runsc otherwise mounts a tmpfs of its own there), so
// what it holds survives a stop and a start, as under runc, and is
// written to the sandbox's upper directory, under its disk limit.
func TestGVisor_TmpSurvivesStopStart(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Isolation = runtime.IsolationGVisor
	s.MemoryMB, s.PidsLimit = runtime.MinGVisorMemoryMB, runtime.MinGVisorPidsLimit
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, rt, id, `echo kept > /tmp/kept && grep " /tmp " /proc/mounts | cut -d" " -f3`); strings.Contains(got, "tmpfs") {
		t.Errorf("/tmp is %q, want the root file system's", got)
	}
	if b, err := os.ReadFile(filepath.Join(rt.BundleDir(id), "rw", "upper", "tmp", "kept")); err != nil || string(b) != "kept\n" {
		t.Errorf("the upper directory's tmp/kept: %q, %v; want kept", b, err)
	}
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := execIn(t, rt, id, `cat /tmp/kept 2>&1`); got != "kept\n" {
		t.Errorf("after stop and start, /tmp/kept: %q, want kept", got)
	}
}
