package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	procrpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// daytonaCaller makes raw Daytona API calls to d (raw HTTP, so the test
// runs against any daemon).
type daytonaCaller struct {
	t   *testing.T
	ctx context.Context
	d   *daemonProcess
}

func (c daytonaCaller) call(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.d.URL()+"/daytona/api"+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

var tickPattern = regexp.MustCompile(`tick (\d+)`)

// ticks returns the tick numbers in out, in order.
func ticks(out string) []int {
	var n []int
	for _, m := range tickPattern.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n = append(n, v)
	}
	return n
}

// TestSessions_DaytonaSessionSurvivesRestart: a Daytona session runs a
// command that prints a tick every 0.2 s, asynchronously. The daemon gets
// SIGTERM and is started again, then SIGKILL and is started again. After
// each restart the same session is listed with the command still running
// (no exit code), its logs still hold the ticks from before the restart,
// and following them shows ticks produced after it: the shell lives in the
// agent, which keeps its recent output, and the daemon reattaches.
func TestSessions_DaytonaSessionSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	d := startDaemon(t, "sessions")
	dc := daytonaCaller{t: t, ctx: ctx, d: d}
	status, raw := dc.call(http.MethodPost, "/sandbox", map[string]any{"snapshot": baseImage, "cpu": 0.5, "memory": 0.25})
	var sb struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &sb)
	if sb.ID != "" {
		destroyAtEnd(t, newClient(d, true), sb.ID)
	}
	if status != http.StatusOK || sb.ID == "" {
		t.Fatalf("create: %d %s", status, raw)
	}
	base := "/toolbox/" + sb.ID + "/process/session"
	if status, raw := dc.call(http.MethodPost, base, map[string]any{"sessionId": "ticker"}); status != http.StatusCreated {
		t.Fatalf("create session: %d %s", status, raw)
	}
	const loop = `while :; do echo tick $((i+=1)); sleep 0.2; done`
	status, raw = dc.call(http.MethodPost, base+"/ticker/exec", map[string]any{"command": loop, "runAsync": true})
	var started struct {
		CmdID string `json:"cmdId"`
	}
	if _ = json.Unmarshal(raw, &started); status != http.StatusAccepted || started.CmdID == "" {
		t.Fatalf("exec: %d %s", status, raw)
	}
	cmdPath := base + "/ticker/command/" + started.CmdID
	logs := func() []int {
		t.Helper()
		status, raw := dc.call(http.MethodGet, cmdPath+"/logs", nil)
		var l struct {
			Stdout string `json:"stdout"`
		}
		if _ = json.Unmarshal(raw, &l); status != http.StatusOK {
			t.Fatalf("logs: %d %s", status, raw)
		}
		return ticks(l.Stdout)
	}
	testenv.WaitFor(t, "three ticks", func() error {
		if n := logs(); len(n) < 3 {
			return fmt.Errorf("ticks %v", n)
		}
		return nil
	})
	// An interpreter context with a variable, and a terminal.
	proc := "/toolbox/" + sb.ID + "/process"
	status, raw = dc.call(http.MethodPost, proc+"/interpreter/context", map[string]any{})
	var ictx struct {
		ID string `json:"id"`
	}
	if _ = json.Unmarshal(raw, &ictx); status != http.StatusOK || ictx.ID == "" {
		t.Fatalf("create context: %d %s", status, raw)
	}
	if out := runPython(ctx, t, d, sb.ID, ictx.ID, "x = 41"); out != "" {
		t.Fatalf("x = 41 printed %q", out)
	}
	if status, raw := dc.call(http.MethodPost, proc+"/pty", map[string]any{"id": "term"}); status != http.StatusCreated {
		t.Fatalf("create pty: %d %s", status, raw)
	}
	x := 41

	for _, restart := range []struct {
		name string
		do   func() error
	}{
		{"SIGTERM", func() error {
			if err := d.Stop(); err != nil {
				return err
			}
			return d.Start(ctx)
		}},
		{"SIGKILL", func() error { return d.Restart(ctx) }},
	} {
		before := logs()
		if err := restart.do(); err != nil {
			t.Fatalf("%s and start: %v\nlog:\n%s", restart.name, err, d.LogTail(40))
		}
		// The same session, listed, its command running.
		status, raw := dc.call(http.MethodGet, base, nil)
		var list []struct {
			SessionID string `json:"sessionId"`
			Commands  []struct {
				ID       string `json:"id"`
				Command  string `json:"command"`
				ExitCode *int   `json:"exitCode"`
			} `json:"commands"`
		}
		_ = json.Unmarshal(raw, &list)
		if status != http.StatusOK || len(list) != 1 || list[0].SessionID != "ticker" {
			t.Fatalf("after %s and a start, sessions: %d %s; want the session ticker", restart.name, status, raw)
		}
		var found bool
		for _, c := range list[0].Commands {
			if c.ID == started.CmdID {
				found = true
				if c.Command != loop || c.ExitCode != nil {
					t.Errorf("after %s the command reads %q exit code %v; want %q running", restart.name, c.Command, c.ExitCode, loop)
				}
			}
		}
		if !found {
			t.Fatalf("after %s the session lists %s; want command %s", restart.name, raw, started.CmdID)
		}
		// Ticks printed so far (some during the restart); one after them
		// was printed after the restart.
		now := logs()
		if len(now) == 0 || now[0] > before[len(before)-1] {
			t.Errorf("after %s the logs hold ticks %v…; want those from before it (up to %d) still there", restart.name, now[:min(len(now), 5)], before[len(before)-1])
		}
		last := now[len(now)-1]
		t.Logf("%s: ticks %d…%d before, %d…%d just after", restart.name, before[0], before[len(before)-1], now[0], last)
		followTicks(ctx, t, d, cmdPath, last, restart.name)

		// The context kept its namespace; the terminal runs its shell.
		x++
		if out := runPython(ctx, t, d, sb.ID, ictx.ID, "x += 1; print(x)"); out != fmt.Sprintf("%d\n", x) {
			t.Errorf("after %s the context printed %q; want %d (its namespace kept)", restart.name, out, x)
		}
		ptyEcho(ctx, t, d, proc+"/pty/term/connect", restart.name)
	}
}

