package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestWake_HeldToTheCreatorsQuota: a wake has no token of its own; it is
// held to the quota of the token that made the sandbox. A hibernated
// sandbox (which holds no running slot) whose owner then filled that
// quota is not woken: Wake answers the quota's typed error and leaves it
// hibernated; once the slot is free, Wake resumes it with its processes.
// A sandbox without an auto-resume is not Wake's (ok false, unchanged).
func TestWake_HeldToTheCreatorsQuota(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	q := service.Quota{Sandboxes: 1}
	a, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, Quota: q,
		Lifecycle: service.Lifecycle{AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	pid := workload(t, h, a.ID)
	if _, err := h.svc.Hibernate(ctx, admin, a.ID); err != nil {
		t.Fatal(err)
	}
	b, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, Quota: q})
	if err != nil {
		t.Fatalf("a second sandbox while the first is hibernated: %v", err)
	}

	if _, ok, err := h.svc.Wake(ctx, a.ID); !ok || !errors.Is(err, service.ErrQuotaExceeded) {
		t.Errorf("Wake over the creator's quota = ok %v, %v; want ErrQuotaExceeded", ok, err)
	}
	if sb := state(t, h, a.ID); sb.State != service.StatePaused || sb.HibernatedAt.IsZero() {
		t.Errorf("after the refused wake: %s, hibernated at %v; want still hibernated", sb.State, sb.HibernatedAt)
	}
	if _, ok, err := h.svc.Wake(ctx, b.ID); ok || err != nil {
		t.Errorf("Wake of a running sandbox without an auto-resume = ok %v, %v; want false", ok, err)
	}

	if err := h.svc.Destroy(ctx, admin, b.ID); err != nil {
		t.Fatal(err)
	}
	r, ok, err := h.svc.Wake(ctx, a.ID)
	if err != nil || !ok || r.State != service.StateRunning || r.ProcessesRestarted || !r.ConnectionsClosed {
		t.Fatalf("Wake with the slot free = %+v, ok %v, %v; want running, its processes kept", r, ok, err)
	}
	if res, err := h.svc.Exec(ctx, admin, a.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process after the wake: %q, %v", res.Stdout, err)
	}
	destroyLeavesNothing(t, h, a.ID)
}

// createWakeable creates a gVisor sandbox of alice's with an auto-resume
// and hibernates it.
func createWakeable(t *testing.T, h *harness, hibernate bool) service.Sandbox {
	t.Helper()
	sb, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor,
		Lifecycle: service.Lifecycle{AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	if hibernate {
		if hib, err := h.svc.Hibernate(t.Context(), admin, sb.ID); err != nil || hib.Stopped {
			t.Fatalf("Hibernate = %+v, %v", hib, err)
		}
	}
	return sb.Sandbox
}

// waitState polls sandbox id until pred holds, for up to a minute.
func waitState(t *testing.T, h *harness, id string, what string, pred func(service.Sandbox) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sb := state(t, h, id)
		if pred(sb) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s (hibernated at %v) after a minute; want %s", id, sb.State, sb.HibernatedAt, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWake_DuringASaveNeitherQueuesNorUndoesIt: wakes of a sandbox whose
// hibernate is saving answer ErrPaused at once: 2000 of them during a
// 3 s save all return while it saves (they used to queue on the
// transition lock, a goroutine each, then resume the sandbox the moment
// the save ended), and the sandbox stays hibernated.
func TestWake_DuringASaveNeitherQueuesNorUndoesIt(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createWakeable(t, h, false)
	inSave, release := make(chan struct{}), make(chan struct{})
	h.rt.Inject(runtimetest.Checkpoint, runtimetest.Fault{Times: 1, Hook: func() error {
		close(inSave)
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
		return nil
	}})
	hibDone := make(chan error, 1)
	go func() {
		_, err := h.svc.Hibernate(ctx, admin, sb.ID)
		hibDone <- err
	}()
	<-inSave
	const wakes = 2000
	errs := make(chan error, wakes)
	for range wakes {
		go func() {
			_, ok, err := h.svc.Wake(ctx, sb.ID)
			if !ok && err == nil {
				err = errors.New("ok false")
			}
			errs <- err
		}()
	}
	timeout := time.After(2500 * time.Millisecond) // within the save
	for i := range wakes {
		select {
		case err := <-errs:
			if !errors.Is(err, service.ErrPaused) {
				t.Errorf("Wake during the save = %v, want ErrPaused", err)
			}
		case <-timeout:
			close(release)
			t.Fatalf("%d of %d wakes still waiting while the save runs; want each answered at once", wakes-i, wakes)
		}
	}
	close(release)
	if err := <-hibDone; err != nil {
		t.Fatal(err)
	}
	wantHibernated(t, h, sb.ID)
	if n := h.rt.Calls(runtimetest.Restore); n != 0 {
		t.Errorf("%d restores after the save, want none", n)
	}
	destroyLeavesNothing(t, h, sb.ID)
}

// TestWake_RestoreOutlivesItsCaller: the caller's deadline does not reach
// the restore. A restore of 1.5 s for a Wake with a 1 s deadline: the
// caller gets its context's error, and the sandbox ends running (its
// restore used to be cut short by that deadline, the sandbox left
// hibernated).
func TestWake_RestoreOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	sb := createWakeable(t, h, true)
	h.rt.Inject(runtimetest.Restore, runtimetest.Fault{Times: 1, Hook: func() error {
		time.Sleep(1500 * time.Millisecond)
		return nil
	}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, ok, err := h.svc.Wake(ctx, sb.ID); !ok || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("Wake with a 1 s deadline = ok %v, %v; want its deadline's error", ok, err)
	}
	waitState(t, h, sb.ID, "running", func(sb service.Sandbox) bool { return sb.State == service.StateRunning })
	if err := h.svc.Destroy(t.Context(), admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestWake_FailureSharedNotRetried: 40 concurrent wakes of a sandbox
// whose restore fails make one attempt and all get its error (each used
// to try again under the lock, one after another); the owner's Resume
// then finds the lock free and resumes it.
func TestWake_FailureSharedNotRetried(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sb := createWakeable(t, h, true)
	injected := errors.New("injected: restore failed")
	h.rt.Inject(runtimetest.Restore, runtimetest.Fault{Err: injected, Hook: func() error {
		time.Sleep(200 * time.Millisecond)
		return nil
	}})
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			if _, ok, err := h.svc.Wake(ctx, sb.ID); !ok || !errors.Is(err, service.ErrUnavailable) {
				t.Errorf("Wake of a sandbox whose restore fails = ok %v, %v; want ErrUnavailable", ok, err)
			}
		})
	}
	wg.Wait()
	if n := h.rt.Calls(runtimetest.Restore); n != 1 {
		t.Errorf("%d restore attempts for 40 wakes, want 1", n)
	}
	h.rt.Clear(runtimetest.Restore)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if r, err := h.svc.Resume(rctx, admin, sb.ID); err != nil || r.ProcessesRestarted {
		t.Fatalf("the owner's Resume after the failed wakes = %+v, %v; want resumed", r, err)
	}
	destroyLeavesNothing(t, h, sb.ID)
}
