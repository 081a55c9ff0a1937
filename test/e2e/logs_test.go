package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	procrpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// tenant returns a client for a fresh user token of its own owner, revoked
// at the end.
func tenant(t *testing.T, ctx context.Context, d *daemonProcess, name string) *sandboxd.Client {
	t.Helper()
	admin := newClient(d, true)
	tok, err := admin.CreateToken(ctx, sandboxd.CreateTokenRequest{Name: name, Role: sandboxd.RoleUser, Owner: name + "-" + sandboxd.NewIdempotencyKey()[:8]})
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.RevokeToken(ctx, tok.ID); err != nil {
			t.Errorf("cleanup: revoke %s: %v", tok.ID, err)
		}
	})
	return sandboxd.New(d.URL(), tok.Secret, sandboxd.WithUserAgent("sandboxd-e2e"))
}

// readLogs returns every line of the sandbox's logs that opts selects.
func readLogs(ctx context.Context, c *sandboxd.Client, id string, opts sandboxd.LogOptions) ([]sandboxd.LogLine, error) {
	var out []sandboxd.LogLine
	err := c.Logs(ctx, id, opts, func(l sandboxd.LogLine) error { out = append(out, l); return nil })
	return out, err
}

func texts(lines []sandboxd.LogLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Stream+":"+l.Text)
	}
	return out
}

// TestLogs_ExecOutput reads a sandbox's logs through the Go SDK against
// the shared daemon: an exec's output after it ended, labelled by stream;
// tail and since; a follow that sees a new exec's lines and ends when the
// sandbox stops; another tenant's 404.
func TestLogs_ExecOutput(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	c := tenant(t, ctx, d, "logs")
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, CPU: 0.25, MemoryMB: 128})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)

	if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo one; echo two >&2; printf three"}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	lines, err := readLogs(ctx, c, sb.ID, sandboxd.LogOptions{})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	// The agent reads stdout and stderr apart: their order between them
	// is not kept, within one it is; the unfinished "three" ends with the
	// process, last.
	if got := strings.Join(texts(lines), "|"); got != "stdout:one|stderr:two|stdout:three" && got != "stderr:two|stdout:one|stdout:three" {
		t.Fatalf("logs after the exec ended: %q, want stdout one and three, stderr two", got)
	}
	src := lines[0].Source
	for _, l := range lines {
		if l.Source != src || !strings.HasPrefix(src, "pid-") || l.Time.IsZero() {
			t.Errorf("line %+v: want source %q (pid-N) and a time", l, src)
		}
	}

	t.Run("tail_and_since", func(t *testing.T) {
		got, err := readLogs(ctx, c, sb.ID, sandboxd.LogOptions{Tail: 1})
		if err != nil || len(got) != 1 || got[0].Text != "three" {
			t.Fatalf("tail 1: %v, %v; want the last line only", texts(got), err)
		}
		cut := lines[len(lines)-1].Time.Add(time.Millisecond)
		if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo later"}); err != nil {
			t.Fatal(err)
		}
		got, err = readLogs(ctx, c, sb.ID, sandboxd.LogOptions{Since: cut})
		if err != nil || strings.Join(texts(got), "|") != "stdout:later" {
			t.Fatalf("since %s: %v, %v; want only the later exec's line", cut, texts(got), err)
		}
		// The raw query: a duration, and a bad value.
		raw := func(q string) (int, string) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v1/sandboxes/"+sb.ID+"/logs?"+q, nil)
			req.Header.Set("Authorization", "Bearer "+d.Token())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := raw("since=1h&format=text"); code != 200 || !strings.HasSuffix(body, "three\nlater\n") || !strings.Contains(body, "two\n") {
			t.Errorf("since=1h&format=text: %d %q", code, body)
		}
		if code, body := raw("since=yesterday"); code != 400 || !strings.Contains(body, "invalid_argument") {
			t.Errorf("since=yesterday: %d %q; want 400 invalid_argument", code, body)
		}
	})

	t.Run("other_tenant", func(t *testing.T) {
		other := tenant(t, ctx, d, "logs-other")
		if _, err := readLogs(ctx, other, sb.ID, sandboxd.LogOptions{}); !isNotFound(err) {
			t.Errorf("another tenant's logs: %v; want not_found", err)
		}
		if _, err := other.Metrics(ctx, sb.ID); !isNotFound(err) {
			t.Errorf("another tenant's metrics: %v; want not_found", err)
		}
	})

	t.Run("follow", func(t *testing.T) {
		var mu sync.Mutex
		var seen []string
		done := make(chan error, 1)
		go func() {
			done <- c.Logs(ctx, sb.ID, sandboxd.LogOptions{Follow: true, Tail: 1}, func(l sandboxd.LogLine) error {
				mu.Lock()
				seen = append(seen, l.Text)
				mu.Unlock()
				return nil
			})
		}()
		has := func(s string) bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(strings.Join(seen, "|"), s)
		}
		pollUntil(t, ctx, "the follow's first line", func() bool { return has("later") })
		// A streamed process's lines, as they come.
		p, err := c.ExecStream(ctx, sb.ID, sandboxd.StreamRequest{Command: "echo streamed-1; sleep 1; echo streamed-2", Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		p.Close()
		pollUntil(t, ctx, "the streamed lines in the follow", func() bool { return has("streamed-1|streamed-2") })
		if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("StopSandbox: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("follow ended with %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the follow did not end within a minute of the sandbox's stop")
		}
		// A stopped sandbox's logs stay readable.
		got, err := readLogs(ctx, c, sb.ID, sandboxd.LogOptions{Tail: 2})
		if err != nil || strings.Join(texts(got), "|") != "stdout:streamed-1|stdout:streamed-2" {
			t.Errorf("logs of the stopped sandbox: %v, %v", texts(got), err)
		}
	})
}

