package testenv_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestPoll_ReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	err := testenv.Poll(t.Context(), time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("Poll: %v after %d calls, want nil after 3", err, n)
	}
}

func TestPoll_TimeoutKeepsTheLastError(t *testing.T) {
	errNo := errors.New("never")
	err := testenv.Poll(t.Context(), 50*time.Millisecond, func() error { return errNo })
	if !errors.Is(err, errNo) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Poll: %v, want the condition's error and the deadline", err)
	}
}

func TestRemoveNode_RemovesOnlyThatNode(t *testing.T) {
	testenv.NeedsDocker(t)
	node := "testenv-" + time.Now().Format("150405.000000000")
	other := node + "-other"
	for _, n := range []string{node, other} {
		out, err := exec.CommandContext(t.Context(), "docker", "create", "--label", "sandboxd.node="+n, "sandboxd/busybox:latest", "true").CombinedOutput()
		if err != nil {
			t.Fatalf("docker create: %v: %s", err, out)
		}
	}
	t.Cleanup(func() { testenv.RemoveNode(context.Background(), other) })
	removed, err := testenv.RemoveNode(t.Context(), node)
	if err != nil || len(removed) != 1 {
		t.Fatalf("RemoveNode: %v, %q; want one container removed", err, removed)
	}
	for n, want := range map[string]int{node: 0, other: 1} {
		if got, err := testenv.NodeContainers(t.Context(), n); err != nil || len(got) != want {
			t.Errorf("NodeContainers(%s): %v, %q; want %d", n, err, got, want)
		}
	}
}
