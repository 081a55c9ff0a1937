package service_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestHibernate_ResumeSaysConnectionsClosed: the resume of a hibernated
// sandbox answers ConnectionsClosed (the checkpoint cannot keep
// connections from outside), and so does its event; a thaw's answer and
// event do not.
func TestHibernate_ResumeSaysConnectionsClosed(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	sub, err := h.svc.Subscribe("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sb := createGVisor(t, h)
	resumeEvent := func() service.Event {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ev := <-sub.Events():
				if ev.Sandbox.ID == sb.ID && ev.OldState == service.StatePaused && ev.Sandbox.State == service.StateRunning {
					return ev
				}
			case <-deadline:
				t.Fatal("no resume event")
			}
		}
	}

	if _, err := h.svc.Pause(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := h.svc.Resume(ctx, admin, sb.ID); err != nil || r.ConnectionsClosed {
		t.Errorf("Resume after a pause = %+v, %v; want its connections kept", r, err)
	}
	if ev := resumeEvent(); ev.ConnectionsClosed {
		t.Errorf("the thaw's event says its connections closed")
	}

	if _, err := h.svc.Hibernate(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	r, err := h.svc.Resume(ctx, admin, sb.ID)
	if err != nil || !r.ConnectionsClosed || r.ProcessesRestarted {
		t.Errorf("Resume after a hibernate = %+v, %v; want processes kept and connections closed", r, err)
	}
	if ev := resumeEvent(); !ev.ConnectionsClosed {
		t.Errorf("the restore's event does not say its connections closed")
	}
	destroyLeavesNothing(t, h, sb.ID)
}
