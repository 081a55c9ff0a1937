package runtimetest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// counterScript starts a counter in the background that writes its count
// to /tmp/count ten times a second and its pid to /tmp/count.pid.
const counterScript = `i=0; (while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/count.pid`

// readCount reads the counter's count and pid through the agent.
func readCount(t *testing.T, res string) (count, pid int) {
	t.Helper()
	f := strings.Fields(res)
	if len(f) != 2 {
		t.Fatalf("count and pid: %q", res)
	}
	count, err1 := strconv.Atoi(f[0])
	pid, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("count and pid: %q", res)
	}
	return count, pid
}

// testCheckpointRestore: where the runtime says it checkpoints the
// isolation, a running counter survives Checkpoint and Restore (its count
// goes on from where it was, the same process), the sandbox runs nothing
// while checkpointed, and the image dir appears only complete. Where it
// says no, Checkpoint refuses with ErrCheckpointUnsupported and the
// sandbox runs on.
func (s *suite) testCheckpointRestore(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	s.create(t, rt, spec)
	c := agentClient(t, rt, id, spec.AgentToken)
	ctx := opCtx(t)
	dir := filepath.Join(t.TempDir(), "image")
	sup := runtime.CanCheckpoint(rt, s.cfg.Isolation)
	cp, isCP := rt.(runtime.Checkpointer)
	if !sup.OK {
		if sup.How == "" {
			t.Errorf("CanCheckpoint says no without a reason")
		}
		if isCP {
			if err := cp.Checkpoint(ctx, id, dir); !errors.Is(err, runtime.ErrCheckpointUnsupported) {
				t.Errorf("Checkpoint where CanCheckpoint says no = %v, want ErrCheckpointUnsupported", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused checkpoint left %s (stat: %v)", dir, err)
			}
		}
		wantState(t, rt, id, runtime.StateRunning)
		wantHealthy(t, rt, id)
		t.Skipf("the runtime does not checkpoint this isolation: %s", sup.How)
	}
	if res := sh(t, c, counterScript); res.ExitCode != 0 {
		t.Fatalf("start the counter: exit %d, %q", res.ExitCode, res.Stderr)
	}
	const read = `cat /tmp/count /tmp/count.pid | tr '\n' ' '`
	var before, pid int
	for deadline := time.Now().Add(opTimeout); before < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the counter does not count")
		}
		before, pid = readCount(t, string(sh(t, c, read).Stdout))
	}
	if err := cp.Checkpoint(ctx, id, dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if st := wantState(t, rt, id, runtime.StateExited); st.Paused {
		t.Errorf("a checkpointed sandbox reports Paused")
	}
	if err := cp.Checkpoint(ctx, id, dir+"2"); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("Checkpoint of a checkpointed sandbox = %v, want ErrNotRunning", err)
	}
	if err := cp.Restore(ctx, id, dir+"-missing"); !errors.Is(err, runtime.ErrNoCheckpoint) {
		t.Errorf("Restore from a directory without an image = %v, want ErrNoCheckpoint", err)
	}
	if err := cp.Restore(ctx, id, dir); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	wantState(t, rt, id, runtime.StateRunning)
	wantHealthy(t, rt, id)
	// The count goes on from where it was, in the same process.
	after, pidAfter := readCount(t, string(sh(t, c, read).Stdout))
	if pidAfter != pid || after < before {
		t.Fatalf("after Restore: count %d pid %d; want >= %d in pid %d", after, pidAfter, before, pid)
	}
	for deadline := time.Now().Add(opTimeout); after <= before+1; {
		if time.Now().After(deadline) {
			t.Fatalf("the counter stopped counting after Restore at %d", after)
		}
		after, _ = readCount(t, string(sh(t, c, read).Stdout))
	}
	if res := sh(t, c, "kill -0 $(cat /tmp/count.pid) && echo alive"); string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process after Restore: %q %q", res.Stdout, res.Stderr)
	}
	if err := cp.Restore(ctx, id, dir); err != nil {
		t.Errorf("Restore of a running sandbox = %v, want nil", err)
	}
}
