package e2e_test

import (
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestExec_NotExecutable: a program that is not there exits 127, one that
// cannot be executed 126, as sh and docker exec answer, through the
// native API's buffered exec (an argv, no shell) and through sbx exec
// (the WebSocket stream): a result with a shell's line on stderr, not an
// invalid_argument error (sbx exited 2, "usage").
func TestExec_NotExecutable(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Tags: map[string]string{"suite": "exec-not-executable"}})
	if err != nil {
		t.Fatal(err)
	}
	destroyAtEnd(t, c, sb.ID)
	dir := t.TempDir()
	for _, tc := range []struct {
		cmd  []string
		code int
		say  string
	}{
		{[]string{"no-such-program"}, 127, "no-such-program: command not found"},
		{[]string{"/no/such/path"}, 127, "/no/such/path: command not found"},
		{[]string{"/etc/passwd"}, 126, "/etc/passwd: cannot execute"},
		{[]string{"/etc"}, 126, "/etc: cannot execute"},
	} {
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: tc.cmd})
		if err != nil {
			t.Errorf("API exec %q: %v; want exit %d", tc.cmd, err, tc.code)
		} else if res.ExitCode != tc.code || !strings.Contains(res.Stderr, tc.say) {
			t.Errorf("API exec %q: exit %d, stderr %q; want %d and %q", tc.cmd, res.ExitCode, res.Stderr, tc.code, tc.say)
		}
		r := sbx(t, d, dir, append([]string{"exec", sb.ID, "--"}, tc.cmd...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.say) {
			t.Errorf("sbx exec %q: exit %d, stderr %q; want %d and %q", tc.cmd, r.code, r.stderr, tc.code, tc.say)
		}
	}
}

// TestCLI_NamesItsFlags: a refusal of a request field names the sbx flag
// that sets it, not the API's JSON field (it said "public: a tcp port
// cannot be private … expose it with public: true").
func TestCLI_NamesItsFlags(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Tags: map[string]string{"suite": "cli-flags"}})
	if err != nil {
		t.Fatal(err)
	}
	destroyAtEnd(t, c, sb.ID)
	dir := t.TempDir()
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"ports", "expose", sb.ID, "8080", "--protocol", "tcp"}, "expose it with --public", "public: true"},
		{[]string{"create", "--image", busyboxImage, "--cpu", "99"}, "invalid argument: --cpu: ", "argument: cpu:"},
		{[]string{"create", "--image", busyboxImage, "--memory", "1"}, "invalid argument: --memory: ", "memory_mb"},
	} {
		r := sbx(t, d, dir, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, tc.not) {
			t.Errorf("sbx %s: exit %d, stderr %q; want 2 naming %q, not %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want, tc.not)
		}
	}
}
