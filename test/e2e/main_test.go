// Package e2e_test drives the built binaries end to end: a real sandboxd
// (a child process on 127.0.0.1 with its own data directory and node id), a
// real Docker engine, the Go SDK over real HTTP, and the sbx binary (under a
// pseudo-terminal for `sbx shell`).
//
// TestMain builds (daemontest.Setup) bin/sandboxd, bin/toolboxd and bin/sbx from this checkout
// into a temporary directory. Tests share one daemon where they can
// (sharedDaemon); a test that kills its daemon starts its own. Every daemon
// is killed at the end and every container it labelled with its node id is
// removed, whatever the outcome.
//
// Without a reachable Docker engine the tests skip, unless CI is set, in
// which case they fail: CI machines are expected to have Docker.
package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// Images built by scripts/build-images.sh.
const (
	busyboxImage = "sandboxd/busybox:latest"
	baseImage    = "sandboxd/base:bookworm"
)

// env is what TestMain prepared for every test.
var env struct {
	dt        *daemontest.Env
	dockerErr error // non-nil when Docker is unreachable

	sharedOnce sync.Once
	shared     *daemonProcess
	sharedErr  error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if !testenv.HasDocker() {
		// Tests skip one by one (requireDocker); no point building.
		return m.Run()
	}
	env.dockerErr = daemontest.PingDocker(busyboxImage, baseImage)
	if env.dockerErr != nil && !testenv.CI() {
		return m.Run() // the images are missing: requireDocker skips, saying so
	}
	var err error
	if env.dt, err = daemontest.Setup("e2e", 42000); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	if env.shared != nil {
		// Every test destroys what it made on the shared daemon: a
		// container of its node (under --engine oci, any trace of a
		// sandbox) still there is a leak, which Close's sweep would
		// otherwise hide.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		left, err := env.shared.Leftovers(ctx, nil)
		cancel()
		if err != nil || len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: e2e: the tests left %d sandbox(es) on the shared daemon (node %s): %v\n\t%s\n",
				len(left), env.shared.NodeID(), err, strings.Join(left, "\n\t"))
			code = 1
		}
		if err := env.shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: shared daemon cleanup:", err)
			code = 1
		}
	}
	// Every daemon is closed now: a container of any of their nodes still
	// there is one Close missed (testenv.Exit lists and removes it).
	code = testenv.Exit(code)
	env.dt.Close(code != 0)
	return code
}

// requireDocker skips t under -short or when Docker (or a test image) is
// missing outside CI, and fails it in CI.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedsDocker(t) // skips under -short, and without an engine outside CI
	if env.dockerErr == nil {
		return
	}
	if !testenv.CI() {
		t.Skipf("skipping: Docker is unreachable (%v); these tests need a Docker engine (set CI=1 to make this a failure)", env.dockerErr)
	}
	t.Fatalf("Docker is unreachable and CI is set: %v", env.dockerErr)
}

// sharedDaemon returns the daemon shared by the tests that do not kill
// theirs, starting it on first use. TestMain closes it.
func sharedDaemon(t *testing.T) *daemonProcess {
	t.Helper()
	requireDocker(t)
	env.sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), daemontest.StartTimeout)
		defer cancel()
		env.shared = newDaemon("shared")
		env.sharedErr = env.shared.Start(ctx)
	})
	if env.sharedErr != nil {
		t.Fatalf("start shared daemon: %v\nlog:\n%s", env.sharedErr, env.shared.LogTail(40))
	}
	return env.shared
}

// testContext returns t's context bounded by d: every test has a deadline
// of its own, well inside go test's -timeout.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
