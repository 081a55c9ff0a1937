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
