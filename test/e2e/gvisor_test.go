package e2e_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestGVisor_LifecycleSurvivesDaemonSIGKILL: a gVisor sandbox (runtime
// "gvisor": runsc, through the engine or, under --engine oci, directly)
// runs its commands in gVisor's kernel; pause and resume keep its
// processes; a daemon killed with SIGKILL leaves it running, and the
// restarted daemon serves it (exec, stop, start) and destroys it, leaving
// nothing of it on the host (daemontest's Leftovers: under --engine oci
// every trace of the runtime, cgroups and OCI state included).
func TestGVisor_LifecycleSurvivesDaemonSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "gvisor")
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", CPU: 0.25, MemoryMB: 256})
	if errors.Is(err, sandboxd.ErrInvalidArgument) && strings.Contains(err.Error(), "not available") {
		t.Skipf("SKIP: no gVisor on this daemon (scripts/setup-gvisor.sh): %v", err)
	}
	if err != nil {
		t.Fatalf("create a gVisor sandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)

	run := func(when, cmd, want string) {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: cmd})
		if err != nil || res.Stdout != want {
			t.Fatalf("%s: exec %q = %+v, %v; want %q", when, cmd, res, err, want)
		}
	}
	// gVisor's kernel says so in its log (a runc-class sandbox shows the
	// host's, or nothing without CAP_SYSLOG). The marks are not in /tmp:
	// gVisor mounts a tmpfs of its own there, gone with a stop.
	run("after the create", "dmesg | grep -c -i gvisor >/dev/null && echo gvisor; echo before > /mark", "gvisor\n")
	run("after the create", "sleep 600 >/dev/null 2>&1 & echo $! > /sleeper; cat /mark", "before\n")

	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	run("after pause and resume", "kill -0 $(cat /sleeper) && echo alive", "alive\n")

	if err := d.Restart(ctx); err != nil { // SIGKILL, then start again
		t.Fatalf("restart: %v", err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != sandboxd.StateRunning {
		t.Fatalf("after the SIGKILL: %+v, %v; want running", got, err)
	}
	run("after the SIGKILL", "kill -0 $(cat /sleeper) && cat /mark", "before\n")

	if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("start: %v", err)
	}
	run("after stop and start", "cat /mark", "before\n")

	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if left, err := d.Leftovers(ctx, nil, sb.ID); err != nil || len(left) > 0 {
		t.Errorf("the destroyed gVisor sandbox left %v (%v)", left, err)
	}
}