// runPython runs code in an interpreter context and returns its stdout.
func runPython(ctx context.Context, t *testing.T, d *daemonProcess, sandboxID, contextID, code string) string {
	t.Helper()
	u := "ws" + strings.TrimPrefix(d.URL(), "http") + "/daytona/api/toolbox/" + sandboxID + "/process/interpreter/execute"
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(rctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token()}}})
	if err != nil {
		t.Fatalf("interpreter: %v", err)
	}
	defer conn.CloseNow()
	req, _ := json.Marshal(map[string]any{"code": code, "contextId": contextID})
	if err := conn.Write(rctx, websocket.MessageText, req); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	for {
		_, msg, err := conn.Read(rctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Errorf("interpreter %q: %v (stdout %q)", code, err, stdout.String())
			}
			return stdout.String()
		}
		var m struct{ Type, Text string }
		_ = json.Unmarshal(msg, &m)
		if m.Type == "stdout" {
			stdout.WriteString(m.Text)
		}
	}
}

// ptyEcho attaches to a terminal, has its shell echo a line, and reads it.
func ptyEcho(ctx context.Context, t *testing.T, d *daemonProcess, path, when string) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(d.URL(), "http") + "/daytona/api" + path
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(pctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token()}}})
	if err != nil {
		t.Fatalf("after %s, pty connect: %v", when, err)
	}
	defer conn.CloseNow()
	var out strings.Builder
	sent := false
	for !strings.Contains(out.String(), "pty-42") {
		typ, msg, err := conn.Read(pctx)
		if err != nil {
			t.Fatalf("after %s, the terminal: %v; read %q", when, err, out.String())
		}
		if typ == websocket.MessageText && !sent {
			if !strings.Contains(string(msg), `"connected"`) {
				t.Fatalf("after %s, the terminal answered %s", when, msg)
			}
			if err := conn.Write(pctx, websocket.MessageBinary, []byte("echo pty-$((6*7))\n")); err != nil {
				t.Fatal(err)
			}
			sent = true
			continue
		}
		out.Write(msg)
	}
}

