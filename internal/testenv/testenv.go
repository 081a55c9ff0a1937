// Package testenv says what a test may count on from the machine it runs
// on, so that every package decides the same way:
//
//   - `go test -short` (make test-unit) runs only tests that need no
//     engine; a test that needs Docker skips.
//   - Outside CI, a test that needs Docker skips, saying why, when no
//     engine answers.
//   - In CI (CI set), a test that needs Docker and finds no engine fails:
//     a suite that silently runs nothing is not green.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

var docker = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run()
})

// CI reports whether the tests run in CI (the CI variable is set).
func CI() bool { return os.Getenv("CI") != "" }

// Short reports whether this is a unit-only run (go test -short). Unlike
// testing.Short it is safe to call from TestMain before m.Run.
func Short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

// HasDocker reports whether tests that need a Docker engine will run:
// not under -short, and an engine answers (or CI is set, in which case the
// tests run and fail loudly). TestMain uses it to skip engine-only setup.
func HasDocker() bool {
	if Short() {
		return false
	}
	return docker() == nil || CI()
}

// NeedsDocker skips t under -short, skips it outside CI when no engine
// answers, and fails it in CI when no engine answers.
func NeedsDocker(t testing.TB) {
	t.Helper()
	if Short() {
		t.Skip("needs a Docker engine (skipped under -short)")
	}
	if err := docker(); err != nil {
		if CI() {
			t.Fatalf("needs a Docker engine and none answers (docker info: %v): run make setup", err)
		}
		t.Skipf("SKIP: needs a Docker engine and none answers (docker info: %v): run make setup", err)
	}
}

// Deadline is how long a test waits for something asynchronous to
// happen. It is generous on purpose: on a loaded machine a condition that
// takes 50 ms on a laptop can take seconds, and a wait that is too short
// is a flaky test, while one that is long only costs time when the test
// fails anyway.
const Deadline = 60 * time.Second

// pollInterval is the pause between two checks of a condition.
const pollInterval = 25 * time.Millisecond

// WaitFor polls cond until it returns nil and fails t, with what and the
// last error cond returned, when Deadline passes or t's context ends
// first. It is the way to wait for an asynchronous effect: never sleep a
// fixed time and hope.
func WaitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := Poll(t.Context(), Deadline, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Poll calls cond every few milliseconds until it returns nil, ctx ends or
// timeout passes; it returns nil once cond did, or cond's last error.
func Poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v: %w)", err, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}
