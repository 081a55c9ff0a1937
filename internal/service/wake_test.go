package service_test

import (
	"errors"
	"testing"

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
	if err := h.svc.Destroy(ctx, admin, a.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}
