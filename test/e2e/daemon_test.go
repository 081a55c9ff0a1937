package e2e_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// daemonProcess is one sandboxd child process (see daemontest.Daemon).
type daemonProcess = daemontest.Daemon

// newDaemon prepares (but does not start) a daemon whose node id contains
// name. extraArgs are appended to the daemon's flags.
func newDaemon(name string, extraArgs ...string) *daemonProcess {
	return env.dt.New(name, extraArgs...)
}

// startDaemon starts a daemon of t's own and arranges for Close at the end
// of t, with the tail of its log on failure.
func startDaemon(t *testing.T, name string, extraArgs ...string) *daemonProcess {
	t.Helper()
	requireDocker(t)
	return env.dt.Start(t, name, extraArgs...)
}

// hermeticEnv is this process's environment without the variables the
// daemon and the CLI read.
func hermeticEnv() []string { return daemontest.HermeticEnv() }