// pollUntil polls cond until it holds or ctx ends.
func pollUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// daemonRSS is the daemon's resident set in bytes.
func daemonRSS(t *testing.T, d *daemonProcess) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID()))
	out := string(b)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestLogs_EndlessOutputIsBounded has a sandbox print 300 MB through a
// streamed exec whose client reads it all, then a run-to-completion one,
// and checks that the daemon keeps no more than its bound: the logs hold
// at most 1 MiB / 10,000 lines, and the daemon's RSS grew by far less than
// what went through (a generous 100 MB margin, for a busy shared daemon).
func TestLogs_EndlessOutputIsBounded(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, CPU: 1, MemoryMB: 128})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	before := daemonRSS(t, d)
	const total = 300 << 20
	p, err := c.ExecStream(ctx, sb.ID, sandboxd.StreamRequest{Command: fmt.Sprintf("yes 0123456789abcdef0123456789abcdef | head -c %d", total), Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if code, err := p.Wait(); err != nil || code != 0 {
		t.Fatalf("ExecStream: %d, %v", code, err)
	}
	p.Close()
	after := daemonRSS(t, d)
	lines, err := readLogs(ctx, c, sb.ID, sandboxd.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range lines {
		n += len(l.Text)
	}
	t.Logf("%d lines, %d bytes kept; daemon RSS %d MB → %d MB", len(lines), n, before>>20, after>>20)
	if len(lines) > 10000 || n > 1<<20 {
		t.Errorf("the logs keep %d lines, %d bytes; want at most 10000 lines and 1 MiB", len(lines), n)
	}
	if len(lines) == 0 || !strings.HasPrefix("0123456789abcdef0123456789abcdef", lines[len(lines)-1].Text) {
		t.Errorf("the last line kept is not the output's")
	}
	if grew := after - before; grew > 100<<20 {
		t.Errorf("the daemon's RSS grew by %d MB while %d MB went through", grew>>20, total>>20)
	}
}

// TestMetrics_SandboxUsage allocates 100 MB of memory and writes 50 MB of
// disk in a sandbox and reads them in the native metrics, the E2B
// facade's getMetrics (the sandbox's own disk: its limit, not the host's)
// and /metrics (an admin token; 401 without one).
func TestMetrics_SandboxUsage(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	c := newClient(d, true)
	const diskMB = 512
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, CPU: 0.5, MemoryMB: 512, DiskMB: diskMB})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	m0, err := c.Metrics(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	if m0.DiskLimitBytes != diskMB<<20 || m0.MemoryLimitBytes != 512<<20 {
		t.Errorf("limits: disk %d, memory %d; want %d and %d", m0.DiskLimitBytes, m0.MemoryLimitBytes, diskMB<<20, 512<<20)
	}

	// 100 MB held: dd's one 100 MB block, stuck writing to a pipe nobody reads.
	hold, err := c.ExecStream(ctx, sb.ID, sandboxd.StreamRequest{Command: "dd if=/dev/zero bs=104857600 count=1 | sleep 600", Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer hold.Close()
	defer hold.Signal("SIGKILL")
	if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "dd if=/dev/urandom of=/fifty bs=1048576 count=50 2>/dev/null && sync"}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	var m *sandboxd.SandboxMetrics
	// The disk figure may be up to 10 s old (the engine's count is cached).
	pollUntil(t, ctx, "100 MB more memory and 50 MB of disk in the metrics", func() bool {
		m, err = c.Metrics(ctx, sb.ID)
		return err == nil && m.MemoryBytes >= m0.MemoryBytes+95<<20 && m.DiskBytes >= 50<<20
	})
	if m.DiskBytes > 60<<20 {
		t.Errorf("disk %d bytes after writing 50 MB; want 50 MB (+ a little)", m.DiskBytes)
	}
	if m.CPUSeconds <= 0 || m.Pids == 0 {
		t.Errorf("cpu %v s, pids %d; want some", m.CPUSeconds, m.Pids)
	}

	get := func(path, header, value string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+path, nil)
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	t.Run("e2b_getMetrics", func(t *testing.T) {
		code, body := get("/sandboxes/"+sb.ID+"/metrics", "X-API-KEY", d.Token())
		var ms []struct {
			MemUsed   uint64 `json:"memUsed"`
			DiskUsed  uint64 `json:"diskUsed"`
			DiskTotal uint64 `json:"diskTotal"`
		}
		if code != 200 || json.Unmarshal(body, &ms) != nil || len(ms) != 1 {
			t.Fatalf("E2B metrics: %d %s", code, body)
		}
		if ms[0].DiskTotal != diskMB<<20 {
			t.Errorf("E2B diskTotal %d; want the sandbox's limit %d, not the host's disk", ms[0].DiskTotal, diskMB<<20)
		}
		if ms[0].DiskUsed < 50<<20 || ms[0].DiskUsed > 60<<20 {
			t.Errorf("E2B diskUsed %d; want the 50 MB the sandbox wrote", ms[0].DiskUsed)
		}
		if ms[0].MemUsed < 100<<20 {
			t.Errorf("E2B memUsed %d; want 100 MB or more", ms[0].MemUsed)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		if code, _ := get("/metrics", "", ""); code != http.StatusUnauthorized {
			t.Errorf("/metrics without a token: %d, want 401", code)
		}
		code, body := get("/metrics", "Authorization", "Bearer "+d.Token())
		if code != 200 {
			t.Fatalf("/metrics with the admin token: %d", code)
		}
		for _, series := range []string{"sandboxd_sandbox_memory_bytes", "sandboxd_sandbox_disk_bytes", "sandboxd_sandbox_cpu_seconds_total", "sandboxd_sandbox_network_receive_bytes_total"} {
			if !strings.Contains(string(body), series+`{sandbox="`+sb.ID+`"}`) {
				t.Errorf("/metrics has no %s of %s", series, sb.ID)
			}
		}
	})
}

// TestCLI_Logs runs sbx logs against the shared daemon: the streams to
// stdout and stderr, --tail, --since, --json, and -f that sees a new line
// and ends when the sandbox stops.
func TestCLI_Logs(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, CPU: 0.25, MemoryMB: 128})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	mustSbx(t, d, dir, "exec", sb.ID, "--", "sh", "-c", "echo out-1; echo err-1 >&2")
	mustSbx(t, d, dir, "exec", sb.ID, "--", "echo", "out-2")

	r := mustSbx(t, d, dir, "logs", sb.ID)
	if r.stdout != "out-1\nout-2\n" || r.stderr != "err-1\n" {
		t.Errorf("sbx logs: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r := mustSbx(t, d, dir, "logs", "--tail", "1", sb.ID); r.stdout != "out-2\n" || r.stderr != "" {
		t.Errorf("sbx logs --tail 1: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r := mustSbx(t, d, dir, "logs", "--since", time.Now().Add(time.Hour).Format(time.RFC3339), sb.ID); r.stdout != "" {
		t.Errorf("sbx logs --since <an hour ahead>: %q", r.stdout)
	}
	if r := sbx(t, d, dir, "logs", "--since", "yesterday", sb.ID); r.code != 2 || !strings.Contains(r.stderr, "--since") {
		t.Errorf("sbx logs --since yesterday: exit %d, %q; want 2 naming --since", r.code, r.stderr)
	}
	r = mustSbx(t, d, dir, "logs", "--json", "--tail", "1", sb.ID)
	var l sandboxd.LogLine
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.Text != "out-2" || l.Stream != "stdout" {
		t.Errorf("sbx logs --json: %q (%v)", r.stdout, err)
	}

	// -f: a new exec's line arrives, the stop ends it.
	var out syncBuffer
	cmd := sbxCommand(ctx, d, dir, "logs", "-f", "--tail", "1", sb.ID)
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pollUntil(t, ctx, "sbx logs -f's first line", func() bool { return out.String() == "out-2\n" })
	mustSbx(t, d, dir, "exec", sb.ID, "--", "echo", "out-3")
	pollUntil(t, ctx, "sbx logs -f's new line", func() bool { return out.String() == "out-2\nout-3\n" })
	mustSbx(t, d, dir, "stop", sb.ID)
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("sbx logs -f after the stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("sbx logs -f did not end within a minute of the sandbox's stop")
	}
}

// TestCLI_LogsEscapesOnATerminal: a sandbox's process writes terminal
// escapes (a clear-line and carriage return that would overwrite the -t
// prefix, an OSC 52 that would set the clipboard); sbx logs on a
// terminal prints them escaped, --raw as they are.
func TestCLI_LogsEscapesOnATerminal(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	c := newClient(d, true)
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, CPU: 0.25, MemoryMB: 128})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	mustSbx(t, d, dir, "exec", sb.ID, "--", "printf", `a\tb\033[2K\rFAKE \033]52;c;cHduZWQ=\007\n`)
	onTerminal := func(args ...string) string {
		t.Helper()
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pseudo-terminal: %v", err)
		}
		defer ptmx.Close()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(ptmx) // EIO once sbx and our copy of its side are closed
			got <- b
		}()
		cmd := sbxCommand(ctx, d, dir, args...)
		cmd.Stdout = tty
		err = cmd.Run()
		tty.Close()
		if err != nil {
			t.Fatalf("sbx %v: %v", args, err)
		}
		select {
		case b := <-got:
			return strings.ReplaceAll(string(b), "\r\n", "\n")
		case <-ctx.Done():
			t.Fatal("the terminal's output did not end")
			return ""
		}
	}
	if got, want := onTerminal("logs", sb.ID), "a\tb\\x1b[2K\\x0dFAKE \\x1b]52;c;cHduZWQ=\\x07\n"; got != want {
		t.Errorf("sbx logs on a terminal: %q; want %q", got, want)
	}
	if got := onTerminal("logs", "--raw", sb.ID); !strings.Contains(got, "\x1b]52;c;") {
		t.Errorf("sbx logs --raw: %q; want the escapes as they are", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogs_StartCommand builds a template with a start command and reads
// that command's output in the logs of a sandbox made from it, as it
// comes (follow).
func TestLogs_StartCommand(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	c := newClient(d, true)
	name := "logs-start-" + sandboxd.NewIdempotencyKey()[:8]
	tpl, err := c.BuildTemplate(ctx, sandboxd.Recipe{Name: name, Base: busyboxImage, StartCmd: "echo start-1; echo start-err >&2; sleep 2; echo start-2; sleep 600"})
	if err != nil {
		t.Fatalf("BuildTemplate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteTemplate(ctx, tpl.ID); err != nil && !isNotFound(err) {
			t.Errorf("cleanup: delete template %s: %v", tpl.ID, err)
		}
	})
	pollUntil(t, ctx, "the template build", func() bool {
		got, err := c.GetTemplate(ctx, tpl.ID)
		if err == nil && got.State == "failed" {
			t.Fatalf("build failed: %s", got.Error)
		}
		return err == nil && got.State == sandboxd.TemplateReady
	})
	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Template: tpl.ID, CPU: 0.25, MemoryMB: 128})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	var mu sync.Mutex
	var seen []string
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = c.Logs(fctx, sb.ID, sandboxd.LogOptions{Follow: true}, func(l sandboxd.LogLine) error {
			mu.Lock()
			defer mu.Unlock()
			if l.Source == "start" {
				seen = append(seen, l.Stream+":"+l.Text)
			}
			return nil
		})
	}()
	pollUntil(t, ctx, "the start command's lines", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(seen, "|"), "start-2")
	})
	mu.Lock()
	defer mu.Unlock()
	mu.Unlock()
	// Daytona's process.getEntrypointLogs reads the same lines.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/daytona/api/toolbox/"+sb.ID+"/process/session/entrypoint/logs", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ep struct{ Output, Stdout, Stderr string }
	err = json.NewDecoder(resp.Body).Decode(&ep)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || ep.Stdout != "start-1\nstart-2\n" || ep.Stderr != "start-err\n" || len(ep.Output) != len("start-1\nstart-2\nstart-err\n") {
		t.Errorf("Daytona entrypoint logs: %d %+v (%v)", resp.StatusCode, ep, err)
	}
	// E2B's logs routes (no SDK method calls them): v2 newest first.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/v2/sandboxes/"+sb.ID+"/logs?direction=backward&limit=2", nil)
	req.Header.Set("X-API-KEY", d.Token())
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	var v2 struct {
		Logs []struct {
			Level, Message string
			Fields         map[string]string
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&v2)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(v2.Logs) != 2 || v2.Logs[0].Message != "start-2" || v2.Logs[0].Fields["source"] != "start" {
		t.Errorf("E2B v2 logs: %d %+v (%v)", resp.StatusCode, v2, err)
	}
	mu.Lock()
	// The agent reads stdout and stderr apart: their order between them
	// is not kept, within one it is.
	got := strings.Join(seen, "|")
	if len(seen) != 3 || !strings.Contains(got, "stderr:start-err") || strings.Index(got, "start-1") > strings.Index(got, "start-2") {
		t.Errorf("start command's lines %q; want stdout start-1 then start-2, and stderr start-err", got)
	}
}

