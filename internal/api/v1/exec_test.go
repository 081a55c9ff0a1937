package v1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

type execResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timed_out"`
}

func TestExec(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	path := "/v1/sandboxes/" + id + "/exec"
	tests := []struct {
		name string
		body string
		want execResult
	}{
		{"argv", `{"cmd":["echo","hello"]}`, execResult{Stdout: "hello\n"}},
		{"exit code", `{"command":"exit 7"}`, execResult{ExitCode: 7}},
		{"streams apart", `{"command":"echo out; echo err >&2; exit 1"}`, execResult{ExitCode: 1, Stdout: "out\n", Stderr: "err\n"}},
		{"stdin", `{"cmd":["cat"],"stdin":"from stdin"}`, execResult{Stdout: "from stdin"}},
		{"env and cwd", `{"command":"echo $GREETING; pwd","env":{"GREETING":"hi"},"cwd":"/tmp"}`, execResult{Stdout: "hi\n/tmp\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode[execResult](t, do(t, tok, "POST", path, tt.body), http.StatusOK)
			got.DurationMS = 0
			if got != tt.want {
				t.Errorf("exec %s = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}

	t.Run("truncated", func(t *testing.T) {
		// 2 MiB of 'a' on stdout, a little on stderr.
		got := decode[execResult](t, do(t, tok, "POST", path,
			`{"command":"head -c 2097152 /dev/zero | tr '\\0' a; echo tail >&2"}`), http.StatusOK)
		if !got.Truncated || len(got.Stdout) != 1<<20 || strings.Trim(got.Stdout, "a") != "" || got.Stderr != "tail\n" {
			t.Errorf("truncated = %v, stdout %d bytes, stderr %q", got.Truncated, len(got.Stdout), got.Stderr)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		got := decode[execResult](t, do(t, tok, "POST", path, `{"cmd":["sleep","30"],"timeout_s":1}`), http.StatusOK)
		if !got.TimedOut || got.ExitCode == 0 || time.Since(start) > 15*time.Second {
			t.Errorf("timeout: %+v after %v", got, time.Since(start))
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, body := range []string{`{}`, `{"cmd":["a"],"command":"b"}`, `{"cmd":[""]}`, `{"cmd":["true"],"timeout_s":-1}`, `{"cmd":"true"}`, `{"cmd":["true"],"shell":true}`} {
			wantError(t, do(t, tok, "POST", path, body), 400, "invalid_argument")
		}
	})
}

// stream is a client of exec/stream.
type stream struct {
	t    *testing.T
	conn *websocket.Conn
	out  string // output read by untilOutput and not matched yet
}

type frame struct {
	Type     string `json:"type"`
	PID      int    `json:"pid"`
	Data     []byte `json:"data"`
	ExitCode *int   `json:"exit_code"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func dialStream(t *testing.T, tok, id string, start any) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.URL, "http")+"/v1/sandboxes/"+id+"/exec/stream",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	conn.SetReadLimit(4 << 20)
	s := &stream{t: t, conn: conn}
	s.sendJSON(start)
	return s
}

func (s *stream) sendJSON(v any) {
	s.t.Helper()
	b, _ := json.Marshal(v)
	if err := s.conn.Write(s.t.Context(), websocket.MessageText, b); err != nil {
		s.t.Fatalf("write: %v", err)
	}
}

func (s *stream) stdin(b string) {
	s.t.Helper()
	if err := s.conn.Write(s.t.Context(), websocket.MessageBinary, []byte(b)); err != nil {
		s.t.Fatalf("write stdin: %v", err)
	}
}

func (s *stream) next() frame {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	typ, b, err := s.conn.Read(ctx)
	if err != nil {
		s.t.Fatalf("read: %v", err)
	}
	var f frame
	if typ != websocket.MessageText || json.Unmarshal(b, &f) != nil {
		s.t.Fatalf("server frame %q is not JSON text", b)
	}
	return f
}

// until reads frames until one of type typ, collecting stdout and stderr.
func (s *stream) until(typ string) (f frame, stdout, stderr string) {
	s.t.Helper()
	for {
		f = s.next()
		switch f.Type {
		case typ:
			return f, stdout, stderr
		case "stdout":
			stdout += string(f.Data)
		case "stderr":
			stderr += string(f.Data)
		case "error":
			s.t.Fatalf("error frame: %+v", *f.Error)
		}
	}
}

// untilOutput reads output until what it read (and did not match before)
// contains want, and consumes it up to the end of want.
func (s *stream) untilOutput(want string) {
	s.t.Helper()
	for !strings.Contains(s.out, want) {
		f := s.next()
		if f.Type != "stdout" && f.Type != "stderr" {
			s.t.Fatalf("got %s frame before output %q (so far %q)", f.Type, want, s.out)
		}
		s.out += string(f.Data)
	}
	s.out = s.out[strings.Index(s.out, want)+len(want):]
}

func TestExecStream_Stdin(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	s := dialStream(t, tok, id, map[string]any{"type": "start", "cmd": []string{"sh", "-c", "cat; echo done >&2"}})
	if f := s.next(); f.Type != "started" || f.PID <= 0 {
		t.Fatalf("first frame %+v, want started with a pid", f)
	}
	s.stdin("hello ")
	s.stdin("world")
	s.sendJSON(map[string]string{"type": "stdin_close"})
	f, stdout, stderr := s.until("exit")
	if *f.ExitCode != 0 || stdout != "hello world" || stderr != "done\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", *f.ExitCode, stdout, stderr)
	}
	if _, _, err := s.conn.Read(t.Context()); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}

func TestExecStream_PTY(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	s := dialStream(t, tok, id, map[string]any{"type": "start", "command": "stty size; read x; stty size; echo got:$x",
		"pty": map[string]int{"cols": 80, "rows": 24}})
	s.until("started")
	s.untilOutput("24 80")
	s.sendJSON(map[string]any{"type": "resize", "cols": 120, "rows": 40})
	s.stdin("line\n")
	s.untilOutput("40 120")
	s.untilOutput("got:line")
	if f, _, _ := s.until("exit"); *f.ExitCode != 0 {
		t.Errorf("exit %d", *f.ExitCode)
	}
}

func TestExecStream_Signal(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	tests := []struct {
		signal string
		pty    bool
	}{
		{"SIGTERM", false},
		{"SIGKILL", false},
		{"SIGINT", true}, // sent as ^C on the terminal
	}
	for _, tt := range tests {
		t.Run(tt.signal, func(t *testing.T) {
			start := map[string]any{"type": "start", "cmd": []string{"sleep", "300"}}
			if tt.pty {
				start["pty"] = map[string]int{"cols": 80, "rows": 24}
			}
			s := dialStream(t, tok, id, start)
			s.until("started")
			s.sendJSON(map[string]string{"type": "signal", "signal": tt.signal})
			if f, _, _ := s.until("exit"); *f.ExitCode == 0 {
				t.Errorf("signalled process exited 0")
			}
		})
	}
}

// TestExecStream_CloseKills: closing the socket kills the process.
func TestExecStream_CloseKills(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	// The sandbox is shared: look for this test's own sleep only, named by
	// a duration no other test uses. The pattern's [p] keeps the grep
	// from matching its own shell.
	marker := fmt.Sprintf("417%09d", rand.N(1_000_000_000))
	s := dialStream(t, tok, id, map[string]any{"type": "start", "cmd": []string{"sleep", marker}})
	s.until("started")
	s.conn.Close(websocket.StatusNormalClosure, "")

	testenv.WaitFor(t, "the process to end with its socket", func() error {
		got := decode[execResult](t, do(t, tok, "POST", "/v1/sandboxes/"+id+"/exec",
			`{"command":"ps -o args | grep -c 'slee[p] `+marker+`' || true"}`), http.StatusOK)
		if strings.TrimSpace(got.Stdout) != "0" {
			return fmt.Errorf("the process outlived its socket: %+v", got)
		}
		return nil
	})
}

func TestExecStream_BadStart(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	for _, start := range []any{
		map[string]any{"type": "resize", "cols": 1, "rows": 1},
		map[string]any{"type": "start"},
		map[string]any{"type": "start", "cmd": []string{"true"}, "bogus": 1},
		map[string]any{"type": "start", "cmd": []string{"true"}, "pty": map[string]int{"cols": 0, "rows": 0}},
	} {
		s := dialStream(t, tok, id, start)
		f := s.next()
		if f.Type != "error" || f.Error == nil || f.Error.Code != "invalid_argument" {
			t.Errorf("start %v: frame %+v, want an invalid_argument error frame", start, f)
		}
		if _, _, err := s.conn.Read(t.Context()); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Errorf("start %v: %v, want close 1008", start, err)
		}
	}
	// Not found is a plain HTTP answer, before the upgrade.
	_, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(env.URL, "http")+"/v1/sandboxes/sb-ffffffffffffffff/exec/stream",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("dial an unknown sandbox: %v, %v; want 404", resp, err)
	}
}
