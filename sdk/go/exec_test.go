package sandboxd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// wsPeer is the server side of one exec stream in a test.
type wsPeer struct {
	t    *testing.T
	conn *websocket.Conn
	ctx  context.Context
}

func (p *wsPeer) send(v map[string]any) {
	p.t.Helper()
	b, _ := json.Marshal(v)
	if err := p.conn.Write(p.ctx, websocket.MessageText, b); err != nil {
		p.t.Errorf("server write: %v", err)
	}
}

func (p *wsPeer) output(stream, data string) {
	p.send(map[string]any{"type": stream, "data": base64.StdEncoding.EncodeToString([]byte(data))})
}

// next returns the next frame: text frames decoded, binary ones as
// {"type": "binary", "data": "…"}.
func (p *wsPeer) next() (map[string]any, error) {
	typ, b, err := p.conn.Read(p.ctx)
	if err != nil {
		return nil, err
	}
	if typ == websocket.MessageBinary {
		return map[string]any{"type": "binary", "data": string(b)}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// streamServer runs script for each exec stream it accepts.
func streamServer(t *testing.T, script func(p *wsPeer)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb-0123456789abcdef/exec/stream" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
			t.Errorf("Authorization = %q", got)
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer conn.CloseNow()
		script(&wsPeer{t: t, conn: conn, ctx: r.Context()})
	})
}

func TestExecStream_Frames(t *testing.T) {
	var mu sync.Mutex
	var frames []map[string]any
	big := strings.Repeat("x", 100<<10) // beyond the default 32 KiB message limit
	h := streamServer(t, func(p *wsPeer) {
		var stdin bytes.Buffer
		for {
			f, err := p.next()
			if err != nil {
				t.Errorf("server read: %v", err)
				return
			}
			mu.Lock()
			frames = append(frames, f)
			mu.Unlock()
			switch f["type"] {
			case "start":
				p.send(map[string]any{"type": "started", "pid": 42})
				p.output("stdout", "hello ")
				p.output("stderr", "warming up\n")
			case "binary":
				stdin.WriteString(f["data"].(string))
			case "stdin_close":
				p.output("stdout", "stdin: "+stdin.String()+"\n")
				p.output("stdout", big)
			case "signal":
				p.output("stderr", "got "+f["signal"].(string)+"\n")
				p.send(map[string]any{"type": "exit", "exit_code": 3})
				p.conn.Close(websocket.StatusNormalClosure, "")
				return
			}
		}
	})
	c, _ := newClient(t, h)
	p, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{
		Cmd: []string{"cat"}, Env: map[string]string{"A": "1"}, Cwd: "/w", User: "u",
		PTY: &sandboxd.PTYSize{Cols: 80, Rows: 24},
	})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer p.Close()
	if p.PID() != 42 {
		t.Errorf("PID = %d, want 42", p.PID())
	}
	var stdout, stderr []byte
	var wg sync.WaitGroup
	wg.Go(func() { stdout, _ = io.ReadAll(p.Stdout()) })
	wg.Go(func() { stderr, _ = io.ReadAll(p.Stderr()) })

	if _, err := p.Write([]byte("ping")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	for _, step := range []func() error{
		p.CloseStdin,
		func() error { return p.Resize(120, 40) },
		func() error { return p.Signal("SIGINT") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	code, err := p.Wait()
	wg.Wait()
	if code != 3 || err != nil {
		t.Errorf("Wait = %d, %v; want 3, nil", code, err)
	}
	if want := "hello stdin: ping\n" + big; string(stdout) != want {
		t.Errorf("stdout = %.40q… (%d bytes), want %.40q… (%d bytes)", stdout, len(stdout), want, len(want))
	}
	if want := "warming up\ngot SIGINT\n"; string(stderr) != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	want := []map[string]any{
		{"type": "start", "cmd": []any{"cat"}, "env": map[string]any{"A": "1"}, "cwd": "/w", "user": "u",
			"pty": map[string]any{"cols": 80.0, "rows": 24.0}},
		{"type": "binary", "data": "ping"},
		{"type": "stdin_close"},
		{"type": "resize", "cols": 120.0, "rows": 40.0},
		{"type": "signal", "signal": "SIGINT"},
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, frames); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	if _, err := p.Write([]byte("late")); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Write after exit = %v, want os.ErrProcessDone", err)
	}
}

func TestExecStream_Writers(t *testing.T) {
	h := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.output("stdout", "out")
		p.output("stderr", "err")
		p.send(map[string]any{"type": "exit", "exit_code": 0})
		p.conn.Close(websocket.StatusNormalClosure, "")
	})
	c, _ := newClient(t, h)
	var stdout, stderr bytes.Buffer
	p, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{
		Command: "echo", Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if stdout.String() != "out" || stderr.String() != "err" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if p.Stdout() != nil {
		t.Error("Stdout() != nil although a writer was given")
	}
}

