package operator_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_OperatorAndDaemonApart: the daemon's wiring does not link the
// operator's commands, and the commands do not link the daemon.
func TestDeps_OperatorAndDaemonApart(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	const mod = "github.com/sandboxd/sandboxd/internal/"
	for _, c := range []struct{ pkg, never string }{
		{mod + "daemon", mod + "operator"},
		{mod + "operator", mod + "daemon"},
	} {
		out, err := exec.Command(goBin, "list", "-deps", c.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", c.pkg, err)
		}
		if !strings.Contains(string(out), mod+"store\n") {
			t.Fatalf("go list -deps %s does not list internal/store; is the list right?\n%s", c.pkg, out)
		}
		for dep := range strings.Lines(string(out)) {
			if strings.TrimSpace(dep) == c.never {
				t.Errorf("%s links %s", c.pkg, c.never)
			}
		}
	}
}
