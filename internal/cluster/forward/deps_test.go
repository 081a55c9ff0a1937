package forward_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_SeesTheClusterOnlyThroughLocator: the package imports no etcd
// and, of this module, only the naming rules; the cluster reaches it
// through the Locator interface. Test files are not checked.
func TestDeps_SeesTheClusterOnlyThroughLocator(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/sandboxd/sandboxd/internal/cluster/forward").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/sandboxd/sandboxd/internal/naming":          true,
		"github.com/sandboxd/sandboxd/internal/cluster/forward": true,
	}
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		switch {
		case strings.Contains(dep, "etcd"):
			t.Errorf("imports %s: the cluster comes in through Locator", dep)
		case strings.HasPrefix(dep, "github.com/sandboxd/sandboxd/") && !allowed[dep]:
			t.Errorf("imports %s; only internal/naming is allowed", dep)
		case strings.Contains(strings.SplitN(dep, "/", 2)[0], ".") && !strings.HasPrefix(dep, "github.com/sandboxd/sandboxd/"):
			t.Errorf("imports third-party %s; the package is stdlib-only", dep)
		}
	}
}
