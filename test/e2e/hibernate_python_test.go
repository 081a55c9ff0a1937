package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// codeInterpreterImage has python3 (images/code-interpreter).
const codeInterpreterImage = "sandboxd/code-interpreter:v1"

// replServer is a small Python REPL driven over a loopback socket: each
// connection sends source (then shuts its write side), which runs in one
// namespace kept for the life of the process; the connection gets what
// it printed (an expression's value too, as the interactive prompt
// shows it) or its traceback.
const replServer = `import contextlib, io, socket, traceback
ns = {"__name__": "__repl__"}
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 9999))
srv.listen(8)
while True:
    c, _ = srv.accept()
    src = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        src += b
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            try:
                code = compile(src.decode(), "<repl>", "single")
            except SyntaxError:
                code = compile(src.decode(), "<repl>", "exec")
            exec(code, ns)
        except Exception:
            traceback.print_exc()
    c.sendall(out.getvalue().encode())
    c.close()
`

// replClient sends its argument to the REPL and prints the answer.
const replClient = `import socket, sys
s = socket.create_connection(("127.0.0.1", 9999), timeout=10)
s.sendall(sys.argv[1].encode())
s.shutdown(socket.SHUT_WR)
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
sys.stdout.write(out.decode())
`

// TestHibernate_PythonREPLSurvivesDaemonSIGKILL: under --engine oci a
// gVisor sandbox of the code-interpreter image runs a Python REPL holding
// a variable and a counting thread, and a Python HTTP server. It is
// hibernated (no process and no cgroup of it is left: no memory is
// charged to it), the daemon is killed with SIGKILL and started again,
// and the sandbox resumed: the same REPL process answers with the
// variable's value, its loop counts on from where it was (not from 0,
// and not through the time it spent hibernated), and the server answers.
func TestHibernate_PythonREPLSurvivesDaemonSIGKILL(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 6*time.Minute)
	d := startDaemon(t, "hibpy", "--engine", "oci")
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: codeInterpreterImage, Runtime: "gvisor", MemoryMB: 512})
	for path, src := range map[string]string{"/tmp/repl.py": replServer, "/tmp/ask.py": replClient} {
		if err := c.UploadFile(ctx, sb.ID, path, strings.NewReader(src)); err != nil {
			t.Fatalf("upload %s: %v", path, err)
		}
	}
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: `mkdir -p /tmp/www && echo hello > /tmp/www/index.html &&
		{ python3 -m http.server 8080 --bind 127.0.0.1 --directory /tmp/www >/tmp/http.log 2>&1 & } &&
		{ python3 /tmp/repl.py >/tmp/repl.log 2>&1 & }`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the REPL and the server: %+v, %v", res, err)
	}
	ask := func(src string) (string, error) {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "/tmp/ask.py", src}})
		if err != nil {
			return "", err
		}
		if res.ExitCode != 0 {
			return "", errors.New(strings.TrimSpace(res.Stderr))
		}
		return strings.TrimSpace(res.Stdout), nil
	}
	mustAsk := func(src string) string {
		t.Helper()
		out, err := ask(src)
		if err != nil {
			t.Fatalf("REPL %q: %v", src, err)
		}
		return out
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if out, err := ask("1 + 1"); err == nil && out == "2" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the REPL does not answer: %q, %v", out, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	secret := "v-" + hex.EncodeToString(b[:])
	mustAsk("secret = " + strconv.Quote(secret))
	mustAsk("import os, threading, time\nn = 0\ndef loop():\n    global n\n    while True:\n        n += 1\n        time.sleep(0.1)\nthreading.Thread(target=loop, daemon=True).start()")
	replPID := mustAsk("os.getpid()")
	count := func() int {
		t.Helper()
		n, err := strconv.Atoi(mustAsk("n"))
		if err != nil {
			t.Fatalf("the REPL's counter: %v", err)
		}
		return n
	}
	serves := func() bool {
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "-c",
			"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/index.html', timeout=10).read().decode(), end='')"}})
		return err == nil && res.Stdout == "hello\n"
	}
	for deadline := time.Now().Add(time.Minute); count() < 3; {
		if time.Now().After(deadline) {
			t.Fatal("the REPL's loop does not count")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !serves() {
		t.Fatal("the HTTP server does not answer")
	}
	before, readAt := count(), time.Now()
	t.Logf("REPL pid %s, counter %d before hibernate", replPID, before)

	h, err := c.HibernateSandbox(ctx, sb.ID)
	if err != nil || h.Stopped || h.State != "paused" || h.HibernatedAt.IsZero() {
		t.Fatalf("hibernate = %+v, %v; want paused and hibernated", h, err)
	}
	hibernatedAt := time.Now()
	if procs, cgroups := sandboxTraces(sb.ID); len(procs)+len(cgroups) > 0 {
		t.Errorf("a hibernated sandbox holds processes %v and cgroups %v; want none (no memory charged to it)", procs, cgroups)
	}
	if fi, err := os.Stat(filepath.Join(d.DataDir(), "hibernate", sb.ID)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("its image in the data dir: %v, %v; want a 0700 directory", fi, err)
	}

	if err := d.Restart(ctx); err != nil { // SIGKILL, then start again
		t.Fatalf("restart: %v", err)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "paused" || got.HibernatedAt.IsZero() {
		t.Fatalf("after the SIGKILL: %+v, %v; want still hibernated", got, err)
	}
	if procs, cgroups := sandboxTraces(sb.ID); len(procs)+len(cgroups) > 0 {
		t.Errorf("after the restart the hibernated sandbox holds processes %v and cgroups %v; want none", procs, cgroups)
	}
	resumeAt := time.Now()
	r, err := c.ResumeSandbox(ctx, sb.ID)
	if err != nil || r.State != "running" || r.ProcessesRestarted {
		t.Fatalf("resume = %+v, %v; want running with its processes", r, err)
	}
	t.Logf("resume took %v", time.Since(resumeAt).Round(time.Millisecond))
	if pid := mustAsk("os.getpid()"); pid != replPID {
		t.Errorf("the REPL's pid after resume = %s, want %s (the same process)", pid, replPID)
	}
	if v := mustAsk("secret"); v != "'"+secret+"'" {
		t.Errorf("the REPL's variable after resume = %s, want '%s'", v, secret)
	}
	after := count()
	running := time.Since(readAt) - resumeAt.Sub(hibernatedAt)
	t.Logf("counter %d after resume (hibernated %v, %v of running time since the last read)", after, resumeAt.Sub(hibernatedAt).Round(time.Millisecond), running.Round(time.Millisecond))
	if after < before || after > before+int(running/(100*time.Millisecond))+20 {
		t.Errorf("counter after resume = %d, before hibernate %d, %v of running time between; want it to go on from there", after, before, running)
	}
	for deadline := time.Now().Add(time.Minute); count() <= after; {
		if time.Now().After(deadline) {
			t.Fatalf("the REPL's loop stopped at %d after resume", after)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !serves() {
		t.Error("the HTTP server does not answer after resume")
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := c.DestroySandbox(dctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
}
