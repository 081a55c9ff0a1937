package oci_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// procState is pid's state letter and parent ("" when it is gone).
func procState(pid int) (state string, ppid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid
}

// TestReaper_OrphanOfAnyNameReaped: a process orphaned to this
// subreaper (as the OCI runtime's helpers are) is reaped when it exits,
// whatever its name (here "sleep", no OCI runtime's).
func TestReaper_OrphanOfAnyNameReaped(t *testing.T) {
	requireEnv(t)
	newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}) // the subreaper
	out, err := exec.Command("/bin/sh", "-c", "sleep 0.5 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ppid := procState(pid); ppid != os.Getpid() && ppid != 0 {
		t.Fatalf("the orphan's parent is %d, want this process (%d), the subreaper", ppid, os.Getpid())
	}
	if err := testenv.Poll(t.Context(), 30*time.Second, func() error {
		if st, ppid := procState(pid); st != "" && ppid == os.Getpid() {
			return fmt.Errorf("the orphan %d is still this process's child, state %s", pid, st)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReaper_ExecChildNotStolen: a child os/exec started and waits for
// stays os/exec's to reap, even named as runsc's helpers ("exe") and a
// zombie for several of the reaper's passes: Wait gets its exit code.
func TestReaper_ExecChildNotStolen(t *testing.T) {
	requireEnv(t)
	newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	exe := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := testenv.Poll(t.Context(), 30*time.Second, func() error {
		if st, _ := procState(pid); st != "Z" && st != "" { // gone: taken from os/exec (Wait says)
			return fmt.Errorf("child %d in state %q, not yet a zombie", pid, st)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	passes := oci.ReaperPasses()
	if err := testenv.Poll(t.Context(), 30*time.Second, func() error {
		if n := oci.ReaperPasses(); n < passes+2 {
			return fmt.Errorf("the reaper made %d passes since the child died, want 2", n-passes)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Errorf("os/exec's Wait of its child named exe = %v, want exit status 7 (the reaper must not take it)", err)
	}
}

// TestReaper_AgentExitingAtOnceKeepsItsExitCode: an agent that exits
// as soon as it starts (before its boot has it watched) is the reaper's
// to record, not a stray: the sandbox's state says its exit code.
func TestReaper_AgentExitingAtOnceKeepsItsExitCode(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:], AgentReadyTimeout: 10 * time.Second})
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 12 { // the race is narrow: several tries
		id := runtimetest.NewSandboxID()
		s := spec(id)
		s.AgentBinary = agent
		_, err := rt.Create(t.Context(), s)
		var nr *runtime.AgentNotReadyError
		if !errors.As(err, &nr) {
			t.Fatalf("Create: %v, want an AgentNotReadyError", err)
		}
		if nr.Status.State != runtime.StateExited || nr.Status.ExitCode != 3 {
			t.Errorf("the agent that exited 3 at once: status %+v", nr.Status)
		}
	}
}
