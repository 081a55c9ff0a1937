// Package conformance_test runs one table of cases through the daemon's
// three APIs — the native /v1, the E2B facade and the Daytona facade —
// against one real sandboxd (a child process on 127.0.0.1, built from this
// checkout by daemontest) on the real Docker engine, over plain net/http
// and, for E2B's envd endpoints, the repository's generated Connect
// clients.
//
// A case is written once (cases_test.go) in terms of what a client does:
// create, get, list, stop, start, delete, upload, download, list a
// directory, run a command. Each API has one small adapter (native_test.go,
// e2b_test.go, daytona_test.go) that says those things on its wire, reads
// the answer in its wire's shape, and turns an error body into the class
// of the edges' one error table (package apierr), after checking that the
// body is exactly that wire's shape. A difference between the wires that
// is not a bug is written down in the case, with its reason; anything
// else fails the case.
//
// The daemon is shared by every case and each wire makes one sandbox for
// the whole table (its retried keyed create must make no second one), the
// wires side by side, so the package adds well under a minute to make
// test (10-35 s here). Under -short (make test-unit), or without a Docker
// engine outside CI, every test skips and nothing is built.
package conformance_test

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

// image is what every wire's sandboxes run: the Daytona facade runs
// commands with /bin/bash, which the busybox image lacks.
const image = "sandboxd/base:bookworm"

var env struct {
	dt        *daemontest.Env
	dockerErr error

	once   sync.Once
	daemon *daemontest.Daemon
	err    error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run() // tests skip one by one (needDaemon)
	}
	env.dockerErr = daemontest.PingDocker(image)
	if env.dockerErr != nil && !testenv.CI() {
		return m.Run()
	}
	var err error
	// Host ports 54000 and up: test/e2e, test/adversarial and test/cluster
	// use the ranges below.
	if env.dt, err = daemontest.Setup("conf", 54000); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 1
	}
	code := m.Run()
	if env.daemon != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// The engine's containers of the node, or under --engine oci
		// every trace of its sandboxes.
		left, err := env.daemon.Leftovers(ctx, nil)
		cancel()
		if err != nil || len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: conformance: the cases left %d sandbox trace(s) (node %s): %v\n\t%s\n",
				len(left), env.daemon.NodeID(), err, strings.Join(left, "\n\t"))
			code = 1
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "daemon log (tail):\n%s\n", env.daemon.LogTail(60))
		}
		if err := env.daemon.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: daemon cleanup:", err)
			code = 1
		}
	}
	code = testenv.Exit(code)
	env.dt.Close(code != 0)
	return code
}

// needDaemon returns the daemon every case shares, starting it on first
// use; it skips t under -short or without an engine (outside CI).
func needDaemon(t *testing.T) *daemontest.Daemon {
	t.Helper()
	testenv.NeedsDocker(t)
	if env.dockerErr != nil {
		if !testenv.CI() {
			t.Skipf("skipping: %v", env.dockerErr)
		}
		t.Fatalf("Docker is unreachable and CI is set: %v", env.dockerErr)
	}
	env.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), daemontest.StartTimeout)
		defer cancel()
		// A budget past the default (4 × cores) so that the wires' creates
		// never wait on each other's reservations.
		env.daemon = env.dt.New("shared", "--cpu-budget", "64000")
		env.err = env.daemon.Start(ctx)
	})
	if env.err != nil {
		t.Fatalf("start daemon: %v\nlog:\n%s", env.err, env.daemon.LogTail(40))
	}
	return env.daemon
}
