package clientconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/clientconf"
)

// A token of ours, and another.
var (
	realToken    = "sbx_a11ce000_" + strings.Repeat("0f", 32)
	plantedToken = "sbx_badbad00_" + strings.Repeat("e1", 32)
)

// walkTree is a user's tree: home/.sandboxd/admin.token holds realToken
// (the user's own checkout is home here), and home/clone is a checkout
// the test plants files in. It returns home and clone.
func walkTree(t *testing.T) (home, clone string) {
	t.Helper()
	home = t.TempDir()
	clone = filepath.Join(home, "clone")
	for _, d := range []string{filepath.Join(home, ".sandboxd"), filepath.Join(clone, ".sandboxd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".sandboxd", "admin.token"), []byte(realToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return home, clone
}

// resolveIn resolves with no flags from wd, with HOME and SBX_API_URL as
// given ("" for none), failing the test if it does not return within 10 s
// (a FIFO would hang it).
func resolveIn(t *testing.T, wd, home, apiURL string) clientconf.Config {
	t.Helper()
	env := clientconf.Env{
		Getenv: func(k string) string {
			switch k {
			case "HOME":
				return home
			case "SBX_API_URL":
				return apiURL
			}
			return ""
		},
		Getwd: func() (string, error) { return wd, nil },
	}
	type res struct {
		c   clientconf.Config
		err error
	}
	done := make(chan res, 1)
	go func() { c, err := clientconf.Resolve(clientconf.Flags{}, env); done <- res{c, err} }()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Resolve from %s: %v", wd, r.err)
		}
		return r.c
	case <-time.After(10 * time.Second):
		t.Fatalf("Resolve from %s still blocked after 10 s", wd)
		return clientconf.Config{}
	}
}

// TestResolve_WalkedTokenFileIsTrustedOnlyWhenItIsTheUsers: a checkout's
// .sandboxd/admin.token that is a symlink (to any secret), a FIFO, a
// file over 4 KiB, a file that holds no token of ours, or another user's
// file is skipped, and the walk goes on to the user's own token above it.
func TestResolve_WalkedTokenFileIsTrustedOnlyWhenItIsTheUsers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"a symlink to another secret", func(t *testing.T, path string) {
			secret := filepath.Join(t.TempDir(), "git-credentials")
			if err := os.WriteFile(secret, []byte(plantedToken), 0o600); err != nil { // even one that parses
				t.Fatal(err)
			}
			if err := os.Symlink(secret, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symlink to /dev/zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file over 4 KiB", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(plantedToken+strings.Repeat(" ", 5000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"not a token of ours", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("https://alice:ghp_SECRET@github.com\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"another user's file", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			if err := os.WriteFile(path, []byte(plantedToken), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, clone := walkTree(t)
			tc.plant(t, filepath.Join(clone, ".sandboxd", "admin.token"))
			if got := resolveIn(t, clone, home, "").Token; got != realToken {
				t.Errorf("token %q, want the user's own from %s", got, home)
			}
		})
	}
}

// TestResolve_WalkedTokenOnlyForLoopback: a checkout's token goes only to
// a daemon on loopback (the one `make run` started), never to a URL
// elsewhere.
func TestResolve_WalkedTokenOnlyForLoopback(t *testing.T) {
	home, clone := walkTree(t)
	for url, want := range map[string]string{
		"":                              realToken, // the default, 127.0.0.1
		"http://localhost:7070":         realToken,
		"http://[::1]:7070":             realToken,
		"https://sandboxes.example.net": "",
		"http://10.0.0.5:7070":          "",
	} {
		if got := resolveIn(t, clone, home, url).Token; got != want {
			t.Errorf("SBX_API_URL %q: token %q, want %q", url, got, want)
		}
	}
}

// TestResolve_WalkStopsAtHome: inside $HOME the walk does not look above
// it (a token file planted in a shared parent is not the user's).
func TestResolve_WalkStopsAtHome(t *testing.T) {
	parent, _ := walkTree(t) // parent/.sandboxd/admin.token: above the home below
	home := filepath.Join(parent, "clone")
	wd := filepath.Join(home, "src", "project")
	if err := os.MkdirAll(wd, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := resolveIn(t, wd, home, "").Token; got != "" {
		t.Errorf("token %q found above $HOME, want none", got)
	}
	if err := os.WriteFile(filepath.Join(home, ".sandboxd", "admin.token"), []byte(plantedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := resolveIn(t, wd, home, "").Token; got != plantedToken {
		t.Errorf("token %q, want the one in $HOME/.sandboxd", got)
	}
}
