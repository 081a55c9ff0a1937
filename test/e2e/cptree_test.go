package e2e_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// makeTree writes a small tree under root: nested directories, an empty
// one, a symbolic link inside, and files of several modes.
func makeTree(t *testing.T, root string) {
	t.Helper()
	files := []struct {
		p    string
		mode os.FileMode
		body string
	}{
		{"a.txt", 0o644, "alpha\n"},
		{"bin/run.sh", 0o755, "#!/bin/sh\necho run\n"},
		{"deep/er/still/secret", 0o600, "deep\n"},
		{"deep/er/notes", 0o640, "notes\n"},
	}
	for _, f := range files {
		p := filepath.Join(root, f.p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("deep/er/notes", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

// treeListing describes a local tree as the sandbox's listing does:
// "<mode octal> <type> <relative path>[ -> target]" sorted, with file
// contents beside.
func treeListing(t *testing.T, root string) (string, map[string]string) {
	t.Helper()
	var lines []string
	bodies := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := ""
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line = "l " + rel + " -> " + target
		case fi.IsDir():
			line = "d " + rel
		default:
			b, _ := os.ReadFile(p)
			bodies[rel] = string(b)
			line = "f " + rel
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			line = fmtMode(fi.Mode()) + " " + line
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n"), bodies
}

func fmtMode(m os.FileMode) string { return fmt.Sprintf("%o", m.Perm()) }

// remoteListing lists the tree at root in the sandbox in treeListing's
// shape (busybox find, stat and readlink).
const remoteListingScript = `cd "$1" && find . | sort | while read -r p; do
  r=${p#./}; [ "$p" = . ] && r=.
  if [ -L "$p" ]; then echo "l $r -> $(readlink "$p")"
  elif [ -d "$p" ]; then echo "$(stat -c %a "$p") d $r"
  else echo "$(stat -c %a "$p") f $r"; fi
done`

// TestCLI_CopyTree copies a tree into a sandbox and back with sbx cp -r,
// with docker cp's rule for where it lands: the modes, the empty
// directory and the symbolic link (as a link) survive both ways. The
// daemon refuses an archive that writes through a link planted in the
// sandbox, and a link in the sandbox pointing out arrives as a link.
func TestCLI_CopyTree(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{})

	src := filepath.Join(dir, "tree")
	makeTree(t, src)
	want, bodies := treeListing(t, src)

	remote := func(root string) string {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"sh", "-c", remoteListingScript, "sh", root}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("list %s: %+v, %v", root, res, err)
		}
		return strings.TrimSpace(res.Stdout)
	}

	// DST missing: DST becomes the copy.
	mustSbx(t, d, dir, "cp", "-r", src, sb.ID+":/tmp/up")
	if got := remote("/tmp/up"); got != want {
		t.Errorf("after sbx cp -r tree sb:/tmp/up, the sandbox has\n%s\nwant\n%s", got, want)
	}
	for rel, body := range bodies {
		b, err := c.DownloadFile(ctx, sb.ID, "/tmp/up/"+rel)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		got.ReadFrom(b)
		b.Close()
		if got.String() != body {
			t.Errorf("/tmp/up/%s = %q, want %q", rel, got.String(), body)
		}
	}
	// DST an existing directory: the tree lands inside it.
	mustSbx(t, d, dir, "cp", "-r", src, sb.ID+":/tmp/up")
	if got := remote("/tmp/up/tree"); got != want {
		t.Errorf("after a second sbx cp -r tree sb:/tmp/up, /tmp/up/tree has\n%s\nwant\n%s", got, want)
	}

	// Out again: a missing DST is the copy, an existing one receives it.
	back := filepath.Join(dir, "back")
	mustSbx(t, d, dir, "cp", "-r", sb.ID+":/tmp/up", back)
	os.RemoveAll(filepath.Join(back, "tree")) // the second upload's
	if got, gotBodies := treeListing(t, back); got != want || len(gotBodies) != len(bodies) {
		t.Errorf("sbx cp -r sb:/tmp/up back gave\n%s\nwant\n%s", got, want)
	}
	into := filepath.Join(dir, "into")
	if err := os.Mkdir(into, 0o755); err != nil {
		t.Fatal(err)
	}
	mustSbx(t, d, dir, "cp", "-r", sb.ID+":/tmp/up/deep", into)
	if b, err := os.ReadFile(filepath.Join(into, "deep", "er", "still", "secret")); err != nil || string(b) != "deep\n" {
		t.Errorf("sbx cp -r sb:/tmp/up/deep into/: into/deep/er/still/secret = %q, %v", b, err)
	}

	// A link in the sandbox pointing out comes back as a link, never as
	// what it names.
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "mkdir -p /tmp/esc && ln -s /etc /tmp/esc/etc && ln -s /etc/passwd /tmp/esc/passwd"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("plant links: %+v, %v", res, err)
	}
	esc := filepath.Join(dir, "esc")
	mustSbx(t, d, dir, "cp", "-r", sb.ID+":/tmp/esc", esc)
	for _, n := range []string{"etc", "passwd"} {
		fi, err := os.Lstat(filepath.Join(esc, n))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("esc/%s: %v, %v; want a symbolic link", n, fi, err)
		}
	}

	// An archive that writes through the link planted in the sandbox is
	// refused, and nothing lands where the link points.
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "etc/sbx-evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
	tw.Write([]byte("evil"))
	tw.Close()
	err := c.UploadArchive(ctx, sb.ID, "/tmp/esc", &b)
	if !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Errorf("an archive writing through /tmp/esc/etc -> /etc: %v, want invalid_argument", err)
	}
	if res, _ := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "test -e /etc/sbx-evil"}); res == nil || res.ExitCode == 0 {
		t.Errorf("/etc/sbx-evil exists in the sandbox: written through the link")
	}
}

// TestCLI_CopyTreeDownHonoursUmask: sbx cp -r out of a sandbox writes on
// the user's machine as tar does for a user who is not root: each mode is
// cut by sbx's umask and loses the sticky bit (and setuid and setgid), so
// a sandbox cannot plant world-writable files or directories there
// (before: 0666 and 1777 arrived as they were).
func TestCLI_CopyTreeDownHonoursUmask(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{})
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "mkdir -p /tmp/modes/shared && " +
		"echo w > /tmp/modes/world && echo s > /tmp/modes/suid && " +
		"chmod 777 /tmp/modes && chmod 1777 /tmp/modes/shared && chmod 666 /tmp/modes/world && chmod 4777 /tmp/modes/suid"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("make the tree: %+v, %v", res, err)
	}
	got := filepath.Join(dir, "got")
	cctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	cmd := sbxCommand(cctx, d, dir, "cp", "-r", sb.ID+":/tmp/modes", got)
	// The same sbx, under umask 027.
	cmd.Args = append([]string{"sh", "-c", `umask 027 && exec "$0" "$@"`}, cmd.Args...)
	cmd.Args[3] = cmd.Path
	cmd.Path = "/bin/sh"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sbx cp -r under umask 027: %v\n%s", err, out)
	}
	for p, want := range map[string]os.FileMode{"": 0o750, "shared": 0o750, "world": 0o640, "suid": 0o750} {
		fi, err := os.Lstat(filepath.Join(got, p))
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid); m != want {
			t.Errorf("got/%s: mode %v, want %v", p, m, want)
		}
	}
}
