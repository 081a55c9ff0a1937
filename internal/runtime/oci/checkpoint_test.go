package oci_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// gvisorSpec is spec for a gVisor sandbox.
func gvisorSpec(t *testing.T, id string) runtime.Spec {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	s := spec(id)
	s.Isolation = runtime.IsolationGVisor
	s.MemoryMB, s.PidsLimit = runtime.MinGVisorMemoryMB, runtime.MinGVisorPidsLimit
	return s
}

// counter starts a counting loop in the sandbox and returns a function
// that reads its count (failing the test on an agent error).
func counter(t *testing.T, rt *oci.Runtime, s runtime.Spec) func() int {
	t.Helper()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, s.SandboxID) }, s.AgentToken)
	t.Cleanup(c.Close)
	run := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return string(res.Stdout)
	}
	run(`i=0; (while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done) </dev/null >/dev/null 2>&1 &`)
	read := func() int {
		t.Helper()
		n, _ := strconv.Atoi(strings.TrimSpace(run("cat /tmp/n 2>/dev/null || echo 0")))
		return n
	}
	for deadline := time.Now().Add(time.Minute); read() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
	}
	return read
}

// TestCheckpoint_FailureAtEveryStepLeavesItRunning fails Checkpoint at
// each of its steps, on a running and on a paused gVisor sandbox: the
// error names the step, no image (nor a temporary one) is left, the
// sandbox is as it was (running, or paused), its agent answers and its
// counter goes on. Then a checkpoint without a fault works.
func TestCheckpoint_FailureAtEveryStepLeavesItRunning(t *testing.T) {
	requireEnv(t)
	for _, step := range []string{"checkpoint", "parked", "checkpointed"} {
		for _, paused := range []bool{false, true} {
			name := step
			if paused {
				name += "_paused"
			}
			t.Run(name, func(t *testing.T) {
				rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
				id := runtimetest.NewSandboxID()
				s := gvisorSpec(t, id)
				if _, err := rt.Create(t.Context(), s); err != nil {
					t.Fatal(err)
				}
				read := counter(t, rt, s)
				before := read()
				if paused {
					if err := rt.Pause(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				}
				injected := errors.New("injected fault")
				rt.SetFault(func(s string) error {
					if s == step {
						return injected
					}
					return nil
				})
				images := t.TempDir()
				dir := filepath.Join(images, "image")
				err := rt.Checkpoint(t.Context(), id, dir)
				if !errors.Is(err, injected) || !strings.Contains(err.Error(), step) {
					t.Fatalf("Checkpoint = %v, want the injected fault at %q", err, step)
				}
				rt.SetFault(nil)
				if left, _ := os.ReadDir(images); len(left) > 0 {
					t.Errorf("after a failure at %q the image directory holds %v", step, left)
				}
				st, err := rt.Inspect(t.Context(), id)
				if err != nil || st.State != runtime.StateRunning || st.Paused != paused {
					out, _ := os.ReadFile(filepath.Join(rt.BundleDir(id), "rw", "output.log"))
					t.Fatalf("after a failure at %q: Inspect = %+v, %v; want running, paused %v; output:\n%s", step, st, err, paused, out)
				}
				if paused {
					if err := rt.Resume(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				}
				for deadline := time.Now().Add(time.Minute); read() <= before; {
					if time.Now().After(deadline) {
						t.Fatalf("after a failure at %q the counter stopped at %d", step, before)
					}
				}
				// Nothing stuck: the next checkpoint and restore work.
				if err := rt.Checkpoint(t.Context(), id, dir); err != nil {
					t.Fatalf("Checkpoint after the failure: %v", err)
				}
				if err := rt.Restore(t.Context(), id, dir); err != nil {
					t.Fatalf("Restore: %v", err)
				}
				if n := read(); n <= before {
					t.Errorf("after Restore the count is %d, want more than %d", n, before)
				}
			})
		}
	}
}

// TestCheckpoint_FreesTheSandbox: a checkpointed gVisor sandbox has no
// process and no cgroup left on the host; its image is sealed; Destroy
// removes it and its image is the caller's.
func TestCheckpoint_FreesTheSandbox(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	s := gvisorSpec(t, id)
	if _, err := rt.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(t.Context(), id, dir); err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, l := range leftovers(t, rt, id) {
		if strings.HasPrefix(l, "process ") || strings.HasPrefix(l, "cgroups ") || strings.HasPrefix(l, "OCI runtime state") {
			running = append(running, l)
		}
	}
	if len(running) > 0 {
		t.Errorf("a checkpointed sandbox still holds %v", running)
	}
	if st, _ := rt.Inspect(t.Context(), id); st.State != runtime.StateExited || st.Detail != "checkpointed" {
		t.Errorf("Inspect = %+v, want exited (checkpointed)", st)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("image dir: %v, %v; want mode 0700", fi, err)
	}
	// Sealed at rest: runsc's file only as its sealed copy, beside the
	// sealed data key (seal.go).
	if entries, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	} else {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"checkpoint.img.sealed", "image.key"}) {
			t.Errorf("the image's files: %v, want checkpoint.img.sealed and image.key", names)
		}
	}
	if err := rt.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, rt, id); len(left) > 0 {
		t.Errorf("after Destroy: left %v", left)
	}
}

