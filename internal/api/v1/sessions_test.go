package v1_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
)

type sessionWire struct {
	ID       string `json:"id"`
	Commands []struct {
		ID       string `json:"id"`
		Command  string `json:"command"`
		ExitCode *int   `json:"exit_code"`
	} `json:"commands"`
}

type sessionExecWire struct {
	ID       string  `json:"id"`
	ExitCode *int    `json:"exit_code"`
	Stdout   *string `json:"stdout"`
	Stderr   *string `json:"stderr"`
	Output   *string `json:"output"`
}

// TestSessions_NativeAPI: a shell session through /v1: commands share
// shell state, sync and async, logs (and their follow stream), input to a
// running command, and the errors: a bad id, a duplicate, an unknown
// session or command, another tenant's sandbox, input to an ended command.
func TestSessions_NativeAPI(t *testing.T) {
	t.Parallel()
	tok := token(t, "sessions")
	sb := create(t, tok, `{"image":"`+apitest.BaseImage+`"}`)
	base := "/v1/sandboxes/" + sb.ID + "/sessions"

	wantError(t, do(t, tok, "POST", base, `{"id":"../x"}`), http.StatusBadRequest, "invalid_argument")
	if got := decode[sessionWire](t, do(t, tok, "POST", base, `{"id":"s1"}`), http.StatusCreated); got.ID != "s1" {
		t.Fatalf("create: %+v", got)
	}
	wantError(t, do(t, tok, "POST", base, `{"id":"s1"}`), http.StatusConflict, "conflict")
	other := token(t, "sessions-other")
	wantError(t, do(t, other, "GET", base, ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, other, "POST", base, `{"id":"s2"}`), http.StatusNotFound, "not_found")

	// Sync commands share the shell's state.
	decode[sessionExecWire](t, do(t, tok, "POST", base+"/s1/exec", `{"command":"cd /tmp && export X=42"}`), http.StatusOK)
	got := decode[sessionExecWire](t, do(t, tok, "POST", base+"/s1/exec", `{"command":"echo $X $(pwd); echo err >&2; exit_code=3; (exit 3)"}`), http.StatusOK)
	if got.ExitCode == nil || *got.ExitCode != 3 || *got.Stdout != "42 /tmp\n" || *got.Stderr != "err\n" {
		t.Errorf("sync exec: %+v", got)
	}

	// Async: running, input, follow to the end.
	async := decode[sessionExecWire](t, do(t, tok, "POST", base+"/s1/exec", `{"command":"read v; echo got $v","async":true}`), http.StatusAccepted)
	cmd := base + "/s1/commands/" + async.ID
	if c := decode[sessionWire](t, do(t, tok, "GET", base+"/s1", ""), http.StatusOK); len(c.Commands) != 3 || c.Commands[2].ExitCode != nil {
		t.Errorf("session while the command runs: %+v", c)
	}
	if r := do(t, tok, "POST", cmd+"/input", `{"data":"hi\n"}`); r.status != http.StatusNoContent {
		t.Fatalf("input: %s", r)
	}
	r := do(t, tok, "GET", cmd+"/logs?follow=true", "")
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("follow line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if r.status != http.StatusOK || len(lines) < 2 || lines[0]["stdout"] != "got hi\n" || lines[len(lines)-1]["exit_code"] != float64(0) {
		t.Errorf("follow: %d %s", r.status, r.body)
	}
	logs := decode[map[string]string](t, do(t, tok, "GET", cmd+"/logs", ""), http.StatusOK)
	if logs["stdout"] != "got hi\n" || logs["output"] != "got hi\n" {
		t.Errorf("logs: %v", logs)
	}
	wantError(t, do(t, tok, "POST", cmd+"/input", `{"data":"late\n"}`), http.StatusConflict, "conflict")
	wantError(t, do(t, tok, "GET", base+"/s1/commands/nope", ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, tok, "GET", base+"/nope", ""), http.StatusNotFound, "not_found")

	list := decode[map[string][]sessionWire](t, do(t, tok, "GET", base, ""), http.StatusOK)
	if len(list["items"]) != 1 || list["items"][0].ID != "s1" {
		t.Errorf("list: %+v", list)
	}
	if r := do(t, tok, "DELETE", base+"/s1", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %s", r)
	}
	wantError(t, do(t, tok, "DELETE", base+"/s1", ""), http.StatusNotFound, "not_found")
}

// TestSessions_PauseAndStop: a pause drops the daemon's view of a
// sandbox's sessions, whose processes are frozen, not gone: after the
// resume the session is found again in the agent, its command running on
// to its end. A stop ends them: after a start there is none.
func TestSessions_PauseAndStop(t *testing.T) {
	t.Parallel()
	tok := token(t, "sessions-pause")
	sb := create(t, tok, `{"image":"`+apitest.BaseImage+`"}`)
	base := "/v1/sandboxes/" + sb.ID + "/sessions"
	decode[sessionWire](t, do(t, tok, "POST", base, `{"id":"p"}`), http.StatusCreated)
	decode[sessionExecWire](t, do(t, tok, "POST", base+"/p/exec", `{"command":"N=7"}`), http.StatusOK)
	async := decode[sessionExecWire](t, do(t, tok, "POST", base+"/p/exec", `{"command":"read v; echo $N $v","async":true}`), http.StatusAccepted)

	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/pause", ""), http.StatusOK)
	wantError(t, do(t, tok, "GET", base, ""), http.StatusConflict, "conflict")
	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK)

	s := decode[sessionWire](t, do(t, tok, "GET", base+"/p", ""), http.StatusOK)
	if len(s.Commands) != 2 || s.Commands[1].ID != async.ID || s.Commands[1].ExitCode != nil {
		t.Fatalf("after pause and resume: %+v; want the running command", s)
	}
	cmd := base + "/p/commands/" + async.ID
	if r := do(t, tok, "POST", cmd+"/input", `{"data":"x\n"}`); r.status != http.StatusNoContent {
		t.Fatalf("input after the resume: %s", r)
	}
	r := do(t, tok, "GET", cmd+"/logs?follow=true", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `{"stdout":"7 x\n"}`) || !strings.Contains(string(r.body), `{"exit_code":0}`) {
		t.Errorf("follow after the resume: %s", r)
	}

	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/stop", ""), http.StatusOK)
	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/start", ""), http.StatusOK)
	if l := decode[map[string][]sessionWire](t, do(t, tok, "GET", base, ""), http.StatusOK); len(l["items"]) != 0 {
		t.Errorf("after stop and start: %+v; want no session", l)
	}
	wantError(t, do(t, tok, "GET", base+"/p", ""), http.StatusNotFound, "not_found")
}
