package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// cliTimeout bounds one sbx invocation; the 50 MB copies are the slowest.
const cliTimeout = 2 * time.Minute

// sbxResult is the outcome of one sbx run.
type sbxResult struct {
	code           int
	stdout, stderr string
}

// sbxCommand returns the built sbx with args, pointed at d through
// SBX_API_URL and SBX_TOKEN, running in dir (so that no .sandboxd
// directory of a checkout is picked up).
func sbxCommand(ctx context.Context, d *daemonProcess, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, env.dt.Bins.Sbx, args...)
	cmd.Dir = dir
	cmd.Env = append(hermeticEnv(), "SBX_API_URL="+d.URL(), "SBX_TOKEN="+d.Token(), "TERM=xterm")
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// sbx runs the built sbx binary to completion and returns its exit code
// and output. Only a failure to run it at all fails t.
//
// Its standard input is a pipe that stays open and silent until sbx exits,
// as a caller's idle stdin would be, rather than /dev/null: at EOF `sbx
// exec` sends stdin_close, and a close that reaches a process that has
// already exited fails the whole stream today (see
// exec_stdin_at_eof_after_exit). This keeps the other cases about what
// they test.
func sbx(t *testing.T, d *daemonProcess, dir string, args ...string) sbxResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := sbxCommand(ctx, d, dir, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, idle, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	cmd.Stdin = stdin
	err = cmd.Run()
	stdin.Close()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && ctx.Err() == nil:
	default:
		t.Fatalf("sbx %s: %v (stderr: %s)", strings.Join(args, " "), err, stderr.String())
	}
	return sbxResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// mustSbx runs sbx and fails t unless it exits 0.
