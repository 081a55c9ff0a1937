package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// newHibernateHarness is a harness whose sandboxes the oci runtime runs
// under gVisor, with a hibernate directory.
func newHibernateHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	opts.oci, opts.hibernate = true, true
	return newHarness(t, opts)
}

// createGVisor creates a gVisor sandbox of alice's.
func createGVisor(t *testing.T, h *harness) service.Sandbox {
	t.Helper()
	sb, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor})
	if err != nil {
		t.Fatal(err)
	}
	return sb.Sandbox
}

// destroyLeavesNothing destroys sandbox id as the admin and checks that
// nothing of the harness's sandboxes is left (harness.assertNothingLeft).
func destroyLeavesNothing(t *testing.T, h *harness, id string) {
	t.Helper()
	if err := h.svc.Destroy(t.Context(), admin, id); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// httpAnswers reports whether the workload's httpd answers inside id.
func httpAnswers(t *testing.T, h *harness, id string) bool {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), admin, id, service.ExecRequest{Command: "wget -qO- http://127.0.0.1:8080/"})
	return err == nil && string(res.Stdout) == "hello\n"
}

// wantHibernated checks that sandbox id is hibernated: paused and marked,
// its sandbox not running, its image in place (0700), its memory released.
func wantHibernated(t *testing.T, h *harness, id string) {
	t.Helper()
	sb, err := h.svc.Get(t.Context(), admin, id)
	if err != nil || sb.State != service.StatePaused || sb.HibernatedAt.IsZero() {
		t.Fatalf("Get = %s hibernated at %v, %v; want paused and hibernated", sb.State, sb.HibernatedAt, err)
	}
	if st, _ := h.rt.Inspect(t.Context(), id); st.State == runtime.StateRunning {
		t.Errorf("the hibernated sandbox runs: %+v", st)
	}
	if fi, err := os.Stat(filepath.Join(h.hibDir, id)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("its image: %v, %v; want a 0700 directory", fi, err)
	}
	if used, _ := h.adm.Usage(); used.MemoryMB != 0 || used.MilliCPU != 0 {
		t.Errorf("capacity while hibernated = %+v, want its memory and CPU released", used)
	}
}

