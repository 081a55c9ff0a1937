package account_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
)

const passwd = `# comment
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
broken:x:notanumber:1::/nowhere:/bin/sh
user:x:1000:1000::/home/user:/bin/bash
`

func testDirectory(t *testing.T, content string) *account.Directory {
	t.Helper()
	p := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return account.NewDirectory(p)
}

var (
	root = account.User{Name: "root", UID: 0, GID: 0, Home: "/root"}
	user = account.User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
)

func TestLookup(t *testing.T) {
	d := testDirectory(t, passwd)
	for _, tc := range []struct {
		name string
		want account.User
	}{
		{"", root},
		{"root", root},
		{"user", user},
		{"daemon", account.User{Name: "daemon", UID: 1, GID: 1, Home: "/usr/sbin"}},
	} {
		got, err := d.Lookup(tc.name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Lookup(%q) (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestLookup_UnknownUser(t *testing.T) {
	d := testDirectory(t, passwd)
	for _, name := range []string{"nobody", "broken", "use"} {
		if _, err := d.Lookup(name); !errors.Is(err, account.ErrUnknownUser) {
			t.Errorf("Lookup(%q) = %v, want ErrUnknownUser", name, err)
		}
	}
}

func TestLookup_RootWithoutPasswd(t *testing.T) {
	d := account.NewDirectory(filepath.Join(t.TempDir(), "missing"))
	got, err := d.Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(root, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := d.Lookup("user"); err == nil || errors.Is(err, account.ErrUnknownUser) {
		t.Errorf("Lookup(user) with no passwd file = %v, want an I/O error", err)
	}
}

func basic(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

func TestFromRequest(t *testing.T) {
	d := testDirectory(t, passwd)
	for _, tc := range []struct {
		desc, url, auth string
		want            account.User
	}{
		{"default", "/files", "", root},
		{"query", "/files?username=user", "", user},
		{"basic", "/files", basic("user"), user},
		{"query wins over header", "/files?username=root", basic("user"), root},
		{"other scheme ignored", "/files", "Bearer abc", root},
		{"empty basic user", "/files", basic(""), root},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.url, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		got, err := d.FromRequest(r)
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.desc, diff)
		}
	}
}

func TestFromHeader_Errors(t *testing.T) {
	d := testDirectory(t, passwd)
	for _, tc := range []struct {
		auth string
		want error
	}{
		{basic("ghost"), account.ErrUnknownUser},
		{"Basic !!!notbase64", account.ErrInvalid},
	} {
		h := http.Header{"Authorization": {tc.auth}}
		if _, err := d.FromHeader(h); !errors.Is(err, tc.want) {
			t.Errorf("FromHeader(%q) = %v, want %v", tc.auth, err, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "/home/user"},
		{"~", "/home/user"},
		{"~/a/b", "/home/user/a/b"},
		{"a/../b", "/home/user/b"},
		{"/tmp//x/./y/", "/tmp/x/y"},
		{"/../etc", "/etc"},
		{"~other", "/home/user/~other"},
	} {
		got, err := account.Resolve(user, tc.in)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestResolve_NUL(t *testing.T) {
	if _, err := account.Resolve(user, "/tmp/a\x00b"); !errors.Is(err, account.ErrInvalid) {
		t.Errorf("Resolve(NUL) = %v, want ErrInvalid", err)
	}
}

func TestMkdirAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	base := t.TempDir()
	u := account.User{Name: "user", UID: 1000, GID: 1001}
	if err := account.MkdirAll(u, filepath.Join(base, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b")} {
		uid, gid := owner(t, p)
		if uid != 1000 || gid != 1001 {
			t.Errorf("%s owned by %d:%d, want 1000:1001", p, uid, gid)
		}
	}
	if uid, _ := owner(t, base); uid != 0 {
		t.Errorf("existing parent re-owned to %d", uid)
	}
}

func TestMkdirAll_FileInTheWay(t *testing.T) {
	base := t.TempDir()
	f := filepath.Join(base, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	me := account.User{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	err := account.MkdirAll(me, filepath.Join(f, "sub"), 0o755)
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("MkdirAll under a file = %v, want ENOTDIR", err)
	}
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestNames(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd), 0o644)
	os.WriteFile(filepath.Join(dir, "group"), []byte("root:x:0:\nusers:x:100:\nuser:x:1000:\nalias:x:1000:\n"), 0o644)
	n := account.NewDirectory(filepath.Join(dir, "passwd")).Names()
	got := []string{n.User(0), n.User(1000), n.User(4242), n.Group(100), n.Group(1000), n.Group(7)}
	want := []string{"root", "user", "4242", "users", "user", "7"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
