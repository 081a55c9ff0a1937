package e2e_test

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

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestHibernate_SurvivesDaemonSIGKILL: under --engine oci a gVisor
// sandbox running a counter loop and an HTTP server is hibernated: no
// process and no cgroup of it is left (the memory charged to it is zero),
// exec answers 409. The daemon is killed with SIGKILL and started again;
// the sandbox is still hibernated, and its resume brings back the same
// counter process, which counts on from where it was (it did not count
// while hibernated), and the server answers.
func TestHibernate_SurvivesDaemonSIGKILL(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "hib", "--engine", "oci")
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: `mkdir -p /tmp/www && echo hello > /tmp/www/index.html &&
		httpd -p 127.0.0.1:8080 -h /tmp/www &&
		{ sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' >/dev/null 2>&1 & echo $!; }`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the workload: %+v, %v", res, err)
	}
	pid := strings.TrimSpace(res.Stdout)
	count := func() int {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /tmp/c"})
		if err != nil {
			t.Fatalf("read the counter: %v", err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
		return n
	}
	serves := func() bool {
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "wget -qO- http://127.0.0.1:8080/"})
		return err == nil && res.Stdout == "hello\n"
	}
	for deadline := time.Now().Add(time.Minute); count() < 3; {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
	}
	if !serves() {
		t.Fatal("the server does not answer")
	}
	before, readAt := count(), time.Now()
	t.Logf("counter %d before hibernate", before)

	h, err := c.HibernateSandbox(ctx, sb.ID)
	if err != nil || h.Stopped || h.State != "paused" || h.HibernatedAt.IsZero() {
		t.Fatalf("hibernate = %+v, %v; want paused and hibernated", h, err)
	}
	hibernatedAt := time.Now()
	if procs, cgroups := sandboxTraces(sb.ID); len(procs)+len(cgroups) > 0 {
		t.Errorf("a hibernated sandbox holds processes %v and cgroups %v; want none (no memory charged to it)", procs, cgroups)
	}
	if fi, err := os.Stat(filepath.Join(d.DataDir(), "hibernate", sb.ID)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("its image in the data dir: %v, %v; want a 0700 directory", fi, err)
	}
	if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "true"}); !errors.Is(err, sandboxd.ErrConflict) {
		t.Errorf("exec on a hibernated sandbox = %v, want a conflict", err)
	}

	if err := d.Restart(ctx); err != nil { // SIGKILL, then start again
		t.Fatalf("restart: %v", err)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "paused" || got.HibernatedAt.IsZero() {
		t.Fatalf("after the SIGKILL: %+v, %v; want still hibernated", got, err)
	}
	resumeAt := time.Now()
	r, err := c.ResumeSandbox(ctx, sb.ID)
	if err != nil || r.State != "running" || r.ProcessesRestarted {
		t.Fatalf("resume = %+v, %v; want running with its processes", r, err)
	}
	after := count()
	t.Logf("counter %d after resume (hibernated %v, resume took %v)", after, resumeAt.Sub(hibernatedAt).Round(time.Millisecond), time.Since(resumeAt).Round(time.Millisecond))
	// It goes on from where it was: not from 0 (a restart), and not by
	// the time it spent hibernated (it did not run then).
	running := time.Since(readAt) - resumeAt.Sub(hibernatedAt)
	if after < before || after > before+int(running/(100*time.Millisecond))+20 {
		t.Errorf("counter after resume = %d, before hibernate %d, %v of running time between; want it to go on from there", after, before, running)
	}
	for deadline := time.Now().Add(time.Minute); count() <= after; {
		if time.Now().After(deadline) {
			t.Fatalf("the counter stopped at %d after resume", after)
		}
	}
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || res.Stdout != "alive\n" {
		t.Errorf("the counter's process %s after resume: %+v, %v", pid, res, err)
	}
	if !serves() {
		t.Error("the server does not answer after resume")
	}
	if _, err := os.Stat(filepath.Join(d.DataDir(), "hibernate", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("the image after resume: %v, want it removed", err)
	}
	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
}

// sandboxTraces lists the host processes in a cgroup of sandbox id and
// its cgroup directories (cgroup v1 and v2).
func sandboxTraces(id string) (procs, cgroups []string) {
	for _, pat := range []string{"/sys/fs/cgroup/*/*/*-" + id, "/sys/fs/cgroup/*/*-" + id} {
		m, _ := filepath.Glob(pat)
		cgroups = append(cgroups, m...)
	}
	files, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), id) {
			procs = append(procs, filepath.Base(filepath.Dir(f)))
		}
	}
	return procs, cgroups
}

// TestHibernate_SIGKILLMidway: a daemon killed with SIGKILL at some point
// of a hibernate (before, during or after the checkpoint) leaves, once
// started again, one state that holds together: hibernated (and its
// resume works), running or paused (and its resume and an exec work), or
// in error (its processes lost, never shown as resumable). A save runsc
// was making when the daemon died goes on: the starting daemon waits for
// it and keeps its image (the sandbox is then hibernated). No temporary
// image is left, and its destroy leaves nothing.
func TestHibernate_SIGKILLMidway(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "hibkill", "--engine", "oci", "--reconcile-every", "1s")
	c := newClient(d, true)
	once := newClient(d, false)
	for _, after := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond} {
		sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = once.HibernateSandbox(ctx, sb.ID) // cut short: its answer does not matter
		}()
		time.Sleep(after) // a moment of the hibernate, not a wait for a condition
		d.Kill()
		<-done
		if err := d.Start(ctx); err != nil {
			t.Fatalf("start after the SIGKILL: %v", err)
		}
		var got *sandboxd.Sandbox
		var last string
		for deadline := time.Now().Add(time.Minute); ; {
			var err error
			if got, err = c.GetSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if got.State == "error" {
				break
			}
			if got.State != "paused" && got.State != "running" {
				t.Fatalf("after the SIGKILL: %s, want hibernated, paused, running or error", got.State)
			}
			hibernated := !got.HibernatedAt.IsZero()
			r, err := c.ResumeSandbox(ctx, sb.ID)
			if err == nil && r.State == "running" {
				res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo ok"})
				if err == nil && res.Stdout == "ok\n" {
					break
				}
				last = fmt.Sprintf("exec: %+v, %v", res, err)
			} else {
				last = fmt.Sprintf("resume: %+v, %v", r, err)
			}
			if hibernated {
				t.Fatalf("a hibernated sandbox does not come back: %s", last)
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the SIGKILL the sandbox neither answers nor is marked lost: %s", last)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("killed %v into the hibernate: %s, hibernated %v (%s) %s", after, got.State, !got.HibernatedAt.IsZero(), got.ErrorReason, last)
		if err := c.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		if left, _ := os.ReadDir(filepath.Join(d.DataDir(), "hibernate")); len(left) > 0 {
			t.Errorf("hibernate images left after the destroy: %v", left)
		}
	}
	sandboxes := filepath.Join(d.OCIDir(), "sandboxes")
	if entries, err := os.ReadDir(sandboxes); err != nil || len(entries) > 0 {
		t.Errorf("the OCI directory still holds %v (%v)", entries, err)
	}
}
