package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// startCounterAndServer starts in sandbox id an HTTP server on
// 127.0.0.1:8080 answering "hello" and a loop counting ten times a second
// into /tmp/c, and waits until it counted 20. It returns the loop's pid
// and count, which reads the counter of any sandbox.
func startCounterAndServer(ctx context.Context, t *testing.T, c *sandboxd.Client, id string) (pid string, count func(id string) int) {
	t.Helper()
	res, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: `mkdir -p /tmp/www && echo hello > /tmp/www/index.html &&
		httpd -p 127.0.0.1:8080 -h /tmp/www &&
		{ sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' >/dev/null 2>&1 & echo $!; }`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the workload: %+v, %v", res, err)
	}
	count = func(id string) int {
		t.Helper()
		res, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: "cat /tmp/c"})
		if err != nil {
			t.Fatalf("read the counter of %s: %v", id, err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
		return n
	}
	for deadline := time.Now().Add(time.Minute); count(id) < 20; {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
	}
	return strings.TrimSpace(res.Stdout), count
}

// TestForkWithMemory_ForkRunsTheParentsProcesses: under --engine oci a
// gVisor sandbox running a counter loop and an HTTP server is forked with
// its memory. The fork is a new sandbox (another id) running the same
// processes: its counter goes on from the parent's count (not from 0),
// the same pid, the server answers; the parent runs on too, and each goes
// on independently (the fork's loop killed, the parent's counts on; a
// file the fork writes is not the parent's). The memory image is kept
// 0700 in the data dir while the fork's capture exists, and goes with it
// (the fork destroyed and the daemon stopped). A runc-class sandbox's
// fork with memory is refused as invalid_argument naming why, making
// nothing.
func TestForkWithMemory_ForkRunsTheParentsProcesses(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "forkmem", "--engine", "oci")
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256, Env: map[string]string{"FROM": "parent"}})
	pid, count := startCounterAndServer(ctx, t, c, sb.ID)
	before := count(sb.ID)

	forks, err := c.ForkWithMemory(ctx, sb.ID, 1)
	if err != nil {
		t.Fatalf("ForkWithMemory: %v", err)
	}
	if len(forks) != 1 || forks[0].ID == sb.ID || forks[0].State != "running" {
		t.Fatalf("forks = %+v, want one new running sandbox", forks)
	}
	f := forks[0]
	destroyAtEnd(t, c, f.ID)
	forkAt := count(f.ID)
	t.Logf("parent counted %d before the fork; the fork reads %d", before, forkAt)
	if forkAt < before {
		t.Errorf("the fork's counter = %d, the parent's was %d before the fork; want it to go on from there (a restart counts from 0)", forkAt, before)
	}
	if res, err := c.Exec(ctx, f.ID, sandboxd.ExecRequest{Command: "kill -0 " + pid + " && echo alive; wget -qO- http://127.0.0.1:8080/; echo $FROM"}); err != nil || res.Stdout != "alive\nhello\nparent\n" {
		t.Errorf("in the fork: the parent's process %s, its server and env: %+v, %v", pid, res, err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" || !got.HibernatedAt.IsZero() {
		t.Fatalf("the parent after the fork: %+v, %v; want running", got, err)
	}
	p, fc := count(sb.ID), count(f.ID)
	for deadline := time.Now().Add(time.Minute); count(sb.ID) <= p || count(f.ID) <= fc; {
		if time.Now().After(deadline) {
			t.Fatal("the parent's and the fork's counters do not both go on")
		}
	}
	// Independent: the fork's loop ends, the parent's goes on; the
	// fork's file is its own.
	if _, err := c.Exec(ctx, f.ID, sandboxd.ExecRequest{Command: "kill " + pid + "; echo fork > /mark"}); err != nil {
		t.Fatal(err)
	}
	stopped := count(f.ID)
	p = count(sb.ID)
	for deadline := time.Now().Add(time.Minute); count(sb.ID) <= p; {
		if time.Now().After(deadline) {
			t.Fatal("the parent's counter stopped with the fork's")
		}
	}
	if n := count(f.ID); n > stopped+1 {
		t.Errorf("the fork's counter went on (%d → %d) after its loop was killed", stopped, n)
	}
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /mark 2>/dev/null || echo none"}); err != nil || res.Stdout != "none\n" {
		t.Errorf("the parent sees the fork's file: %+v, %v", res, err)
	}
	mem, _ := filepath.Glob(filepath.Join(d.DataDir(), "hibernate", ".forkmem", "*"))
	if len(mem) != 1 {
		t.Fatalf("memory images in the data dir: %v, want one", mem)
	}
	if fi, err := os.Stat(mem[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory image %s: %v, %v; want a 0700 directory", mem[0], fi, err)
	}

	// A runc-class sandbox cannot: refused, naming why, nothing made.
	runc := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	_, err = c.ForkWithMemory(ctx, runc.ID, 1)
	var apiErr *sandboxd.APIError
	if !errors.Is(err, sandboxd.ErrInvalidArgument) || !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "CRIU") {
		t.Errorf("ForkWithMemory of a runc-class sandbox = %v, want invalid_argument naming why", err)
	}
	page, err := c.ListSandboxes(ctx, sandboxd.ListOptions{})
	if err != nil || len(page.Items) != 3 {
		t.Errorf("sandboxes after the refused fork: %d, %v; want 3", len(page.Items), err)
	}

	// The image goes with the fork's capture.
	if err := c.DestroySandbox(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil { // a stopping daemon drops unused fork captures
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(d.DataDir(), "hibernate", ".forkmem", "*")); len(left) > 0 {
		t.Errorf("memory images left after the fork's capture went: %v", left)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestForkWithMemory_SIGKILLMidway: a daemon killed with SIGKILL at some
// point of a fork with memory leaves, once started again, the source
// running or hibernated, and in either case its resume and an exec work
// with its processes (its counter process alive); a fork made before the
// kill is a whole sandbox that answers, or none is left; and a memory
// image is only ever kept beside a capture the store knows.
func TestForkWithMemory_SIGKILLMidway(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 8*time.Minute)
	d := startDaemon(t, "forkkill", "--engine", "oci", "--reconcile-every", "1s")
	c := newClient(d, true)
	once := newClient(d, false)
	for _, after := range []time.Duration{100 * time.Millisecond, 600 * time.Millisecond, 1500 * time.Millisecond} {
		sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: `{ sh -c 'while true; do sleep 0.1; done' >/dev/null 2>&1 & echo $!; }`})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("start the loop: %+v, %v", res, err)
		}
		pid := strings.TrimSpace(res.Stdout)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = once.ForkWithMemory(ctx, sb.ID, 1) // cut short: its answer does not matter
		}()
		time.Sleep(after) // a moment of the fork, not a wait for a condition
		d.Kill()
		<-done
		if err := d.Start(ctx); err != nil {
			t.Fatalf("start after the SIGKILL: %v", err)
		}
		var last string
		for deadline := time.Now().Add(time.Minute); ; {
			got, err := c.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != "paused" && got.State != "running" {
				t.Fatalf("killed %v into the fork: the source is %s (%s), want running or hibernated", after, got.State, got.ErrorReason)
			}
			if got.State == "paused" {
				if r, err := c.ResumeSandbox(ctx, sb.ID); err != nil || r.ProcessesRestarted {
					last = fmt.Sprintf("resume: %+v, %v", r, err)
				}
			}
			res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "kill -0 " + pid + " && echo alive"})
			if err == nil && res.Stdout == "alive\n" {
				t.Logf("killed %v into the fork: the source was %s (hibernated %v)", after, got.State, !got.HibernatedAt.IsZero())
				break
			}
			last += fmt.Sprintf(" exec: %+v, %v", res, err)
			if time.Now().After(deadline) {
				t.Fatalf("killed %v into the fork: the source's processes do not come back: %s", after, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
		page, err := c.ListSandboxes(ctx, sandboxd.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range page.Items {
			if other.ID == sb.ID {
				continue
			}
			if other.State == "running" {
				if _, err := c.Exec(ctx, other.ID, sandboxd.ExecRequest{Command: "true"}); err != nil {
					t.Errorf("a fork made before the kill does not answer: %v", err)
				}
			}
			if err := c.DestroySandbox(ctx, other.ID); err != nil && !isNotFound(err) {
				t.Fatal(err)
			}
		}
		if err := c.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Every fork and source gone, a stopping daemon drops the captures,
	// and with them every memory image.
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(d.DataDir(), "hibernate", ".forkmem", "*")); len(left) > 0 {
		t.Errorf("memory images left: %v", left)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotWithMemory_RestoresAfterRestartWithoutItsSource: under
// --engine oci a gVisor sandbox running a counter loop and an HTTP server
// is snapshotted with its memory through the CLI (sbx snapshot --memory
// --name), then destroyed, and the daemon restarted. `sbx create
// --template` of the name then makes sandboxes that run the source's
// processes on (the same pid, the counter from the snapshot's count, the
// server answering, the source's env and the request's own); a create
// asking for another size is invalid_argument naming --memory and makes
// nothing. The snapshot lists with memory: true; its memory image is kept
// in the data dir across the restart and goes when it is deleted.
func TestSnapshotWithMemory_RestoresAfterRestartWithoutItsSource(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "snapmem", "--engine", "oci")
	c := newClient(d, true)
	dir := t.TempDir()
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256, Env: map[string]string{"FROM": "source"}})
	pid, count := startCounterAndServer(ctx, t, c, sb.ID)
	before := count(sb.ID)
	snapID := strings.TrimSpace(mustSbx(t, d, dir, "snapshot", sb.ID, "--memory", "--name", "warm").stdout)
	tpl, err := c.GetTemplate(ctx, "warm")
	if err != nil || tpl.ID != snapID || !tpl.Memory || tpl.Kind != "snapshot" {
		t.Fatalf("the snapshot: %+v, %v; want %s, a snapshot with memory", tpl, err, snapID)
	}
	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	memDir := filepath.Join(d.DataDir(), "hibernate", ".forkmem", snapID)
	if _, err := os.Stat(memDir); err != nil {
		t.Fatalf("the snapshot's memory image after the daemon stopped: %v", err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Another size: refused, nothing made.
	r := sbx(t, d, dir, "create", "--template", "warm", "--memory", "512")
	if r.code == 0 || !strings.Contains(r.stderr, "invalid argument: --memory: is 256") {
		t.Errorf("create from the snapshot with another size: exit %d, %q; want invalid_argument naming --memory", r.code, r.stderr)
	}
	if page, err := c.ListSandboxes(ctx, sandboxd.ListOptions{}); err != nil || len(page.Items) != 0 {
		t.Fatalf("sandboxes after the refused create: %d, %v; want none", len(page.Items), err)
	}
	for i := range 2 {
		id := strings.TrimSpace(mustSbx(t, d, dir, "create", "--template", "warm", "--env", "MINE="+strconv.Itoa(i)).stdout)
		destroyAtEnd(t, c, id)
		at := count(id)
		if at < before {
			t.Errorf("sandbox %d's counter = %d, the source's was %d at the snapshot; want it to go on", i, at, before)
		}
		for deadline := time.Now().Add(time.Minute); count(id) <= at; {
			if time.Now().After(deadline) {
				t.Fatalf("sandbox %d's counter stands at %d: its loop does not run", i, at)
			}
		}
		want := "alive\nhello\nsource " + strconv.Itoa(i) + "\n"
		if res, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: "kill -0 " + pid + " && echo alive; wget -qO- http://127.0.0.1:8080/; echo $FROM $MINE"}); err != nil || res.Stdout != want {
			t.Errorf("sandbox %d: the source's process %s, its server and env: %+v, %v; want %q", i, pid, res, err, want)
		}
		if err := c.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteTemplate(ctx, snapID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(memDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the memory image after the snapshot was deleted: %v, want gone", err)
	}
}