// TestLogs_KeptByTheAgentSurviveADaemonRestart prints lines in a sandbox
// through the native exec and through envd's process API directly (as
// E2B's SDKs start processes: the daemon only proxies them), SIGKILLs the
// daemon, starts it again, and reads every one of those lines back
// through GET /v1/sandboxes/{id}/logs. Then: a follow after the restart
// sees a new line; a paused sandbox's logs are a 409 at once; a stopped
// one's answer what they held at the stop.
func TestLogs_KeptByTheAgentSurviveADaemonRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "logsrestart")
	c := newClient(d, true)
	body, _ := json.Marshal(map[string]any{"templateID": busyboxImage})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v2/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-KEY", d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	_ = json.Unmarshal(raw, &sb)
	if sb.SandboxID != "" {
		destroyAtEnd(t, c, sb.SandboxID)
	}
	if resp.StatusCode != http.StatusCreated || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, raw)
	}
	id := sb.SandboxID

	if _, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: "echo before-1; echo before-2 >&2"}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	// envd's Start, through the daemon's proxy, as the E2B SDK sends it.
	proc := processconnect.NewProcessClient(&http.Client{Transport: envdHeaders{id, sb.EnvdAccessToken}}, d.URL(), connect.WithProtoJSON())
	st, err := proc.Start(ctx, connect.NewRequest(&procrpc.StartRequest{
		Process: &procrpc.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo from-envd"}},
	}))
	if err != nil {
		t.Fatalf("envd Start: %v", err)
	}
	var envdPID uint32
	for st.Receive() {
		if s := st.Msg().GetEvent().GetStart(); s != nil {
			envdPID = s.GetPid()
		}
	}
	st.Close()
	if err := st.Err(); err != nil || envdPID == 0 {
		t.Fatalf("envd Start stream: pid %d, %v", envdPID, err)
	}

	if err := d.Restart(ctx); err != nil { // SIGKILL, then a fresh start
		t.Fatalf("restart: %v\nlog:\n%s", err, d.LogTail(40))
	}
	lines, err := readLogs(ctx, c, id, sandboxd.LogOptions{})
	if err != nil {
		t.Fatalf("Logs after the restart: %v", err)
	}
	got := strings.Join(texts(lines), "|")
	for _, want := range []string{"stdout:before-1", "stderr:before-2", "stdout:from-envd"} {
		if !strings.Contains(got, want) {
			t.Errorf("logs after a SIGKILL and restart of the daemon: %q; want %q among them", got, want)
		}
	}
	for _, l := range lines {
		if l.Text == "from-envd" && l.Source != fmt.Sprintf("pid-%d", envdPID) {
			t.Errorf("the envd process's line has source %q; want pid-%d", l.Source, envdPID)
		}
	}

	// A follow after the restart sees a new line.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan string, 64)
	go func() {
		_ = c.Logs(fctx, id, sandboxd.LogOptions{Follow: true, Tail: 1}, func(l sandboxd.LogLine) error {
			followed <- l.Text
			return nil
		})
	}()
	if _, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: "echo after-restart"}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	deadline := time.After(time.Minute)
	for seen := ""; seen != "after-restart"; {
		select {
		case seen = <-followed:
		case <-deadline:
			t.Fatal("the follow did not see the new line within a minute")
		}
	}
	cancel()

	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = readLogs(pctx, c, id, sandboxd.LogOptions{Follow: true})
	pcancel()
	if !errors.Is(err, sandboxd.ErrConflict) {
		t.Errorf("logs of a paused sandbox: %v; want a conflict (409) at once", err)
	}
	if _, err := c.StopSandbox(ctx, id); err != nil {
		t.Fatalf("StopSandbox: %v", err)
	}
	lines, err = readLogs(ctx, c, id, sandboxd.LogOptions{Tail: 1})
	if err != nil || strings.Join(texts(lines), "|") != "stdout:after-restart" {
		t.Errorf("logs of the stopped sandbox: %v, %v; want its last line", texts(lines), err)
	}
}
