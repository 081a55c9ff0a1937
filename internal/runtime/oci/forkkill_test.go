package oci_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestFork_RestoreKilledMidwayLeavesNothing: the `runsc restore` of a
// fork is SIGKILLed once the gVisor sandbox it started holds the fork's
// cgroup (as the death signal kills it when the daemon is killed
// mid-fork): its sandbox process outlives it, and runsc has no state
// file for it yet. Destroy (the reconciler's rollback) then leaves
// nothing of the fork: no process, cgroup or runsc state file.
func TestFork_RestoreKilledMidwayLeavesNothing(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	id := runtimetest.NewSandboxID()
	s := gvisorSpec(t, id)
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	counter(t, rt, s)
	dir := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(ctx, id, dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	ref := "sandboxd/oci-forkkill-test:" + id
	t.Cleanup(func() {
		_, _ = env.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	if _, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}}); err != nil {
		t.Fatalf("Commit: %v", err)
	}

	fid := runtimetest.NewSandboxID()
	fs := gvisorSpec(t, fid)
	fs.Image, fs.RestoreImage = ref, dir
	done := make(chan error, 1)
	go func() {
		_, err := rt.Create(ctx, fs)
		done <- err
	}()
	// The condition: a process of the fork other than runsc restore is in
	// its cgroup (the sandbox runsc restore started), and runsc restore
	// still runs. Then runsc restore is killed, as its death signal does.
	killed := false
	for deadline := time.Now().Add(2 * time.Minute); !killed; {
		select {
		case err := <-done:
			t.Fatalf("the fork's Create returned (%v) before its restore could be killed midway", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no runsc restore of the fork beside a sandbox process in its cgroup within 2m")
		}
		restore := restoreOf(fid)
		if restore > 0 && len(cgroupProcs(fid)) > 0 {
			killed = unix.Kill(restore, unix.SIGKILL) == nil
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
	select {
	case err := <-done:
		if err == nil {
			t.Log("the fork's Create succeeded all the same (its restore was killed after its last step)")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the fork's Create did not return within 2m of its restore's kill")
	}
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rt.Destroy(dctx, fid); err != nil {
		t.Fatalf("Destroy of the fork: %v", err)
	}
	for _, tr := range rt.Traces(fid) {
		if tr.SandboxID == fid {
			t.Errorf("after Destroy of the fork whose restore was killed: trace %+v", tr)
		}
	}
	// runsc's gofer runs outside the sandbox's cgroup and exits once the
	// sandbox it serves is gone: a condition to wait on, not at once.
	if pids := cmdlineNames(fid); len(pids) > 0 {
		t.Logf("just after Destroy, processes naming the fork still run: %v", pids)
		for deadline := time.Now().Add(30 * time.Second); len(pids) > 0; pids = cmdlineNames(fid) {
			if time.Now().After(deadline) {
				t.Errorf("30s after Destroy of the fork whose restore was killed, processes naming it run: %v", pids)
				break
			}
			time.Sleep(20 * time.Millisecond) // a poll interval
		}
	}
	if left := leftovers(t, rt, fid); len(left) > 0 {
		t.Errorf("after Destroy of the fork whose restore was killed: left %v", left)
	}
	if err := rt.Destroy(dctx, id); err != nil {
		t.Fatalf("Destroy of the parent: %v", err)
	}
}

// restoreOf is the pid of a live `runsc restore` of sandbox id, 0 if none.
func restoreOf(id string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) < 2 || args[len(args)-1] != id || !strings.Contains(filepath.Base(args[0]), "runsc") {
			continue
		}
		for _, a := range args {
			if a == "restore" {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
	}
	return 0
}

// cgroupProcs are the pids in any cgroup of sandbox id.
func cgroupProcs(id string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/sandboxd/*-" + id + "/cgroup.procs", "/sys/fs/cgroup/sandboxd/*-" + id + "/cgroup.procs"} {
		m, _ := filepath.Glob(pat)
		for _, f := range m {
			b, _ := os.ReadFile(f)
			out = append(out, strings.Fields(string(b))...)
		}
	}
	return out
}

// cmdlineNames are the live processes whose command line names id (the
// gofer runsc starts outside the sandbox's cgroup, say).
func cmdlineNames(id string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i < 0 || bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z")) {
			continue // gone, or a zombie its parent reaps
		}
		if bytes.Contains(b, []byte(id)) {
			out = append(out, filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