// followTicks follows a command's logs until a tick past after arrives,
// and checks that the backlog began with earlier ticks.
func followTicks(ctx context.Context, t *testing.T, d *daemonProcess, cmdPath string, after int, when string) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(d.URL(), "http") + "/daytona/api" + cmdPath + "/logs?follow=true"
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(fctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token()}}})
	if err != nil {
		t.Fatalf("after %s, follow: %v", when, err)
	}
	defer conn.CloseNow()
	var out strings.Builder
	for {
		_, msg, err := conn.Read(fctx)
		if err != nil {
			t.Fatalf("after %s, following the logs ended (%v) before a tick past %d; got %q", when, err, after, out.String()[max(0, out.Len()-200):])
		}
		out.Write(bytes.TrimPrefix(msg, []byte{1, 1, 1}))
		n := ticks(out.String())
		if len(n) > 0 && n[len(n)-1] > after {
			if n[0] >= after {
				t.Errorf("after %s the followed backlog begins at tick %d; want the ticks from before the restart", when, n[0])
			}
			return
		}
	}
}

// envdHeaders adds E2B's single-host routing headers, as the SDKs send
// them.
type envdHeaders struct{ id, token string }

func (e envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", e.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	r.Header.Set("X-Access-Token", e.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSessions_E2BPTYSurvivesRestart: an E2B PTY (envd's process Start
// with a pty, through the daemon, with the repo's generated Connect
// client) runs a loop printing a tick every 0.2 s. The daemon gets SIGTERM
// and is started again, then SIGKILL and is started again; after each
// restart the client reattaches (Connect by pid) and reads ticks printed
// after the restart.
func TestSessions_E2BPTYSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	d := startDaemon(t, "e2bpty")
	body, _ := json.Marshal(map[string]any{"templateID": baseImage})
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
		destroyAtEnd(t, newClient(d, true), sb.SandboxID)
	}
	if resp.StatusCode != http.StatusCreated || sb.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, raw)
	}
	proc := processconnect.NewProcessClient(&http.Client{Transport: envdHeaders{sb.SandboxID, sb.EnvdAccessToken}}, d.URL(), connect.WithProtoJSON())

	sctx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	stream, err := proc.Start(sctx, connect.NewRequest(&procrpc.StartRequest{
		Process: &procrpc.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `while :; do echo tick $((i+=1)); sleep 0.2; done`}},
		Pty:     &procrpc.PTY{Size: &procrpc.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	var pid uint32
	last := readPTYTicks(t, "the start", stream.Receive, func() *procrpc.ProcessEvent { return stream.Msg().GetEvent() }, stream.Err, &pid, 0)
	cancelStart()
	stream.Close()

	for _, restart := range []struct {
		name string
		do   func() error
	}{
		{"SIGTERM", func() error {
			if err := d.Stop(); err != nil {
				return err
			}
			return d.Start(ctx)
		}},
		{"SIGKILL", func() error { return d.Restart(ctx) }},
	} {
		if err := restart.do(); err != nil {
			t.Fatalf("%s and start: %v\nlog:\n%s", restart.name, err, d.LogTail(40))
		}
		// Reattached after the restart, ticks past those printed before
		// it arrive: the loop ran on and its output is read again.
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		st, err := proc.Connect(cctx, connect.NewRequest(&procrpc.ConnectRequest{
			Process: &procrpc.ProcessSelector{Selector: &procrpc.ProcessSelector_Pid{Pid: pid}},
		}))
		if err != nil {
			cancel()
			t.Fatalf("after %s, connect to pid %d: %v", restart.name, pid, err)
		}
		var got uint32
		last = readPTYTicks(t, "after "+restart.name, st.Receive, func() *procrpc.ProcessEvent { return st.Msg().GetEvent() }, st.Err, &got, last)
		if got != pid {
			t.Errorf("after %s, connect answered pid %d, want %d", restart.name, got, pid)
		}
		cancel()
		st.Close()
	}
}

// readPTYTicks reads a process stream's start (its pid into pid) and its
// pty output until a tick past after arrives, three ticks past it at the
// start, and returns the last tick read.
func readPTYTicks(t *testing.T, when string, receive func() bool, msg func() *procrpc.ProcessEvent, errf func() error, pid *uint32, after int) int {
	t.Helper()
	var out strings.Builder
	for receive() {
		switch ev := msg().GetEvent().(type) {
		case *procrpc.ProcessEvent_Start:
			*pid = ev.Start.GetPid()
		case *procrpc.ProcessEvent_Data:
			out.Write(ev.Data.GetPty())
		case *procrpc.ProcessEvent_End:
			t.Fatalf("%s: the loop ended: %v; output %q", when, ev.End, out.String())
		}
		n := ticks(out.String())
		want := after + 1
		if after == 0 {
			want = 3
		}
		if len(n) > 0 && n[len(n)-1] >= want {
			return n[len(n)-1]
		}
	}
	t.Fatalf("%s: the stream ended (%v) before a tick past %d; got %q", when, errf(), after, out.String())
	return 0
}

// TestCLI_SessionAcrossRestart drives `sbx session` against a daemon that
// is killed (SIGKILL) while a command of the session runs: after the
// restart `session logs -f` follows that command to its end, and the same
// shell runs the next command with its state (a variable set before).
func TestCLI_SessionAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "clisession")
	dir := t.TempDir()
	r := mustSbx(t, d, dir, "create", "--json", "--image", baseImage, "--cpu", "0.25", "--memory", "256")
	var sb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sb); err != nil || sb.ID == "" {
		t.Fatalf("create --json printed %q: %v", r.stdout, err)
	}
	destroyAtEnd(t, newClient(d, true), sb.ID)
	mustSbx(t, d, dir, "session", "create", sb.ID, "work")
	if r := sbx(t, d, dir, "session", "exec", sb.ID, "work", "--", "V=kept; (exit 3)"); r.code != 3 {
		t.Fatalf("session exec exit 3: %+v", r)
	}
	cid := strings.TrimSpace(mustSbx(t, d, dir, "session", "exec", "--async", sb.ID, "work", "--", "sleep 3; echo done $V").stdout)
	if err := d.Restart(ctx); err != nil {
		t.Fatalf("restart: %v\nlog:\n%s", err, d.LogTail(40))
	}
	if r := mustSbx(t, d, dir, "session", "logs", "-f", sb.ID, "work", cid); r.stdout != "done kept\n" {
		t.Errorf("logs -f after the restart: %+v", r)
	}
	if r := mustSbx(t, d, dir, "session", "ls", sb.ID, "work"); !strings.Contains(r.stdout, cid) || strings.Contains(r.stdout, "running") {
		t.Errorf("session ls: %q; want %s ended", r.stdout, cid)
	}
	if r := mustSbx(t, d, dir, "session", "exec", sb.ID, "work", "--", "echo $V"); r.stdout != "kept\n" {
		t.Errorf("the shell's state after the restart: %+v", r)
	}
	mustSbx(t, d, dir, "session", "rm", sb.ID, "work")
	if r := sbx(t, d, dir, "session", "ls", sb.ID, "work"); r.code != exitNotFoundCode {
		t.Errorf("ls of a deleted session: %+v", r)
	}
}

// exitNotFoundCode is sbx's exit code for a missing resource.
const exitNotFoundCode = 3