func TestExecStream_ErrorFrameBeforeStart(t *testing.T) {
	h := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.send(map[string]any{"type": "error", "error": map[string]any{"code": "invalid_argument", "message": "no such user"}})
		p.conn.Close(websocket.StatusNormalClosure, "")
	})
	c, _ := newClient(t, h)
	_, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{Cmd: []string{"id"}, User: "nobody2"})
	if !errors.Is(err, sandboxd.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

func TestExecStream_HandshakeRefused(t *testing.T) {
	c, _ := newClient(t, streamServer(t, func(*wsPeer) {}))
	_, err := c.ExecStream(t.Context(), "sb-ffffffffffffffff", sandboxd.StreamRequest{Cmd: []string{"true"}})
	if !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestExecStream_HandshakeRetried(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	inner := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.send(map[string]any{"type": "exit", "exit_code": 0})
		p.conn.Close(websocket.StatusNormalClosure, "")
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			replyError(503, "unavailable", "agent not ready", true)(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	})
	c, s := newClient(t, h)
	p, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{Cmd: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	defer p.Close()
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Errorf("Wait = %d, %v", code, err)
	}
	if len(s.all()) != 1 {
		t.Errorf("waits = %v, want one retry", s.all())
	}
}

func TestExecStream_CloseEndsProcess(t *testing.T) {
	serverSawClose := make(chan error, 1)
	h := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.send(map[string]any{"type": "started", "pid": 7})
		_, err := p.next() // blocks until the client goes away
		serverSawClose <- err
	})
	c, _ := newClient(t, h)
	p, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if code, err := p.Wait(); code != -1 || err == nil {
		t.Errorf("Wait after Close = %d, %v; want -1 and an error", code, err)
	}
	select {
	case err := <-serverSawClose:
		if err == nil {
			t.Error("server read a frame, want the connection closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server never saw the stream close")
	}
}

func TestExecStream_ContextEndsProcess(t *testing.T) {
	h := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.send(map[string]any{"type": "started", "pid": 7})
		p.output("stdout", "nobody reads this") // the read loop blocks on the pipe
		p.next()
	})
	c, _ := newClient(t, h)
	ctx, cancel := context.WithCancel(t.Context())
	p, err := c.ExecStream(ctx, "sb-0123456789abcdef", sandboxd.StreamRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cancel()
	if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
}

func TestExecStream_BrokenStream(t *testing.T) {
	h := streamServer(t, func(p *wsPeer) {
		if _, err := p.next(); err != nil {
			return
		}
		p.send(map[string]any{"type": "started", "pid": 7})
		p.conn.CloseNow() // no exit frame
	})
	c, _ := newClient(t, h)
	p, err := c.ExecStream(t.Context(), "sb-0123456789abcdef", sandboxd.StreamRequest{Cmd: []string{"x"}, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	code, err := p.Wait()
	if code != -1 || err == nil {
		t.Errorf("Wait = %d, %v; want -1 and an error", code, err)
	}
}
