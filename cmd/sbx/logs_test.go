package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// hostileLogs is a logs answer whose lines try a terminal: a clear-line
// and carriage return that would overwrite the -t prefix, an OSC 52 that
// would set the clipboard, a C1 CSI; then the daemon's trailing error
// record (the agent's answer broke off after the 200).
const hostileLogs = `{"time":"2026-01-01T00:00:00Z","source":"pid-1","stream":"stdout","text":"a\tb\u001b[2K\rFAKE \u001b]52;c;cHduZWQ=\u0007 \u009b31m"}
{"error":{"code":"unavailable","message":"the sandbox's agent's log answer broke off","retryable":true}}
`

func logsServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb-1/logs" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, hostileLogs)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// sbxOnTerminal runs the CLI against srv with its stdout on a terminal,
// and returns what the terminal got (newlines as the terminal's \r\n
// made \n again), the exit code and stderr.
func sbxOnTerminal(t *testing.T, srv *httptest.Server, args ...string) (string, int, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(ptmx) // EIO once the terminal's side closes
		got <- b
	}()
	var stderr bytes.Buffer
	env := map[string]string{"SBX_API_URL": srv.URL, "SBX_TOKEN": testToken}
	c := &cli{
		stdin: strings.NewReader(""), stdout: tty, stderr: &stderr,
		getenv: func(k string) string { return env[k] },
		getwd:  func() (string, error) { return t.TempDir(), nil },
	}
	code := c.run(t.Context(), args)
	tty.Close()
	var out []byte
	select {
	case out = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n"), code, stderr.String()
}

// TestLogs_TerminalEscapesAndTrailingError: printed to a terminal, a
// line's control characters (tab kept) are escaped, in the -t prefix's
// source too; --raw prints them as they are; the daemon's trailing error
// record is the command's error (exit code and message), after the lines.
func TestLogs_TerminalEscapesAndTrailingError(t *testing.T) {
	srv := logsServer(t)
	out, code, stderr := sbxOnTerminal(t, srv, "logs", "sb-1")
	want := "a\tb\\x1b[2K\\x0dFAKE \\x1b]52;c;cHduZWQ=\\x07 \\u009b31m\n"
	if out != want {
		t.Errorf("on a terminal: %q; want %q", out, want)
	}
	if code == exitOK || !strings.Contains(stderr, "broke off") {
		t.Errorf("exit %d, stderr %q; want a failure naming the broken answer", code, stderr)
	}
	out, _, _ = sbxOnTerminal(t, srv, "logs", "--raw", "sb-1")
	if !strings.Contains(out, "\x1b]52;c;") {
		t.Errorf("--raw: %q; want the line as it is", out)
	}
	// Not a terminal: as they are.
	r := sbx(t, srv, "", "logs", "sb-1")
	if !strings.Contains(r.stdout, "\x1b[2K\r") || r.code == exitOK {
		t.Errorf("to a pipe: %q, exit %d; want the line as it is and a failure", r.stdout, r.code)
	}
}
