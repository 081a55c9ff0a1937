package daytona_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
)

// ptyConn is a client of a terminal's WebSocket.
type ptyConn struct {
	t    *testing.T
	conn *websocket.Conn
	ctx  context.Context
	out  strings.Builder // terminal output so far
	ctl  []map[string]any
}

func dialPTY(t *testing.T, s *stack, path string, protocols ...string) *ptyConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	url := "ws" + strings.TrimPrefix(s.URL, "http") + daytona.Prefix + path
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + s.Admin}},
		Subprotocols: protocols,
	})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return &ptyConn{t: t, conn: conn, ctx: ctx}
}

// until reads until cond holds on the output and control messages so far;
// it returns the close error if the connection ends first.
func (p *ptyConn) until(cond func() bool) error {
	p.t.Helper()
	for !cond() {
		typ, data, err := p.conn.Read(p.ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageText {
			var m map[string]any
			if json.Unmarshal(data, &m) == nil && m["type"] == "control" {
				p.ctl = append(p.ctl, m)
				continue
			}
		}
		p.out.Write(data)
	}
	return nil
}

func (p *ptyConn) send(s string) {
	p.t.Helper()
	if err := p.conn.Write(p.ctx, websocket.MessageBinary, []byte(s)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *ptyConn) status(i int) string {
	if len(p.ctl) <= i {
		return ""
	}
	s, _ := p.ctl[i]["status"].(string)
	return s
}

func TestPTY_CreateConnectResizeReconnectExit(t *testing.T) {
	s, sb := sharedSandbox(t)
	base := "/toolbox/" + sb.ID + "/process/pty"
	id := "pty-" + time.Now().Format("150405.000000")
	envs := base64.RawURLEncoding.EncodeToString([]byte(`{"PTY_FOO":"bar"}`))

	p := dialPTY(t, s, base+"/create-connect?id="+id+"&cols=80&rows=24", "X-Daytona-Pty-Envs~"+envs, "X-Daytona-Pty-Exit-Control")
	if got := p.conn.Subprotocol(); got != "X-Daytona-Pty-Exit-Control" {
		t.Errorf("subprotocol %q, want the exit-control token", got)
	}
	if err := p.until(func() bool { return len(p.ctl) > 0 }); err != nil || p.status(0) != "connected" {
		t.Fatalf("first control %v (err %v), want connected", p.ctl, err)
	}
	p.send("echo \"foo=$PTY_FOO user=$(whoami)\"; stty size; tty\n")
	if err := p.until(func() bool {
		o := p.out.String()
		return strings.Contains(o, "foo=bar user=daytona") && strings.Contains(o, "24 80") && strings.Contains(o, "/dev/pts/")
	}); err != nil {
		t.Fatalf("output %q: %v", p.out.String(), err)
	}

	// Resize: the shell sees the new size; the info reports it.
	resp := s.do(t, s.Admin, http.MethodPost, base+"/"+id+"/resize", map[string]int{"cols": 100, "rows": 30})
	var info struct {
		ID     string
		Cols   int
		Rows   int
		Active bool
		Cwd    string
	}
	decode(t, resp.body, &info)
	if resp.status != http.StatusOK || info.Cols != 100 || info.Rows != 30 || !info.Active || info.Cwd != "/home/daytona" {
		t.Errorf("resize: %d %s", resp.status, resp.body)
	}
	p.send("stty size\n")
	if err := p.until(func() bool { return strings.Contains(p.out.String(), "30 100") }); err != nil {
		t.Fatalf("after resize %q: %v", p.out.String(), err)
	}
	var list struct{ Sessions []struct{ ID string } }
	decode(t, s.do(t, s.Admin, http.MethodGet, base, nil).body, &list)
	if !strings.Contains(string(s.do(t, s.Admin, http.MethodGet, base, nil).body), `"id":"`+id+`"`) {
		t.Errorf("list %+v lacks %s", list, id)
	}

	// Disconnect; the shell lives on, and a new client reconnects to it.
	p.send("export KEPT=yes\n")
	p.conn.Close(websocket.StatusNormalClosure, "")
	q := dialPTY(t, s, base+"/"+id+"/connect", "X-Daytona-Pty-Exit-Control")
	if err := q.until(func() bool { return len(q.ctl) > 0 }); err != nil || q.status(0) != "connected" {
		t.Fatalf("reconnect: %v %v", q.ctl, err)
	}
	q.send("echo \"kept=$KEPT\"\n")
	if err := q.until(func() bool { return strings.Contains(q.out.String(), "kept=yes") }); err != nil {
		t.Fatalf("reconnected output %q: %v", q.out.String(), err)
	}

	// Exit 3: an exited control message with the code, then a close whose
	// reason carries it.
	q.send("exit 3\n")
	err := q.until(func() bool { return false })
	if websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Errorf("close %v, want 1011", err)
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Reason != `{"exitCode":3,"exitReason":"non-zero exit"}` {
		t.Errorf("close reason %q", ce.Reason)
	}
	if n := len(q.ctl); n < 2 || q.status(n-1) != "exited" || q.ctl[n-1]["exitCode"] != float64(3) {
		t.Errorf("controls %v, want exited with 3 last", q.ctl)
	}
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"/"+id, nil).body, &info)
	if info.Active {
		t.Errorf("after exit: %+v, want inactive", info)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, base+"/"+id+"/resize", map[string]int{"cols": 10, "rows": 10}), http.StatusGone)

	// Connecting to an ended or unknown terminal is an error control message.
	r := dialPTY(t, s, base+"/nope/connect", "X-Daytona-Pty-Exit-Control")
	r.until(func() bool { return len(r.ctl) > 0 })
	if r.status(0) != "error" {
		t.Errorf("unknown terminal: %v", r.ctl)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, base+"/nope", nil), http.StatusNotFound)
}