// TestCheckpoint_HostileSandbox: a sandbox that plants the agent's
// "parked" file and sends its agent the wake-up signal (SIGUSR2) all the
// time gets either a whole checkpoint (which restores) or a failed one
// with nothing at the image's path. A failed one leaves it running, or,
// when the woken agent's host socket was open at the save (runsc fails
// the save of a connected host socket and ends the sandbox), exited and
// reported so: it harms only itself, and the service stops such a
// sandbox (hibernate.go). Either way it answers again once started.
func TestCheckpoint_HostileSandbox(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	s := gvisorSpec(t, id)
	if _, err := rt.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	// A client per call, as the service's after a restore: the agent
	// parked its connections for the save.
	exec := func(script string) (*agent.ExecResult, error) {
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, s.AgentToken)
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		return c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second})
	}
	if _, err := exec(`(while :; do touch /run/sandboxd/parked; kill -USR2 1; done) </dev/null >/dev/null 2>&1 &`); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	for i := range 3 {
		err := rt.Checkpoint(t.Context(), id, dir)
		if err == nil {
			if err := rt.Restore(t.Context(), id, dir); err != nil {
				t.Fatalf("attempt %d: Restore of a whole image: %v", i, err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		} else if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Fatalf("attempt %d: a failed checkpoint (%v) left %s (%v)", i, err, dir, serr)
		}
		if st, _ := rt.Inspect(t.Context(), id); st.State != runtime.StateRunning {
			if err == nil || st.State != runtime.StateExited {
				t.Fatalf("attempt %d (checkpoint: %v): the sandbox is %+v, want running", i, err, st)
			}
			t.Logf("attempt %d: the failed checkpoint ended the sandbox; starting it again", i)
			if serr := rt.Start(t.Context(), id); serr != nil {
				t.Fatalf("attempt %d: Start after a failed checkpoint ended the sandbox: %v", i, serr)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			rerr := rt.WaitAgentReady(ctx, id)
			cancel()
			if rerr != nil {
				t.Fatalf("attempt %d: the agent does not answer after the Start: %v", i, rerr)
			}
			if _, err := exec(`(while :; do touch /run/sandboxd/parked; kill -USR2 1; done) </dev/null >/dev/null 2>&1 &`); err != nil {
				t.Fatal(err)
			}
		}
		if res, eerr := exec("echo ok"); eerr != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("attempt %d (checkpoint: %v): exec = %v, %v", i, err, res, eerr)
		}
		t.Logf("attempt %d: checkpoint %v", i, err)
	}
}

// TestCheckpoint_CutShortAfterThePark: a daemon that died between the
// agent's park and the save leaves a running sandbox whose agent answers
// nothing; the reconciler freezes it (Pause), and its Resume, or a Start,
// wakes the agent.
func TestCheckpoint_CutShortAfterThePark(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	s := gvisorSpec(t, id)
	if _, err := rt.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	for _, wake := range []string{"Resume", "Start"} {
		if err := rt.Park(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		var err error
		if wake == "Resume" {
			if err := rt.Pause(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			err = rt.Resume(t.Context(), id)
		} else {
			err = rt.Start(t.Context(), id)
		}
		if err != nil {
			t.Fatalf("%s: %v", wake, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = rt.WaitAgentReady(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("after %s the parked agent does not answer: %v", wake, err)
		}
	}
}
