package daytona_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
)

// interpRun is what one execute WebSocket answered.
type interpRun struct {
	stdout, stderr string
	errors         []map[string]any
	control        []string
	close          websocket.StatusCode
	reason         string
}

func runCode(t *testing.T, s *stack, id string, req map[string]any) interpRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(s.URL, "http") + daytona.Prefix + "/toolbox/" + id + "/process/interpreter/execute"
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.Admin}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	raw, _ := json.Marshal(req)
	if err := conn.Write(ctx, websocket.MessageText, raw); err != nil {
		t.Fatal(err)
	}
	var out interpRun
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errorsAs(err, &ce) {
				t.Fatalf("execute: %v (so far %+v)", err, out)
			}
			out.close, out.reason = ce.Code, ce.Reason
			return out
		}
		var m map[string]any
		decode(t, data, &m)
		text, _ := m["text"].(string)
		switch m["type"] {
		case "stdout":
			out.stdout += text
		case "stderr":
			out.stderr += text
		case "error":
			out.errors = append(out.errors, m)
		case "control":
			out.control = append(out.control, text)
		}
	}
}

func TestInterpreter_StatePersistsPerContext(t *testing.T) {
	s, sb := sharedSandbox(t)
	// The default context keeps its namespace between executions.
	r := runCode(t, s, sb.ID, map[string]any{"code": "x = 41\nimport sys\nprint('out'); print('err', file=sys.stderr)"})
	if r.stdout != "out\n" || r.stderr != "err\n" || !cmp.Equal(r.control, []string{"completed"}) || r.close != websocket.StatusNormalClosure {
		t.Errorf("first run: %+v", r)
	}
	r = runCode(t, s, sb.ID, map[string]any{"code": "import os\nprint(x + 1, os.environ['E1'])", "envs": map[string]string{"E1": "v1"}})
	if r.stdout != "42 v1\n" {
		t.Errorf("second run: %+v", r)
	}
	// A raised exception is an error message, then completed.
	r = runCode(t, s, sb.ID, map[string]any{"code": "print('before')\nraise ValueError('bad value')"})
	if r.stdout != "before\n" || len(r.errors) != 1 || r.errors[0]["name"] != "ValueError" || r.errors[0]["value"] != "bad value" ||
		!strings.Contains(r.errors[0]["traceback"].(string), "ValueError") || !cmp.Equal(r.control, []string{"completed"}) {
		t.Errorf("error run: %+v", r)
	}

	// A created context has its own namespace and cwd.
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/interpreter/context", map[string]any{"cwd": "/tmp"})
	var ctxInfo struct {
		ID       string
		Cwd      string
		Active   bool
		Language string
	}
	decode(t, resp.body, &ctxInfo)
	if resp.status != http.StatusOK || ctxInfo.ID == "" || ctxInfo.Cwd != "/tmp" || !ctxInfo.Active || ctxInfo.Language != "python" {
		t.Fatalf("create context: %d %s", resp.status, resp.body)
	}
	r = runCode(t, s, sb.ID, map[string]any{"code": "import os\nprint('x' in globals(), os.getcwd())", "contextId": ctxInfo.ID})
	if r.stdout != "False /tmp\n" {
		t.Errorf("own context: %+v", r)
	}
	var list struct{ Contexts []struct{ ID string } }
	decode(t, s.do(t, s.Admin, http.MethodGet, "/toolbox/"+sb.ID+"/process/interpreter/context", nil).body, &list)
	if len(list.Contexts) != 1 || list.Contexts[0].ID != ctxInfo.ID {
		t.Errorf("list (default excluded): %+v", list)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, "/toolbox/"+sb.ID+"/process/interpreter/context/"+ctxInfo.ID, nil); resp.status != http.StatusOK {
		t.Errorf("delete: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodDelete, "/toolbox/"+sb.ID+"/process/interpreter/context/"+ctxInfo.ID, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.Admin, http.MethodDelete, "/toolbox/"+sb.ID+"/process/interpreter/context/default", nil), http.StatusBadRequest)
	r = runCode(t, s, sb.ID, map[string]any{"code": "print(1)", "contextId": ctxInfo.ID})
	if r.close != websocket.StatusPolicyViolation || !strings.Contains(r.reason, "not found") {
		t.Errorf("deleted context: %+v", r)
	}
}

func TestInterpreter_TimeoutIs4008AndTheContextLivesOn(t *testing.T) {
	s, sb := sharedSandbox(t)
	r := runCode(t, s, sb.ID, map[string]any{"code": "y = 'kept'\nimport time\nprint('start', flush=True)\ntime.sleep(60)", "timeout": 1})
	if r.close != 4008 || r.stdout != "start\n" {
		t.Errorf("timeout: %+v", r)
	}
	r = runCode(t, s, sb.ID, map[string]any{"code": "print(y)"})
	if r.stdout != "kept\n" || r.close != websocket.StatusNormalClosure {
		t.Errorf("after the timeout: %+v", r)
	}
}

// Output that looks like a marker, invalid UTF-8 and a rune split across
// writes reach the client as text; the daemon holds no unbounded marker.
func TestInterpreter_HostileOutputIsText(t *testing.T) {
	s, sb := sharedSandbox(t)
	r := runCode(t, s, sb.ID, map[string]any{"code": `import sys, os
os.write(1, b"\x1e" + b"z" * 100000)
os.write(1, b"\xe2\x82")
os.write(1, b"\xac\xff\n")
`})
	want := "\x1e" + strings.Repeat("z", 100000) + "€\uFFFD\n"
	if r.stdout != want || r.close != websocket.StatusNormalClosure {
		t.Errorf("stdout %q… (%d bytes), close %v", r.stdout[:min(20, len(r.stdout))], len(r.stdout), r.close)
	}
}

func TestCodeRun_JavaScriptAndTypeScript(t *testing.T) {
	s, sb := sharedSandbox(t)
	for _, tc := range []struct{ lang, code, want string }{
		{"javascript", "console.log(process.argv.slice(1)); console.error('e'); process.exit(2)", `{"exitCode":2,"result":"[ 'a', 'b c' ]\ne\n","artifacts":{"charts":[]}}`},
		{"typescript", "const n: number = 40;\ninterface P { x: number }\nconst p: P = { x: 2 };\nconsole.log(n + p.x, process.argv.slice(1).join(','))", `{"exitCode":0,"result":"42 a,b c\n","artifacts":{"charts":[]}}`},
	} {
		resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/code-run", map[string]any{
			"code": tc.code, "language": tc.lang, "argv": []string{"a", "b c"},
		})
		if resp.status != http.StatusOK || strings.TrimSpace(string(resp.body)) != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.lang, resp.status, resp.body, tc.want)
		}
	}
	// A TypeScript syntax error is reported, exit 1.
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/code-run", map[string]any{"code": "const x: = ;", "language": "typescript"})
	var res struct {
		ExitCode int
		Result   string
	}
	decode(t, resp.body, &res)
	if res.ExitCode != 1 || !strings.Contains(res.Result, "error TS") {
		t.Errorf("syntax error: %s", resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/code-run", map[string]any{"code": "x", "language": "cobol"}), http.StatusBadRequest)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