func TestPTY_KillEndsTheShellWithSIGKILL(t *testing.T) {
	s, sb := sharedSandbox(t)
	base := "/toolbox/" + sb.ID + "/process/pty"
	id := "kill-" + time.Now().Format("150405.000000")
	if resp := s.do(t, s.Admin, http.MethodPost, base, map[string]any{"id": id, "cols": 40, "rows": 10}); resp.status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, base, map[string]any{"id": id}), http.StatusConflict)
	p := dialPTY(t, s, base+"/"+id+"/connect", "X-Daytona-Pty-Exit-Control")
	if err := p.until(func() bool { return len(p.ctl) > 0 }); err != nil || p.status(0) != "connected" {
		t.Fatalf("connect: %v %v", p.ctl, err)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, base+"/"+id, nil); resp.status != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	err := p.until(func() bool { return false })
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Reason != `{"exitCode":137,"exitReason":"SIGKILL"}` {
		t.Errorf("close %v, want exit 137 SIGKILL", err)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, base+"/"+id, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.Admin, http.MethodPost, base, map[string]any{"id": id, "cols": 5000}), http.StatusBadRequest)
}

// A stop ends a sandbox's terminals and interpreter contexts with its
// processes: after a start none is listed, and a client attached to a
// terminal gets its close.
func TestPTY_StopDropsTerminalsAndContexts(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	base := "/toolbox/" + sb.ID + "/process"
	if resp := s.do(t, s.Admin, http.MethodPost, base+"/pty", map[string]any{"id": "t1"}); resp.status != http.StatusCreated {
		t.Fatalf("create pty: %d %s", resp.status, resp.body)
	}
	if resp := s.do(t, s.Admin, http.MethodPost, base+"/interpreter/context", map[string]any{}); resp.status != http.StatusOK {
		t.Fatalf("create context: %d %s", resp.status, resp.body)
	}
	p := dialPTY(t, s, base+"/pty/t1/connect")
	if err := p.until(func() bool { return len(p.ctl) > 0 }); err != nil {
		t.Fatal(err)
	}
	if resp := s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/stop", nil); resp.status/100 != 2 {
		t.Fatalf("stop: %d %s", resp.status, resp.body)
	}
	if err := p.until(func() bool { return false }); p.ctx.Err() != nil {
		t.Errorf("the client is still attached after the stop: %v", err)
	}
	if resp := s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/start", nil); resp.status/100 != 2 {
		t.Fatalf("start: %d %s", resp.status, resp.body)
	}
	for path, want := range map[string]string{base + "/pty": `{"sessions":[]}`, base + "/interpreter/context": `{"contexts":[]}`} {
		if got := strings.TrimSpace(string(s.do(t, s.Admin, http.MethodGet, path, nil).body)); got != want {
			t.Errorf("GET %s after stop and start: %s, want %s", path, got, want)
		}
	}
}

// lazyStart: the shell starts at the first connect, with the size the
// terminal had then (a resize before it is kept).
func TestPTY_LazyStartsAtTheFirstConnect(t *testing.T) {
	s, sb := sharedSandbox(t)
	base := "/toolbox/" + sb.ID + "/process/pty"
	id := "lazy-" + time.Now().Format("150405.000000")
	if resp := s.do(t, s.Admin, http.MethodPost, base, map[string]any{"id": id, "lazyStart": true}); resp.status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var info struct {
		Active    bool
		LazyStart bool
	}
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"/"+id, nil).body, &info)
	if info.Active || !info.LazyStart {
		t.Errorf("before the connect: %+v, want inactive and lazy", info)
	}
	if resp := s.do(t, s.Admin, http.MethodPost, base+"/"+id+"/resize", map[string]int{"cols": 33, "rows": 11}); resp.status != http.StatusOK {
		t.Fatalf("resize: %d %s", resp.status, resp.body)
	}
	p := dialPTY(t, s, base+"/"+id+"/connect")
	if err := p.until(func() bool { return len(p.ctl) > 0 }); err != nil || p.status(0) != "connected" {
		t.Fatalf("connect: %v %v", p.ctl, err)
	}
	p.send("stty size\n")
	if err := p.until(func() bool { return strings.Contains(p.out.String(), "11 33") }); err != nil {
		t.Fatalf("output %q: %v", p.out.String(), err)
	}
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"/"+id, nil).body, &info)
	if !info.Active {
		t.Errorf("after the connect: %+v, want active", info)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, base+"/"+id, nil); resp.status != http.StatusOK {
		t.Errorf("delete: %d %s", resp.status, resp.body)
	}
}
