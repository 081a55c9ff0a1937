package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func logTexts(t *testing.T, h *harness, id string, q service.LogQuery) (string, error) {
	t.Helper()
	var out []string
	calls := 0
	err := h.svc.Logs(t.Context(), admin, id, q, func(ls []service.LogLine) error {
		if calls++; calls == 1 && ls != nil {
			t.Errorf("the first emit has %d lines; want none (the reading has begun)", len(ls))
		}
		for _, l := range ls {
			out = append(out, l.Stream+":"+l.Text)
		}
		return nil
	})
	return strings.Join(out, "|"), err
}

// TestLogs_FromTheAgentAcrossTheLifecycle: a running sandbox's logs come
// from its agent (an exec's lines, the daemon's df probe not among them);
// an unreachable agent is ErrUnavailable; paused is ErrPaused at once,
// follow or not; stopped answers what they held at the stop; started
// again, the agent's new log.
func TestLogs_FromTheAgentAcrossTheLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"echo one; echo two", "echo err >&2"} {
		if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: cmd}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.svc.SandboxUsage(ctx, admin, c.ID); err != nil {
		t.Logf("SandboxUsage: %v", err) // its df must not show in the logs either way
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{}); err != nil || got != "stdout:one|stdout:two|stderr:err" {
		t.Fatalf("running: %q, %v", got, err)
	}

	h.rt.Inject(runtimetest.DialAgent, runtimetest.Fault{Err: errInjected})
	testenv.WaitFor(t, "the logs of a sandbox whose agent cannot be dialled to be ErrUnavailable", func() error {
		if ac, err := h.svc.Agent(ctx, c.ID); err == nil {
			// The cached client's idle connections (one goes back to
			// the pool once its answer was read): the next call dials.
			ac.Close()
		}
		if _, err := logTexts(t, h, c.ID, service.LogQuery{}); !errors.Is(err, service.ErrUnavailable) {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
	h.rt.Clear(runtimetest.DialAgent)

	if _, err := h.svc.Pause(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{false, true} {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := h.svc.Logs(pctx, admin, c.ID, service.LogQuery{Follow: follow}, func([]service.LogLine) error { return nil })
		cancel()
		if !errors.Is(err, service.ErrPaused) {
			t.Errorf("paused (follow %v): %v; want ErrPaused", follow, err)
		}
	}
	if _, err := h.svc.Stop(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{Tail: 1}); err != nil || got != "stderr:err" {
		t.Errorf("stopped, tail 1: %q, %v; want the last line kept at the stop", got, err)
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{Follow: true}); err != nil || got != "stdout:one|stdout:two|stderr:err" {
		t.Errorf("stopped, follow: %q, %v; want the lines kept, then the end", got, err)
	}
	if _, err := h.svc.Start(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo three"}); err != nil {
		t.Fatal(err)
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{}); err != nil || got != "stdout:three" {
		t.Errorf("started again: %q, %v; want the new agent's log", got, err)
	}
	if _, err := logTexts(t, h, c.ID, service.LogQuery{Tail: -1}); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("tail -1: %v; want ErrInvalidArgument", err)
	}
}

// TestLogs_StopUnderMemoryPressureKeepsNoSnapshot: a paused sandbox
// stopped because the host is short of memory is stopped without reading
// its logs (each read of a hung agent held the next stop up by
// stopLogsTimeout): its agent is never dialled.
func TestLogs_StopUnderMemoryPressureKeepsNoSnapshot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{memory: func() (int64, int64, error) { return 10, 1000, nil }})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo before"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Pause(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if ac, err := h.svc.Agent(ctx, c.ID); err == nil {
		ac.Close() // its idle connections: a read would dial
	}
	var dials atomic.Int64
	h.rt.Inject(runtimetest.DialAgent, runtimetest.Fault{Err: errInjected, Hook: func() error { dials.Add(1); return nil }})
	defer h.rt.Clear(runtimetest.DialAgent)
	h.clock.Advance(time.Second)
	if n, err := h.svc.StopPausedUnderPressure(ctx); err != nil || n != 1 {
		t.Fatalf("StopPausedUnderPressure: %d, %v; want 1 stopped", n, err)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the stop under pressure dialled the agent %d times; want none", n)
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{}); err != nil || got != "" {
		t.Errorf("stopped under pressure: %q, %v; want no lines", got, err)
	}
}

// TestLogs_FailedStopKeepsNoSnapshot: a stop that fails leaves no
// snapshot behind: the sandbox runs on, and once it stops by itself it
// answers none, not the lines of the failed stop's time as if kept at its
// stop.
func TestLogs_FailedStopKeepsNoSnapshot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo before-the-failed-stop"}); err != nil {
		t.Fatal(err)
	}
	h.rt.Inject(runtimetest.Stop, runtimetest.Fault{Err: errInjected})
	if _, err := h.svc.Stop(ctx, admin, c.ID); err == nil {
		t.Fatal("the stop did not fail")
	}
	h.rt.Clear(runtimetest.Stop)
	if got, err := logTexts(t, h, c.ID, service.LogQuery{}); err != nil || got != "stdout:before-the-failed-stop" {
		t.Fatalf("after the failed stop: %q, %v; want the agent's lines", got, err)
	}
	if err := h.rt.Stop(ctx, c.ID); err != nil { // it stops by itself
		t.Fatal(err)
	}
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	sb, err := h.svc.Get(ctx, admin, c.ID)
	if err != nil || sb.State == store.StateRunning {
		t.Fatalf("after its container stopped: %+v, %v; want it no longer running", sb.State, err)
	}
	if got, err := logTexts(t, h, c.ID, service.LogQuery{}); err != nil || got != "" {
		t.Errorf("stopped by itself after a failed stop: %q, %v; want no lines", got, err)
	}
}

// TestLogs_FollowEndsWithAFailedDestroy: a follow ends when a destroy of
// its sandbox begins, even one whose teardown fails (the row stays,
// running, marked as being destroyed: the sandbox is gone to callers).
func TestLogs_FollowEndsWithAFailedDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- h.svc.Logs(fctx, admin, c.ID, service.LogQuery{Follow: true}, func([]service.LogLine) error {
			if first {
				first = false
				close(opened)
			}
			return nil
		})
	}()
	select {
	case <-opened:
	case err := <-done:
		t.Fatalf("the follow ended before it began: %v", err)
	}
	h.rt.Inject(runtimetest.Destroy, runtimetest.Fault{Err: errInjected})
	if err := h.svc.Destroy(ctx, admin, c.ID); err == nil {
		t.Log("the destroy did not report its failed teardown")
	}
	h.rt.Clear(runtimetest.Destroy)
	t.Cleanup(func() { _ = h.svc.Reconcile(context.WithoutCancel(ctx), false) })
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the follow ended with %v; want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow was still open 30 s after the destroy began")
	}
}
