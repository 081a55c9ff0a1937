package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// execTimeout bounds one command the suite runs through the agent.
const execTimeout = 30 * time.Second

// agentClient returns a client for the agent of sandbox id, reached
// through rt.DialAgent, sending token.
func agentClient(t *testing.T, rt runtime.Runtime, id, token string) *agent.Client {
	t.Helper()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, token)
	t.Cleanup(c.Close)
	return c
}

// sh runs script with /bin/sh through c and fails the test on a transport
// error; a non-zero exit is a result.
func sh(t *testing.T, c *agent.Client, script string) *agent.ExecResult {
	t.Helper()
	res, err := c.Exec(opCtx(t), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: execTimeout})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// testExec: a command runs through the agent's process service with the
// spec's environment and without the agent token; a wrong token is refused.
func (s *suite) testExec(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	spec.Env["RUNTIMETEST_VAR"] = "hello world"
	s.create(t, rt, spec)
	c := agentClient(t, rt, id, spec.AgentToken)
	// The agent passes the sandbox's environment on, less its own control
	// variables (SANDBOXD_*, the token among them).
	res := sh(t, c, `echo "var=$RUNTIMETEST_VAR test=${SANDBOXD_TEST-unset} token=${`+runtime.EnvAgentToken+`-unset}"; echo oops >&2; exit 7`)
	if got, want := string(res.Stdout), "var=hello world test=unset token=unset\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := string(res.Stderr), "oops\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	if !res.Exited || res.ExitCode != 7 {
		t.Errorf("exited = %v, exit code = %d; want true, 7", res.Exited, res.ExitCode)
	}

	// Nothing in the sandbox reads the token: not in PID 1's environment
	// (unreadable besides: the agent is not dumpable), not in a file of
	// the socket directory (under gVisor the agent took it from there and
	// removed it), nowhere under /run/sandboxd.
	res = sh(t, c, `tr '\0' ' ' </proc/1/environ 2>&1; echo; ls -A `+runtime.AgentSocketDir+`; cat `+runtime.AgentSocketDir+`/* 2>&1`)
	if out := string(res.Stdout); strings.Contains(out, spec.AgentToken) || strings.Contains(out, "agent.token") {
		t.Errorf("the sandbox reads its agent token: %q", out)
	}

	wrong := agentClient(t, rt, id, spec.AgentToken+"-wrong")
	_, err := wrong.Exec(opCtx(t), agent.ExecRequest{Cmd: []string{"/bin/true"}, Timeout: execTimeout})
	if err == nil {
		t.Errorf("exec with a wrong agent token succeeded, want it refused")
	}
}

