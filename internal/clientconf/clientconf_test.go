package clientconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/clientconf"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestResolve_Precedence: flags, then the environment, then the files,
// for the URL and the token alike.
func TestResolve_Precedence(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(filepath.Join(root, ".sandboxd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fromCheckout := "sbx_c0ffee00_" + strings.Repeat("ab", 32) // a checkout's file must hold one of our tokens
	write(filepath.Join(root, ".sandboxd", "admin.token"), fromCheckout+"\n")
	dataDir := t.TempDir()
	write(filepath.Join(dataDir, "admin.token"), "from-data-dir\n")
	file := filepath.Join(t.TempDir(), "tok")
	write(file, " from-file \n")

	for _, tc := range []struct {
		name  string
		flags clientconf.Flags
		env   map[string]string
		wd    string
		want  clientconf.Config
	}{
		{"defaults: the nearest checkout", clientconf.Flags{}, nil, deep, clientconf.Config{URL: sandboxd.DefaultBaseURL, Token: fromCheckout}},
		{"no checkout: no token", clientconf.Flags{}, nil, t.TempDir(), clientconf.Config{URL: sandboxd.DefaultBaseURL}},
		{"SBX_DATA_DIR before the checkout", clientconf.Flags{}, map[string]string{"SBX_DATA_DIR": dataDir}, deep, clientconf.Config{URL: sandboxd.DefaultBaseURL, Token: "from-data-dir"}},
		{"SBX_TOKEN before SBX_DATA_DIR", clientconf.Flags{}, map[string]string{"SBX_TOKEN": "from-env", "SBX_DATA_DIR": dataDir}, deep, clientconf.Config{URL: sandboxd.DefaultBaseURL, Token: "from-env"}},
		{"--token-file before SBX_TOKEN", clientconf.Flags{TokenFile: file}, map[string]string{"SBX_TOKEN": "from-env"}, deep, clientconf.Config{URL: sandboxd.DefaultBaseURL, Token: "from-file"}},
		{"SBX_API_URL", clientconf.Flags{}, map[string]string{"SBX_API_URL": "http://127.0.0.1:1"}, deep, clientconf.Config{URL: "http://127.0.0.1:1", Token: fromCheckout}},
		{"--url before SBX_API_URL", clientconf.Flags{URL: "http://127.0.0.1:2"}, map[string]string{"SBX_API_URL": "http://127.0.0.1:1"}, deep, clientconf.Config{URL: "http://127.0.0.1:2", Token: fromCheckout}},
	} {
		got, err := clientconf.Resolve(tc.flags, clientconf.Env{
			Getenv: func(k string) string { return tc.env[k] },
			Getwd:  func() (string, error) { return tc.wd, nil },
		})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: (-want +got)\n%s", tc.name, d)
		}
	}
}

// TestResolve_Errors: a --token-file that is missing or empty is an
// error (it was asked for); an unreadable SBX_DATA_DIR token too.
func TestResolve_Errors(t *testing.T) {
	env := clientconf.Env{Getenv: func(string) string { return "" }, Getwd: os.Getwd}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(t.TempDir(), "missing"), empty} {
		if _, err := clientconf.Resolve(clientconf.Flags{TokenFile: f}, env); err == nil {
			t.Errorf("--token-file %s: no error", f)
		}
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "admin.token"), 0o700); err != nil { // a directory: unreadable as a file
		t.Fatal(err)
	}
	env.Getenv = func(k string) string {
		if k == "SBX_DATA_DIR" {
			return dir
		}
		return ""
	}
	if _, err := clientconf.Resolve(clientconf.Flags{}, env); err == nil {
		t.Error("an unreadable $SBX_DATA_DIR/admin.token: no error")
	}
}