// TestHibernate_KeepsProcessesAndFreesMemory: a hibernated gVisor
// sandbox holds no process and no capacity, answers ErrPaused to exec;
// resumed, the same counter process counts on from where it was and its
// HTTP server answers; a repeated hibernate and resume return the same.
func TestHibernate_KeepsProcessesAndFreesMemory(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	pid := workload(t, h, sb.ID)
	before := waitCounter(t, h, sb.ID, 3)
	if !httpAnswers(t, h, sb.ID) {
		t.Fatal("the workload's server does not answer")
	}
	hib, err := h.svc.Hibernate(ctx, admin, sb.ID)
	if err != nil || hib.Stopped || hib.HibernatedAt.IsZero() {
		t.Fatalf("Hibernate = %+v, %v; want hibernated", hib, err)
	}
	wantHibernated(t, h, sb.ID)
	if again, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil || !again.HibernatedAt.Equal(hib.HibernatedAt) {
		t.Errorf("Hibernate again = %+v, %v; want the same", again, err)
	}
	if _, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "true"}); !errors.Is(err, service.ErrPaused) {
		t.Errorf("exec while hibernated = %v, want ErrPaused", err)
	}
	r, err := h.svc.Resume(ctx, admin, sb.ID)
	if err != nil || r.State != service.StateRunning || r.ProcessesRestarted || !r.HibernatedAt.IsZero() {
		t.Fatalf("Resume = %+v, %v; want running, processes kept", r, err)
	}
	if after := counter(t, h, sb.ID); after < before {
		t.Errorf("counter after resume = %d, want at least %d", after, before)
	}
	waitCounter(t, h, sb.ID, before+2)
	if res, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process %s after resume: %q, %v", pid, res.Stdout, err)
	}
	if !httpAnswers(t, h, sb.ID) {
		t.Error("the HTTP server does not answer after resume")
	}
	if _, err := os.Stat(filepath.Join(h.hibDir, sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image after resume: %v, want it removed", err)
	}
	if used, _ := h.adm.Usage(); used.MemoryMB != sb.MemoryMB {
		t.Errorf("capacity after resume = %+v, want its %d MiB held again", used, sb.MemoryMB)
	}
	// Hibernated again, then stopped: the image goes with the processes.
	if _, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := h.svc.Stop(ctx, admin, sb.ID); err != nil || st.State != service.StateStopped {
		t.Fatalf("Stop of a hibernated sandbox = %s, %v", st.State, err)
	}
	if _, err := os.Stat(filepath.Join(h.hibDir, sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image after stop: %v, want it removed", err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_StopsWhereTheRuntimeCannot: under the Docker runtime (no
// checkpoint) a hibernate stops the sandbox and says why; a retry answers
// the same.
func TestHibernate_StopsWhereTheRuntimeCannot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{hibernate: true})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	hib, err := h.svc.Hibernate(ctx, admin, sb.ID)
	if err != nil || !hib.Stopped || hib.State != service.StateStopped || !strings.Contains(hib.Reason, "cannot checkpoint") {
		t.Fatalf("Hibernate under Docker = %+v, %v; want stopped, saying why", hib, err)
	}
	if again, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil || !again.Stopped || again.State != service.StateStopped {
		t.Errorf("Hibernate again = %+v, %v; want stopped", again, err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_CheckpointFailsLeavesItRunning: a checkpoint the runtime
// refuses leaves the sandbox running (or paused, if it was), its counter
// counting, no image, its capacity held; one whose answer was lost after
// it happened counts as done.
func TestHibernate_CheckpointFailsLeavesItRunning(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	workload(t, h, sb.ID)
	before := waitCounter(t, h, sb.ID, 2)
	injected := errors.New("injected checkpoint fault")
	for _, paused := range []bool{false, true} {
		if paused {
			if _, err := h.svc.Pause(ctx, admin, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		h.rt.Inject(runtimetest.Checkpoint, runtimetest.Fault{Err: injected, Times: 1})
		if _, err := h.svc.Hibernate(ctx, admin, sb.ID); !errors.Is(err, service.ErrUnavailable) || !errors.Is(err, injected) {
			t.Fatalf("Hibernate with a failing checkpoint = %v, want unavailable", err)
		}
		want := service.StateRunning
		if paused {
			want = service.StatePaused
		}
		if got, _ := h.svc.Get(ctx, admin, sb.ID); got.State != want || !got.HibernatedAt.IsZero() {
			t.Errorf("paused %v: after the failure %s hibernated at %v; want %s", paused, got.State, got.HibernatedAt, want)
		}
		if left, _ := os.ReadDir(h.hibDir); len(left) != 0 {
			t.Errorf("paused %v: images after a failed checkpoint: %v", paused, left)
		}
	}
	if _, err := h.svc.Resume(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitCounter(t, h, sb.ID, before+2)
	// The checkpoint happens, its answer is lost: hibernated all the same.
	h.rt.Inject(runtimetest.Checkpoint, runtimetest.Fault{Err: injected, After: true, Times: 1})
	if hib, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil || hib.HibernatedAt.IsZero() {
		t.Fatalf("Hibernate whose answer was lost = %+v, %v; want hibernated", hib, err)
	}
	wantHibernated(t, h, sb.ID)
	if _, err := h.svc.Resume(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_MarkLostRepairedByTheReconciler: a daemon that dies
// between the checkpoint and the row's mark (here: the mark fails) leaves
// a paused row over a checkpointed sandbox and a whole image; the
// reconciler marks it hibernated, not lost, and it resumes with its
// processes.
func TestHibernate_MarkLostRepairedByTheReconciler(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	pid := workload(t, h, sb.ID)
	waitCounter(t, h, sb.ID, 2)
	h.store.inject("MarkHibernated")
	if _, err := h.svc.Hibernate(ctx, admin, sb.ID); err == nil {
		t.Fatal("Hibernate with a failing mark succeeded")
	}
	h.store.clear("MarkHibernated")
	if row, _ := h.store.GetSandbox(ctx, sb.ID); row.State != store.StatePaused {
		t.Fatalf("row after the failed mark: %s, want paused", row.State)
	}
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	got, err := h.svc.Get(ctx, admin, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case got.State == service.StatePaused && !got.HibernatedAt.IsZero():
		if _, err := h.svc.Resume(ctx, admin, sb.ID); err != nil {
			t.Fatal(err)
		}
		if res, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
			t.Errorf("the counter's process after the repair: %q, %v", res.Stdout, err)
		}
	default:
		t.Errorf("after the reconcile: %s (%s); want hibernated", got.State, got.ErrorReason)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_RacesEndInOneState: hibernates racing resumes, pauses,
// stops and a destroy leave row and sandbox agreeing, and every call
// answers a result or a conflict.
func TestHibernate_RacesEndInOneState(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	const rounds, workers = 2, 8
	for round := range rounds {
		sb := createGVisor(t, h)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				var err error
				switch i % 4 {
				case 0, 1:
					_, err = h.svc.Hibernate(ctx, admin, sb.ID)
				case 2:
					_, err = h.svc.Resume(ctx, admin, sb.ID)
				case 3:
					if round == 1 && i == 3 {
						err = h.svc.Destroy(ctx, admin, sb.ID)
					} else {
						_, err = h.svc.Pause(ctx, admin, sb.ID)
					}
				}
				if err != nil && !errors.Is(err, service.ErrNotFound) && !service.Is(err, service.ErrConflict) {
					t.Errorf("round %d worker %d: %v", round, i, err)
				}
			})
		}
		wg.Wait()
		row, err := h.store.GetSandbox(ctx, sb.ID)
		st, _ := h.rt.Inspect(ctx, sb.ID)
		_, imgErr := os.Stat(filepath.Join(h.hibDir, sb.ID))
		hasImage := imgErr == nil
		switch {
		case errors.Is(err, store.ErrNotFound):
			if st.State != runtime.StateMissing || hasImage {
				t.Errorf("round %d: no row, but sandbox %+v, image %v", round, st, hasImage)
			}
		case err != nil:
			t.Fatal(err)
		case row.State == store.StatePaused && !row.HibernatedAt.IsZero():
			if st.State == runtime.StateRunning || !hasImage {
				t.Errorf("round %d: hibernated row, sandbox %+v, image %v", round, st, hasImage)
			}
		case row.State == store.StatePaused:
			if st.State != runtime.StateRunning || !st.Paused || hasImage {
				t.Errorf("round %d: paused row, sandbox %+v, image %v", round, st, hasImage)
			}
		case row.State == store.StateRunning:
			if st.State != runtime.StateRunning || st.Paused || hasImage {
				t.Errorf("round %d: running row, sandbox %+v, image %v", round, st, hasImage)
			}
		default:
			t.Errorf("round %d: row %s", round, row.State)
		}
		if err := h.svc.Destroy(ctx, admin, sb.ID); err != nil && !errors.Is(err, service.ErrNotFound) {
			t.Fatal(err)
		}
	}
	h.assertNothingLeft(t)
}

// TestHibernate_PauseMaxHibernates: past the pause limit a gVisor
// sandbox is hibernated, not stopped; its resume keeps its processes.
func TestHibernate_PauseMaxHibernates(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{pauseMax: 10 * time.Minute})
	ctx := t.Context()
	sb := createGVisor(t, h)
	pid := workload(t, h, sb.ID)
	waitCounter(t, h, sb.ID, 2)
	if _, err := h.svc.Pause(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(11 * time.Minute)
	if n, err := h.svc.StopLongPaused(ctx); err != nil || n != 1 {
		t.Fatalf("StopLongPaused past the limit = %d, %v; want 1", n, err)
	}
	wantHibernated(t, h, sb.ID)
	if n, err := h.svc.StopLongPaused(ctx); err != nil || n != 0 {
		t.Errorf("StopLongPaused of a hibernated sandbox = %d, %v; want 0", n, err)
	}
	r, err := h.svc.Resume(ctx, admin, sb.ID)
	if err != nil || r.ProcessesRestarted {
		t.Fatalf("Resume = %+v, %v; want processes kept", r, err)
	}
	if res, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process after resume: %q, %v", res.Stdout, err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_ImageCountsAndNeedsRoom: a hibernated sandbox's memory
// image is on the host's disk, so it holds its memory's size of its
// owner's disk quota beside its files; and a hibernate directory without
// room for the image stops the sandbox, saying so, rather than writing
// half an image onto the daemon's disk.
func TestHibernate_ImageCountsAndNeedsRoom(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	if _, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	wantHibernated(t, h, sb.ID)
	if used, _ := h.adm.Usage(); used.DiskMB != sb.DiskMB+sb.MemoryMB {
		t.Errorf("disk held while hibernated = %d MB, want its disk %d + its memory %d", used.DiskMB, sb.DiskMB, sb.MemoryMB)
	}
	if _, err := h.svc.Resume(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if used, _ := h.adm.Usage(); used.DiskMB != sb.DiskMB {
		t.Errorf("disk held after the resume = %d MB, want %d", used.DiskMB, sb.DiskMB)
	}
	// A hibernate directory on a file system with 64 MB: no room.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", h.hibDir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: mount a small file system: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", h.hibDir).Run() })
	hib, err := h.svc.Hibernate(ctx, admin, sb.ID)
	if err != nil || !hib.Stopped || !strings.Contains(hib.Reason, "not enough disk for a memory image") {
		t.Fatalf("Hibernate with no room for the image = %+v, %v; want stopped, saying why", hib, err)
	}
	if got, _ := h.svc.Get(ctx, admin, sb.ID); got.State != service.StateStopped {
		t.Errorf("after it: %s, want stopped", got.State)
	}
	if left, _ := os.ReadDir(h.hibDir); len(left) != 0 {
		t.Errorf("images left: %v", left)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_FailedSaveThatEndedItStops: a checkpoint that fails after
// ending the sandbox's processes (runsc shuts a sandbox down on a save
// that hits ENOSPC) leaves the row stopped, its file system kept, and the
// answer says so, naming no host path: not running over a sandbox that
// is gone.
func TestHibernate_FailedSaveThatEndedItStops(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	if _, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "echo kept >/home/user/f || echo kept >/f"}); err != nil {
		t.Fatal(err)
	}
	injected := fmt.Errorf("injected: write %s: %w", filepath.Join(h.hibDir, sb.ID+".tmp-0", "checkpoint.img"), runtime.ErrNoSpace)
	h.rt.Inject(runtimetest.Checkpoint, runtimetest.Fault{Times: 1, Hook: func() error {
		if err := h.rt.Stop(ctx, sb.ID); err != nil {
			t.Errorf("stop in the save's window: %v", err)
		}
		return injected
	}})
	hib, err := h.svc.Hibernate(ctx, admin, sb.ID)
	if err != nil || !hib.Stopped || !strings.Contains(hib.Reason, "ended the sandbox") || !strings.Contains(hib.Reason, "disk is full") {
		t.Fatalf("Hibernate whose failed save ended the sandbox = %+v, %v; want stopped, saying so", hib, err)
	}
	if strings.Contains(hib.Reason, h.hibDir) {
		t.Errorf("the reason names a host path: %q", hib.Reason)
	}
	if got, _ := h.svc.Get(ctx, admin, sb.ID); got.State != service.StateStopped {
		t.Fatalf("after it: %s, want stopped", got.State)
	}
	if used, _ := h.adm.Usage(); used.MemoryMB != 0 {
		t.Errorf("memory held by the stopped sandbox: %d MB", used.MemoryMB)
	}
	if _, err := h.svc.Start(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Command: "cat /home/user/f 2>/dev/null || cat /f"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Errorf("its file after the start: %q, %v", res.Stdout, err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_CallerGoneMidSave: the caller's context ends while runsc
// saves (a client that hangs up): the save runs to its end, and the
// sandbox is hibernated, its processes kept, not shut down with its
// image deleted.
func TestHibernate_CallerGoneMidSave(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	sb := createGVisor(t, h)
	pid := workload(t, h, sb.ID)
	waitCounter(t, h, sb.ID, 2)
	// Memory to save: the save outlasts the cancel below.
	if _, err := h.svc.Exec(t.Context(), admin, sb.ID, service.ExecRequest{Command: `( (head -c 100000000 /dev/urandom; touch /tmp/filled; sleep 100000) | sort >/dev/null ) </dev/null >/dev/null 2>&1 &
for i in $(seq 120); do [ -e /tmp/filled ] && exit 0; sleep 1; done; exit 1`}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	marker := filepath.Join(h.sockRoot, sb.ID, runtime.AgentParkedName)
	midSave := make(chan bool, 1)
	go func() {
		// Once the agent parked, runsc checkpoint is about to start: the
		// caller goes mid-save.
		for ctx.Err() == nil {
			if _, err := os.Lstat(marker); err == nil {
				cancel()
				midSave <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
		midSave <- false
	}()
	hib, err := h.svc.Hibernate(ctx, admin, sb.ID)
	cancel()
	if !<-midSave {
		t.Fatalf("the caller did not go mid-save (no parked marker seen at %s); Hibernate = %v", marker, err)
	}
	if err != nil || hib.Stopped {
		t.Fatalf("Hibernate whose caller went mid-save = %+v, %v; want hibernated", hib, err)
	}
	wantHibernated(t, h, sb.ID)
	r, err := h.svc.Resume(t.Context(), admin, sb.ID)
	if err != nil || r.ProcessesRestarted {
		t.Fatalf("Resume = %+v, %v; want processes kept", r, err)
	}
	if res, err := h.svc.Exec(t.Context(), admin, sb.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process after resume: %q, %v", res.Stdout, err)
	}
	if err := h.svc.Destroy(t.Context(), admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestHibernate_MemoryPressureStops: under memory pressure a paused gVisor
// sandbox is stopped, fast, not hibernated (a save thaws it and writes its
// whole memory, minutes the background loop and the host have not).
func TestHibernate_MemoryPressureStops(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{memory: func() (int64, int64, error) { return 10, 1000, nil }})
	ctx := t.Context()
	sb := createGVisor(t, h)
	if _, err := h.svc.Pause(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.StopPausedUnderPressure(ctx); err != nil || n != 1 {
		t.Fatalf("StopPausedUnderPressure = %d, %v; want 1", n, err)
	}
	if got, _ := h.svc.Get(ctx, admin, sb.ID); got.State != service.StateStopped || !got.HibernatedAt.IsZero() {
		t.Errorf("under memory pressure: %s hibernated at %v; want stopped", got.State, got.HibernatedAt)
	}
	if n := h.rt.Calls(runtimetest.Checkpoint); n != 0 {
		t.Errorf("checkpoints under memory pressure: %d, want 0", n)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_ResumeRacingDestroy: a destroy (which takes no transition
// lock) that ends between a resume's read of the hibernated row and its
// reservation: the resume's restore fails, and the sandbox that is gone
// holds nothing of its owner's quota.
func TestHibernate_ResumeRacingDestroy(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	if _, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	h.admFail.beforeReserve = func(id string) {
		if id != sb.ID {
			return
		}
		once.Do(func() {
			if err := h.svc.Destroy(context.WithoutCancel(ctx), admin, sb.ID); err != nil {
				t.Errorf("destroy in the resume's window: %v", err)
			}
		})
	}
	_, err := h.svc.Resume(ctx, admin, sb.ID)
	h.admFail.beforeReserve = nil
	if err == nil {
		t.Fatal("Resume of a sandbox destroyed meanwhile succeeded")
	}
	if used, _ := h.adm.Usage(); used != (admission.Request{}) {
		t.Errorf("held after the destroyed sandbox's failed resume: %+v, want nothing", used)
	}
	h.assertNothingLeft(t)
}

// TestHibernate_ImageOverDiskQuotaStops: a hibernate whose memory image
// does not fit in the disk quota the caller's token leaves the owner stops
// the sandbox instead, saying so (hibernating many small-disk sandboxes
// would otherwise hold many times the quota on the host's disk).
func TestHibernate_ImageOverDiskQuotaStops(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createGVisor(t, h)
	alice := service.Caller{Owner: "alice", Quota: service.Quota{DiskMB: sb.DiskMB + sb.MemoryMB/2}}
	hib, err := h.svc.Hibernate(ctx, alice, sb.ID)
	if err != nil || !hib.Stopped || !strings.Contains(hib.Reason, "disk quota") {
		t.Fatalf("Hibernate over the disk quota = stopped %v reason %q, %v; want stopped, saying why", hib.Stopped, hib.Reason, err)
	}
	if used, _ := h.adm.Usage(); used.DiskMB != sb.DiskMB {
		t.Errorf("disk held after the stop = %d MB, want %d", used.DiskMB, sb.DiskMB)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_PauseMaxHeldToTheCreatesQuota: a hibernate with no
// caller (--pause-max's; the timeout's is the same path) is held to the
// owner's disk quota its create was held to: an image that does not fit
// in it stops the sandbox (it used to be checked against no quota).
func TestHibernate_PauseMaxHeldToTheCreatesQuota(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{pauseMax: 10 * time.Minute})
	ctx := t.Context()
	const diskMB, memMB = 512, 256
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor,
		DiskMB: diskMB, MemoryMB: memMB, Quota: service.Quota{DiskMB: diskMB + memMB/2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Pause(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(11 * time.Minute)
	if n, err := h.svc.StopLongPaused(ctx); err != nil || n != 1 {
		t.Fatalf("StopLongPaused past the limit = %d, %v; want 1", n, err)
	}
	if got := state(t, h, sb.ID); got.State != service.StateStopped {
		t.Errorf("after --pause-max over the create's disk quota: %s (hibernated at %v), want stopped", got.State, got.HibernatedAt)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestHibernate_PauseMaxOffTheLoop: a --pause-max hibernate that takes long
// (here: its checkpoint held) does not hold up the background loop: the
// reaper destroys an expired sandbox meanwhile.
func TestHibernate_PauseMaxOffTheLoop(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{pauseMax: 10 * time.Minute})
	ctx := t.Context()
	a := createGVisor(t, h)
	if _, err := h.svc.Pause(ctx, admin, a.ID); err != nil {
		t.Fatal(err)
	}
	b, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reaped := make(chan bool, 1)
	h.rt.Inject(runtimetest.Checkpoint, runtimetest.Fault{Times: 1, Hook: func() error {
		// The hibernate is under way: b expires now, and must be reaped
		// before the hibernate goes on.
		h.clock.Advance(time.Hour)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := h.store.GetSandbox(context.Background(), b.ID); errors.Is(err, store.ErrNotFound) {
				reaped <- true
				return nil
			}
		}
		reaped <- false
		return nil
	}})
	h.clock.Advance(11 * time.Minute)
	bg, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.svc.RunBackground(bg, 100*time.Millisecond, time.Hour) }()
	defer func() { stop(); <-done }()
	select {
	case ok := <-reaped:
		if !ok {
			t.Fatal("the reaper did not run while a --pause-max hibernate was under way")
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("no --pause-max hibernate began")
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got, _ := h.svc.Get(ctx, admin, a.ID); !got.HibernatedAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the --pause-max hibernate did not end")
		}
	}
	stop()
	<-done
	destroyLeavesNothing(t, h, a.ID)
}
