package service_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// The lifecycle rules (rules.go), each applied by ApplyLifecycle at the
// harness's injected clock: no test sleeps.

func applied(t *testing.T, h *harness, want service.LifecycleApplied) {
	t.Helper()
	got, err := h.svc.ApplyLifecycle(t.Context())
	if err != nil || got != want {
		t.Fatalf("ApplyLifecycle = %+v, %v; want %+v", got, err, want)
	}
}

func state(t *testing.T, h *harness, id string) service.Sandbox {
	t.Helper()
	sb, err := h.svc.Get(t.Context(), admin, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

// TestLifecycle_AutoStopAfterIdle: a running sandbox idle for its
// auto-stop is stopped (container exited, capacity released, files kept);
// activity (Touch, a change of its rules, a start) starts its idle time
// again.
func TestLifecycle_AutoStopAfterIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox,
		Lifecycle: service.Lifecycle{AutoStop: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Lifecycle.AutoStop != 10*time.Minute || !c.LastActivityAt.Equal(h.clock.Now().Truncate(time.Millisecond)) {
		t.Errorf("created: rules %+v, last activity %v (now %v)", c.Lifecycle, c.LastActivityAt, h.clock.Now())
	}
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo kept > /kept"}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(9 * time.Minute)
	applied(t, h, service.LifecycleApplied{})
	// Activity at 9 min: the sandbox now idles until 19.
	if err := h.svc.Touch(ctx, state(t, h, c.ID)); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(9 * time.Minute)
	applied(t, h, service.LifecycleApplied{})
	// A change of its rules is activity too: idle until 18 + 5 = 23.
	if _, err := h.svc.UpdateSandbox(ctx, admin, c.ID, service.Update{Lifecycle: &service.Lifecycle{AutoStop: 5 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(4 * time.Minute)
	applied(t, h, service.LifecycleApplied{})
	h.clock.Advance(time.Minute)
	applied(t, h, service.LifecycleApplied{Stopped: 1})

	sb := state(t, h, c.ID)
	if sb.State != service.StateStopped || sb.StoppedAt.IsZero() {
		t.Fatalf("after its auto-stop: %s, stopped at %v; want stopped", sb.State, sb.StoppedAt)
	}
	if st, _ := h.rt.Inspect(ctx, c.ID); st.State != runtime.StateExited {
		t.Errorf("container after the auto-stop: %+v, want exited", st)
	}
	if used, _ := h.adm.Usage(); used.MemoryMB != 0 {
		t.Errorf("capacity after the auto-stop = %+v, want released", used)
	}
	// A start is activity: a full auto-stop from now.
	if _, err := h.svc.Start(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "cat /kept"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Errorf("file system after the auto-stop = %q, %v", res.Stdout, err)
	}
	h.clock.Advance(4 * time.Minute)
	applied(t, h, service.LifecycleApplied{})
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestLifecycle_AutoDelete: a stopped sandbox is destroyed its auto-delete
// after its stop, not before; with DeleteOnStop the stop itself destroys it,
// and an idle one with DeleteOnStop goes in the same pass as its
// auto-stop. A sandbox started again in time is kept.
func TestLifecycle_AutoDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	create := func(l service.Lifecycle) string {
		t.Helper()
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Lifecycle: l})
		if err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	gone := func(id string) bool {
		_, err := h.svc.Get(ctx, admin, id)
		return errors.Is(err, service.ErrNotFound)
	}

	later := create(service.Lifecycle{AutoDelete: 5 * time.Minute})
	kept := create(service.Lifecycle{AutoDelete: 5 * time.Minute})
	atStop := create(service.Lifecycle{DeleteOnStop: true})
	idle := create(service.Lifecycle{AutoStop: time.Minute, DeleteOnStop: true})
	for _, id := range []string{later, kept} {
		if _, err := h.svc.Stop(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := h.svc.Stop(ctx, admin, atStop)
	if err != nil || sb.State != service.StateStopped || !gone(atStop) {
		t.Fatalf("stop with DeleteOnStop: %s, %v, gone %v; want its last view (stopped), then gone", sb.State, err, gone(atStop))
	}

	h.clock.Advance(4 * time.Minute)
	if _, err := h.svc.Start(ctx, admin, kept); err != nil {
		t.Fatal(err)
	}
	// The idle one stops and goes in one pass; the 5-minute one waits.
	applied(t, h, service.LifecycleApplied{Stopped: 1, Deleted: 1})
	if !gone(idle) || gone(later) {
		t.Fatalf("after 4 min: idle gone %v (want true), auto-delete 5 gone %v (want false)", gone(idle), gone(later))
	}
	h.clock.Advance(time.Minute)
	applied(t, h, service.LifecycleApplied{Deleted: 1})
	if !gone(later) || gone(kept) {
		t.Errorf("after 5 min: stopped gone %v (want true), started again gone %v (want false)", gone(later), gone(kept))
	}
	if err := h.svc.Destroy(ctx, admin, kept); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestLifecycle_AutoArchive: a stopped sandbox is archived its
// auto-archive after its stop; Archive stops and marks a running one at
// once; a start clears the mark.
func TestLifecycle_AutoArchive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	var ids []string
	for range 2 {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox,
			Lifecycle: service.Lifecycle{AutoArchive: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	auto, onRequest := ids[0], ids[1]
	if _, err := h.svc.Stop(ctx, admin, auto); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(59 * time.Minute)
	applied(t, h, service.LifecycleApplied{})
	if sb := state(t, h, auto); !sb.ArchivedAt.IsZero() {
		t.Fatalf("archived before its auto-archive: %v", sb.ArchivedAt)
	}
	h.clock.Advance(time.Minute)
	applied(t, h, service.LifecycleApplied{Archived: 1})
	if sb := state(t, h, auto); sb.State != service.StateStopped || sb.ArchivedAt.IsZero() {
		t.Fatalf("after its auto-archive: %s, archived at %v", sb.State, sb.ArchivedAt)
	}

	sb, err := h.svc.Archive(ctx, admin, onRequest)
	if err != nil || sb.State != service.StateStopped || sb.ArchivedAt.IsZero() {
		t.Fatalf("Archive of a running sandbox = %s, archived at %v, %v; want stopped and archived", sb.State, sb.ArchivedAt, err)
	}
	if again, err := h.svc.Archive(ctx, admin, onRequest); err != nil || !again.ArchivedAt.Equal(sb.ArchivedAt) {
		t.Errorf("Archive again = %v, %v; want unchanged", again.ArchivedAt, err)
	}
	for _, id := range ids {
		sb, err := h.svc.Start(ctx, admin, id)
		if err != nil || !sb.ArchivedAt.IsZero() || !sb.StoppedAt.IsZero() {
			t.Errorf("start of an archived sandbox: archived %v, stopped %v, %v; want both cleared", sb.ArchivedAt, sb.StoppedAt, err)
		}
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	h.assertNothingLeft(t)
}

// TestLifecycle_PauseOnTimeout: Lifecycle.PauseOnTimeout (E2B's autoPause)
// makes the timeout pause the sandbox instead of destroying it.
func TestLifecycle_PauseOnTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Minute,
		Lifecycle: service.Lifecycle{PauseOnTimeout: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Lifecycle.PauseOnTimeout || !c.PauseOnTimeout {
		t.Errorf("created: %+v, PauseOnTimeout %v", c.Lifecycle, c.PauseOnTimeout)
	}
	h.clock.Advance(2 * time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("Reap = %d, %v; want 0 destroyed", n, err)
	}
	if sb := state(t, h, c.ID); sb.State != service.StatePaused {
		t.Errorf("after its timeout: %s, want paused", sb.State)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestLifecycle_Validate: rules out of bounds are a field error naming
// the native API's field.
func TestLifecycle_Validate(t *testing.T) {
	for _, tc := range []struct {
		l     service.Lifecycle
		field string
	}{
		{service.Lifecycle{AutoStop: -time.Second}, "lifecycle.auto_stop_s"},
		{service.Lifecycle{AutoStop: 8 * 24 * time.Hour}, "lifecycle.auto_stop_s"},
		{service.Lifecycle{AutoDelete: -time.Second}, "lifecycle.auto_delete_s"},
		{service.Lifecycle{AutoDelete: time.Minute, DeleteOnStop: true}, "lifecycle.auto_delete_s"},
		{service.Lifecycle{AutoArchive: 31 * 24 * time.Hour}, "lifecycle.auto_archive_s"},
	} {
		var fe *service.FieldError
		if err := tc.l.Validate(); !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("Validate(%+v) = %v; want a field error on %s", tc.l, err, tc.field)
		}
	}
	ok := service.Lifecycle{AutoStop: time.Minute, DeleteOnStop: true, AutoArchive: service.MaxAutoArchive, PauseOnTimeout: true}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}
