package service_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestHibernate_TimeoutHibernates: a gVisor sandbox made with
// PauseOnTimeout and TimeoutPause hibernate (E2B's autoPause with
// autoPauseMemory true) is hibernated when its timeout passes, and its
// resume brings its processes back.
func TestHibernate_TimeoutHibernates(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, Timeout: time.Minute,
		Lifecycle: service.Lifecycle{PauseOnTimeout: true, TimeoutPause: service.PauseHibernate}})
	if err != nil {
		t.Fatal(err)
	}
	pid := workload(t, h, c.ID)
	waitCounter(t, h, c.ID, 2)
	h.clock.Advance(2 * time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("Reap = %d, %v; want 0 destroyed", n, err)
	}
	wantHibernated(t, h, c.ID)
	r, err := h.svc.Resume(ctx, admin, c.ID)
	if err != nil || r.ProcessesRestarted {
		t.Fatalf("Resume = %+v, %v; want its processes kept", r, err)
	}
	if res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "kill -0 " + pid + " && echo alive"}); err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the counter's process after resume: %q, %v", res.Stdout, err)
	}
	destroyLeavesNothing(t, h, c.ID)
}

// TestLifecycle_TimeoutPauseKinds: on a runtime that cannot checkpoint
// (Docker), TimeoutPause hibernate freezes the sandbox at its timeout, as
// a plain PauseOnTimeout does (--pause-max frees it later); TimeoutPause
// stop stops it, keeping its file system. A kind without PauseOnTimeout,
// or an unknown one, is refused.
func TestLifecycle_TimeoutPauseKinds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{hibernate: true})
	ctx := t.Context()
	want := map[service.PauseKind]service.State{service.PauseHibernate: service.StatePaused, service.PauseStop: service.StateStopped}
	ids := map[service.PauseKind]string{}
	for kind := range want {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Minute,
			Lifecycle: service.Lifecycle{PauseOnTimeout: true, TimeoutPause: kind}})
		if err != nil {
			t.Fatal(err)
		}
		if c.Lifecycle.TimeoutPause != kind {
			t.Errorf("created with %q: %+v", kind, c.Lifecycle)
		}
		ids[kind] = c.ID
	}
	h.clock.Advance(2 * time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("Reap = %d, %v; want 0 destroyed", n, err)
	}
	for kind, id := range ids {
		if sb := state(t, h, id); sb.State != want[kind] || !sb.HibernatedAt.IsZero() {
			t.Errorf("%q after its timeout: %s (hibernated at %v), want %s", kind, sb.State, sb.HibernatedAt, want[kind])
		}
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []service.Lifecycle{{TimeoutPause: service.PauseStop}, {PauseOnTimeout: true, TimeoutPause: "later"}} {
		if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Lifecycle: l}); !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("create with %+v = %v, want invalid", l, err)
		}
	}
	h.assertNothingLeft(t)
}
