package daemon

import (
	"strings"
	"testing"
)

// TestSocketRoot_RevealsNothingOfTheDataDir: the socket root, whose
// subdirectories sandboxes see the paths of, names no part of the data
// directory, is the same for the same data directory and differs between
// daemons.
func TestSocketRoot_RevealsNothingOfTheDataDir(t *testing.T) {
	const dataDir = "/var/lib/sandboxd-secret-name"
	got := socketRoot(dataDir)
	for _, part := range []string{"var/lib", "secret"} {
		if strings.Contains(got, part) {
			t.Errorf("socketRoot(%q) = %q: shows %q", dataDir, got, part)
		}
	}
	if again := socketRoot(dataDir); again != got {
		t.Errorf("socketRoot is not stable: %q then %q", got, again)
	}
	if other := socketRoot(dataDir + "2"); other == got {
		t.Errorf("two data directories share the socket root %q", got)
	}
	if n := len(got) + len("/sb-0123456789abcdef/agent.sock"); n >= 108 {
		t.Errorf("socket paths under %q are %d bytes, over the unix limit", got, n)
	}
}
