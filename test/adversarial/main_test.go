// Package adversarial_test attacks a real sandboxd from inside its own
// sandboxes and from the host, the way a hostile tenant would: every test
// starts real daemons (daemontest) on a real Docker engine, performs one
// attack for real, and asserts that the daemon, the host and the other
// tenants are unharmed (the daemon's resident memory stays bounded,
// another tenant's sandbox keeps answering) and that nothing is left
// behind.
//
// Without a reachable Docker engine the tests skip, unless CI is set, in
// which case they fail.
package adversarial_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Images built by scripts/build-images.sh.
const (
	busyboxImage = "sandboxd/busybox:latest"
	baseImage    = "sandboxd/base:bookworm"
)

var env struct {
	dt        *daemontest.Env
	dockerErr error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run() // tests skip one by one
	}
	env.dockerErr = daemontest.PingDocker(busyboxImage, baseImage)
	if env.dockerErr != nil && !testenv.CI() {
		return m.Run()
	}
	var err error
	// Host ports 46000 and up: test/e2e uses the ranges below.
	if env.dt, err = daemontest.Setup("adv", 46000); err != nil {
		fmt.Fprintln(os.Stderr, "adversarial:", err)
		return 1
	}
	code := testenv.Exit(m.Run())
	env.dt.Close(code != 0)
	return code
}

// startDaemon starts a daemon of t's own, closed (its containers removed)
// at the end of t, with the tail of its log on failure.
func startDaemon(t *testing.T, name string, extraArgs ...string) *daemontest.Daemon {
	t.Helper()
	requireDocker(t)
	return env.dt.Start(t, name, extraArgs...)
}

// requireDocker skips t (fails it in CI) without a usable Docker engine.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedsDocker(t)
	if env.dockerErr != nil {
		if !testenv.CI() {
			t.Skipf("skipping: Docker is unreachable (%v)", env.dockerErr)
		}
		t.Fatalf("Docker is unreachable and CI is set: %v", env.dockerErr)
	}
}

// adminClient is a Go SDK client of d with its admin token.
func adminClient(d *daemontest.Daemon) *sandboxd.Client {
	return sandboxd.New(d.URL(), d.Token())
}

// testContext returns t's context bounded by d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