func mustSbx(t *testing.T, d *daemonProcess, dir string, args ...string) sbxResult {
	t.Helper()
	r := sbx(t, d, dir, args...)
	if r.code != 0 {
		t.Fatalf("sbx %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// TestCLI_EndToEnd drives the built sbx binary against the shared daemon:
// create --json, exec exit codes, a 50 MB cp round trip, ls --json, rm.
func TestCLI_EndToEnd(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	suite := "cli-" + sandboxd.NewIdempotencyKey()[:8]
	name := suite + "-box"

	r := mustSbx(t, d, dir, "create", "--json", "--image", busyboxImage, "--name", name,
		"--cpu", "0.25", "--memory", "128", "--tag", "suite="+suite)
	var sb sandboxd.Sandbox
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil {
		t.Fatalf("create --json printed %q: %v", r.stdout, err)
	}
	destroyAtEnd(t, newClient(d, true), sb.ID)
	if !sandboxd.IsSandboxID(sb.ID) || sb.Name != name || sb.State != sandboxd.StateRunning || sb.Tags["suite"] != suite {
		t.Fatalf("create --json: %+v; want running sandbox %q tagged suite=%s", sb, name, suite)
	}

	t.Run("exec_exit_codes", func(t *testing.T) {
		for _, tc := range []struct {
			args        []string
			code        int
			out, errOut string
		}{
			{[]string{"exec", name, "--", "sh", "-c", "exit 7"}, 7, "", ""},
			{[]string{"exec", sb.ID, "--", "sh", "-c", "echo out; echo err >&2"}, 0, "out\n", "err\n"},
			{[]string{"exec", name, "--", "false"}, 1, "", ""},
		} {
			r := sbx(t, d, dir, tc.args...)
			if r.code != tc.code || r.stdout != tc.out || r.stderr != tc.errOut {
				t.Errorf("sbx %s: exit %d, stdout %q, stderr %q; want %d, %q, %q",
					strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, tc.code, tc.out, tc.errOut)
			}
		}
		// Standard input is forwarded when it is not a terminal.
		ctx, cancel := context.WithTimeout(ctx, cliTimeout)
		defer cancel()
		cmd := sbxCommand(ctx, d, dir, "exec", name, "--", "sh", "-c", "tr a-z A-Z")
		cmd.Stdin = strings.NewReader("piped\n")
		if out, err := cmd.Output(); err != nil || string(out) != "PIPED\n" {
			t.Errorf("sbx exec with piped stdin: %q, %v; want %q", out, err, "PIPED\n")
		}
	})

	// A short command whose caller's stdin is already at EOF (a script,
	// cron, CI: stdin is /dev/null): sbx sends stdin_close at once, which
	// may reach the agent after the command has exited. That must not
	// turn a finished command into an error.
	t.Run("exec_stdin_at_eof_after_exit", func(t *testing.T) {
		const runs = 100 // the race loses about one run in twenty
		failed := 0
		for range runs {
			ctx, cancel := context.WithTimeout(ctx, cliTimeout)
			cmd := sbxCommand(ctx, d, dir, "exec", sb.ID, "--", "true") // Stdin nil: /dev/null
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				failed++
				t.Logf("sbx exec -- true < /dev/null: %v: %s", err, strings.TrimSpace(stderr.String()))
			}
			cancel()
		}
		if failed > 0 {
			t.Errorf("%d of %d runs of `sbx exec -- true` with stdin at EOF failed; want all to exit 0", failed, runs)
		}
	})

	t.Run("exec_json", func(t *testing.T) {
		r := sbx(t, d, dir, "exec", "--json", name, "--", "sh", "-c", "echo hi; exit 4")
		var res sandboxd.ExecResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("exec --json printed %q: %v", r.stdout, err)
		}
		if r.code != 4 || res.ExitCode != 4 || res.Stdout != "hi\n" {
			t.Errorf("exec --json: exit %d, %+v; want 4 and stdout hi", r.code, res)
		}
	})

	t.Run("cp_50MB_round_trip", func(t *testing.T) {
		src, sum := writeRandomFile(t, dir, bigFileSize)
		start := time.Now()
		mustSbx(t, d, dir, "cp", src, name+":/tmp/big.bin")
		up := time.Since(start)
		back := filepath.Join(dir, "back.bin")
		start = time.Now()
		r := mustSbx(t, d, dir, "cp", "--json", sb.ID+":/tmp/big.bin", back)
		down := time.Since(start)
		if got, n := sha256File(t, back); got != sum || n != bigFileSize {
			t.Fatalf("round trip: %d bytes with sha256 %s; sent %d bytes with sha256 %s", n, got, bigFileSize, sum)
		}
		var report struct{ Bytes int64 }
		if err := json.Unmarshal([]byte(r.stdout), &report); err != nil || report.Bytes != bigFileSize {
			t.Errorf("cp --json printed %q (%v); want bytes %d", r.stdout, err, bigFileSize)
		}
		t.Logf("sbx cp 50 MB: up %v, down %v", up.Round(time.Millisecond), down.Round(time.Millisecond))
	})

	t.Run("ls_json", func(t *testing.T) {
		r := mustSbx(t, d, dir, "ls", "--json", "--tag", "suite="+suite)
		var out struct{ Items []sandboxd.Sandbox }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("ls --json printed %q: %v", r.stdout, err)
		}
		if len(out.Items) != 1 || out.Items[0].ID != sb.ID || out.Items[0].SSHPrivateKey != "" {
			t.Errorf("ls --json --tag suite=%s: %+v; want exactly %s, without a private key", suite, out.Items, sb.ID)
		}
	})

	t.Run("not_found_exit_code", func(t *testing.T) {
		if r := sbx(t, d, dir, "get", "no-such-sandbox"); r.code != 3 {
			t.Errorf("sbx get of a missing sandbox: exit %d (stderr %q); want 3", r.code, r.stderr)
		}
	})

	t.Run("rm", func(t *testing.T) {
		r := mustSbx(t, d, dir, "rm", "--json", name)
		var out struct{ Deleted []string }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Deleted) != 1 {
			t.Errorf("rm --json printed %q (%v); want one deleted entry", r.stdout, err)
		}
		if r := sbx(t, d, dir, "get", sb.ID); r.code != 3 {
			t.Errorf("sbx get after rm: exit %d; want 3 (not found)", r.code)
		}
		if r := sbx(t, d, dir, "rm", sb.ID); r.code != 3 {
			t.Errorf("second sbx rm: exit %d; want 3 (not found)", r.code)
		}
		if r := sbx(t, d, dir, "rm", "-f", sb.ID); r.code != 0 {
			t.Errorf("sbx rm -f of a missing sandbox: exit %d; want 0", r.code)
		}
	})
}