// testFiles: a file uploaded through the agent (a path relative to the
// user's home) is what a process there reads, and downloads back intact.
func (s *suite) testFiles(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	s.create(t, rt, spec)
	c := agentClient(t, rt, id, spec.AgentToken)
	content := []byte("hello from " + id + "\n\x00binary\xff")
	const path = "runtimetest/hello.bin"
	if err := c.Upload(opCtx(t), path, bytes.NewReader(content), ""); err != nil {
		t.Fatalf("Upload(%s): %v", path, err)
	}
	// The process's cwd defaults to the home, where relative paths resolve.
	want := strconv.Itoa(len(content))
	if res := sh(t, c, "wc -c < "+path); strings.TrimSpace(string(res.Stdout)) != want || res.ExitCode != 0 {
		t.Errorf("wc -c < %s = %q (exit %d, stderr %q), want %s", path, res.Stdout, res.ExitCode, res.Stderr, want)
	}
	rc, err := c.Download(opCtx(t), path, "")
	if err != nil {
		t.Fatalf("Download(%s): %v", path, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("Download(%s): read: %v", path, err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("Download(%s) = %q, want %q", path, got, content)
	}
	rc, err = c.Download(opCtx(t), "runtimetest/missing", "")
	if err == nil {
		rc.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Download of a missing file = %v, want fs.ErrNotExist", err)
	}
}

// testIsolation: two sandboxes share no files (a file one writes in /tmp
// is not in the other's), and each has a host name of its own, which
// does not show its id.
func (s *suite) testIsolation(t *testing.T) {
	s.need(t, Isolation)
	rt, _ := s.newRuntime(t)
	idA, idB := NewSandboxID(), NewSandboxID()
	specA, specB := s.spec(idA), s.spec(idB)
	s.create(t, rt, specA)
	s.create(t, rt, specB)
	a := agentClient(t, rt, idA, specA.AgentToken)
	b := agentClient(t, rt, idB, specB.AgentToken)
	if res := sh(t, a, "echo secret > /tmp/runtimetest-isolation"); res.ExitCode != 0 {
		t.Fatalf("write in A: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	if res := sh(t, b, "cat /tmp/runtimetest-isolation"); res.ExitCode == 0 {
		t.Errorf("B reads A's /tmp file: %q", res.Stdout)
	}
	names := map[string]bool{}
	for id, c := range map[string]*agent.Client{idA: a, idB: b} {
		res := sh(t, c, "cat /proc/sys/kernel/hostname")
		name := strings.TrimSpace(string(res.Stdout))
		if name == "" || strings.Contains(name, id[3:]) {
			// The engine's resolver answers it to the sandbox's neighbours.
			t.Errorf("host name in %s = %q, want one that does not show the id", id, res.Stdout)
		}
		names[name] = true
	}
	if len(names) != 2 {
		t.Errorf("the two sandboxes share a host name: %v", names)
	}
}

// testDiskLimit: where the runtime says it enforces Spec.DiskMB, a
// sandbox cannot write past it (the write fails: ENOSPC or EDQUOT) and
// still writes within it. A runtime that enforces none skips, saying so.
func (s *suite) testDiskLimit(t *testing.T) {
	rt, _ := s.newRuntime(t)
	dl, ok := rt.(runtime.DiskLimiter)
	if !ok {
		t.Skip("the runtime enforces no disk limit (it is no runtime.DiskLimiter)")
	}
	lim, err := dl.DiskLimits(opCtx(t))
	if err != nil {
		t.Fatalf("DiskLimits: %v", err)
	}
	if !lim.Enforced {
		t.Skipf("the runtime's engine enforces no disk limit: %s", lim.How)
	}
	id := NewSandboxID()
	spec := s.spec(id)
	spec.DiskMB = 32
	s.create(t, rt, spec)
	c := agentClient(t, rt, id, spec.AgentToken)
	// A btrfs engine's removal of another container stops the kernel's
	// counting until a rescan (internal/runtime/docker qgroup.go): an
	// attempt overlapping that window may leak, and is made again, at
	// most twice; without a limit every attempt leaks.
	var out string
	var res *agent.ExecResult
	for range 3 {
		res = sh(t, c, `rm -f /big /fill; sync; fallocate -l 256M /big && echo fallocate-ok; dd if=/dev/zero of=/fill bs=1M count=128 2>/dev/null && echo dd-ok; sync; wc -c < /fill`)
		out = string(res.Stdout)
		if !strings.Contains(out, "fallocate-ok") && !strings.Contains(out, "dd-ok") {
			break
		}
	}
	if strings.Contains(out, "fallocate-ok") || strings.Contains(out, "dd-ok") {
		t.Errorf("a sandbox with a 32 MiB limit wrote past it:\n%s%s", out, res.Stderr)
	}
	lines := strings.Fields(out)
	if n, err := strconv.ParseInt(lines[len(lines)-1], 10, 64); err != nil || n > 48<<20 {
		t.Errorf("a sandbox with a 32 MiB limit holds a %s-byte file", lines[len(lines)-1])
	}
	if res := sh(t, c, `rm -f /fill /big; echo ok > /small && cat /small`); string(res.Stdout) != "ok\n" {
		t.Errorf("after freeing space the sandbox cannot write: %q %q", res.Stdout, res.Stderr)
	}
}
