package service_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// A destroy while the engine does not answer is refused as unavailable,
// naming the engine, and changes nothing: the sandbox still reads and
// runs. One whose engine fails after the commit (the check passed, the
// container's destroy did not) succeeds, and the reconciler finishes it.
func TestDestroy_EngineOutageIsAllOrNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}

	h.rt.Inject(runtimetest.Inspect, runtimetest.Fault{Err: errors.New("engine: connection refused")})
	err = h.svc.Destroy(ctx, admin, sb.ID)
	if !errors.Is(err, service.ErrUnavailable) || service.UnavailableReason(err) != service.ReasonEngineUnreachable {
		t.Fatalf("destroy while the engine does not answer: %v, want ErrUnavailable naming the engine", err)
	}
	h.rt.Clear(runtimetest.Inspect)
	if got, err := h.svc.Get(ctx, admin, sb.ID); err != nil || got.State != service.StateRunning {
		t.Fatalf("after the refused destroy: %+v, %v; want it running", got, err)
	}
	if res, err := h.svc.Exec(ctx, admin, sb.ID, service.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the refused destroy: %+v, %v", res, err)
	}

	h.rt.Inject(runtimetest.Destroy, runtimetest.Fault{Err: errors.New("engine: connection reset"), Times: 1})
	if err := h.svc.Destroy(ctx, admin, sb.ID); err != nil {
		t.Fatalf("destroy whose engine failed after the commit: %v, want nil", err)
	}
	if _, err := h.svc.Get(ctx, admin, sb.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("a committed destroy still reads: %v", err)
	}
	h.clock.Advance(2 * time.Minute) // past the grace of a destroy in progress
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}
