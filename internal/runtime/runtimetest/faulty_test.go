package runtimetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// recorder is the smallest runtime.Runtime Faulty can wrap: it records the
// calls that reach it. Methods it does not override panic (nil interface).
type recorder struct {
	runtime.Runtime
	created []string
}

func (r *recorder) Create(_ context.Context, s runtime.Spec) (runtime.Instance, error) {
	r.created = append(r.created, s.SandboxID)
	return runtime.Instance{SandboxID: s.SandboxID, State: runtime.StateRunning}, nil
}

func (r *recorder) Destroy(context.Context, string) error { return nil }

func TestFaulty_Before(t *testing.T) {
	rec := &recorder{}
	f := runtimetest.NewFaulty(rec)
	boom := errors.New("boom")
	f.Inject(runtimetest.Create, runtimetest.Fault{Err: boom})
	if _, err := f.Create(t.Context(), runtime.Spec{SandboxID: "a"}); !errors.Is(err, boom) {
		t.Fatalf("Create = %v, want boom", err)
	}
	if len(rec.created) != 0 {
		t.Errorf("wrapped Create ran %v; a before-fault must not call it", rec.created)
	}
	if err := f.Destroy(t.Context(), "a"); err != nil {
		t.Errorf("Destroy (no fault) = %v", err)
	}
	f.Clear(runtimetest.Create)
	if _, err := f.Create(t.Context(), runtime.Spec{SandboxID: "b"}); err != nil {
		t.Errorf("Create after Clear = %v", err)
	}
	if got := f.Calls(runtimetest.Create); got != 2 {
		t.Errorf("Calls(Create) = %d, want 2", got)
	}
}

func TestFaulty_AfterAndTimes(t *testing.T) {
	rec := &recorder{}
	f := runtimetest.NewFaulty(rec)
	lost := errors.New("answer lost")
	f.Inject(runtimetest.Create, runtimetest.Fault{Err: lost, After: true, Times: 1})
	inst, err := f.Create(t.Context(), runtime.Spec{SandboxID: "a"})
	if !errors.Is(err, lost) || inst != (runtime.Instance{}) {
		t.Fatalf("Create = %+v, %v; want zero, answer lost", inst, err)
	}
	if len(rec.created) != 1 {
		t.Errorf("wrapped Create calls = %v, want one (an after-fault runs it)", rec.created)
	}
	if _, err := f.Create(t.Context(), runtime.Spec{SandboxID: "b"}); err != nil {
		t.Errorf("second Create = %v; a Times:1 fault fires once", err)
	}
}
