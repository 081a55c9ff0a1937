package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
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
