package v1

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/sessions"
)

// Shell sessions (the sessions part, package sessions): a long-lived bash
// in the sandbox that runs commands one after another, shell state
// carried over, each command with its output and exit code. They live in
// the sandbox's agent and survive a restart of the daemon.

type sessionCreateJSON struct {
	ID string `json:"id"`
	// User runs the shell (the agent's default, root, when empty).
	User string `json:"user,omitempty"`
	// Cwd is where it starts (the user's home when empty).
	Cwd string `json:"cwd,omitempty"`
}

type sessionJSON struct {
	ID       string        `json:"id"`
	Commands []commandJSON `json:"commands"`
}

type commandJSON struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

type sessionExecJSON struct {
	Command string `json:"command"`
	// Async answers 202 {id} at once instead of waiting for the end.
	Async bool `json:"async,omitempty"`
}

type sessionExecResult struct {
	ID       string  `json:"id"`
	ExitCode *int    `json:"exit_code,omitempty"`
	Output   *string `json:"output,omitempty"`
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
}

type commandLogsJSON struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

type sessionInputJSON struct {
	Data string `json:"data"`
}

func toSessionJSON(s sessions.ShellInfo) sessionJSON {
	out := sessionJSON{ID: s.ID, Commands: make([]commandJSON, 0, len(s.Commands))}
	for _, c := range s.Commands {
		out.Commands = append(out.Commands, commandJSON(c))
	}
	return out
}

// sessionTarget checks that the caller owns the running sandbox the path
// names and returns it as the sessions part's target.
func (s *server) sessionTarget(r *http.Request, user, cwd string) (sessions.Target, error) {
	if s.sessions == nil {
		return sessions.Target{}, fmt.Errorf("%w: sessions are not served by this daemon", service.ErrUnavailable)
	}
	sb, err := s.svc.Get(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return sessions.Target{}, err
	}
	if sb.State != service.StateRunning {
		return sessions.Target{}, fmt.Errorf("%w: sandbox %s is %s, not running", service.ErrConflict, sb.ID, sb.State)
	}
	return sessions.Target{SandboxID: sb.ID, User: user, Cwd: cwd}, nil
}

// createSession is POST /v1/sandboxes/{id}/sessions {id, user?, cwd?}.
func (s *server) createSession(w http.ResponseWriter, r *http.Request) error {
	var body sessionCreateJSON
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	t, err := s.sessionTarget(r, body.User, body.Cwd)
	if err != nil {
		return err
	}
	if err := s.sessions.CreateShell(r.Context(), t, body.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sessionJSON{ID: body.ID, Commands: []commandJSON{}})
	return nil
}

// listSessions is GET /v1/sandboxes/{id}/sessions.
func (s *server) listSessions(w http.ResponseWriter, r *http.Request) error {
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	all, err := s.sessions.Shells(r.Context(), t)
	if err != nil {
		return err
	}
	out := make([]sessionJSON, 0, len(all))
	for _, sh := range all {
		out = append(out, toSessionJSON(sh))
	}
	writeJSON(w, http.StatusOK, map[string][]sessionJSON{"items": out})
	return nil
}

// getSession is GET /v1/sandboxes/{id}/sessions/{sid}.
func (s *server) getSession(w http.ResponseWriter, r *http.Request) error {
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	sh, err := s.sessions.Shell(r.Context(), t, r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSessionJSON(sh))
	return nil
}

// deleteSession is DELETE /v1/sandboxes/{id}/sessions/{sid}: the shell
// and what it runs are killed.
func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	if err := s.sessions.DeleteShell(r.Context(), t, r.PathValue("sid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sessionExec is POST /v1/sandboxes/{id}/sessions/{sid}/exec {command,
// async?}: 200 with the exit code and output once the command ends, or
// 202 {id} at once with async.
func (s *server) sessionExec(w http.ResponseWriter, r *http.Request) error {
	var body sessionExecJSON
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	sid := r.PathValue("sid")
	cid, err := s.sessions.Exec(r.Context(), t, sid, body.Command)
	if err != nil {
		return err
	}
	if body.Async {
		writeJSON(w, http.StatusAccepted, sessionExecResult{ID: cid})
		return nil
	}
	code, logs, err := s.sessions.Wait(r.Context(), t, sid, cid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionExecResult{ID: cid, ExitCode: &code, Output: &logs.Output, Stdout: &logs.Stdout, Stderr: &logs.Stderr})
	return nil
}

// sessionCommand is GET …/sessions/{sid}/commands/{cid}.
func (s *server) sessionCommand(w http.ResponseWriter, r *http.Request) error {
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	c, err := s.sessions.Command(r.Context(), t, r.PathValue("sid"), r.PathValue("cid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, commandJSON(c))
	return nil
}

// sessionLogs is GET …/commands/{cid}/logs: {output, stdout, stderr} so
// far, or with follow=true a stream of JSON lines, {"stdout":…} or
// {"stderr":…} per chunk (backlog first), then {"exit_code":N} when the
// command has ended.
func (s *server) sessionLogs(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, func(k string) bool { return k == "follow" })
	if err != nil {
		return err
	}
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	sid, cid := r.PathValue("sid"), r.PathValue("cid")
	if q.Get("follow") != "true" {
		l, err := s.sessions.CommandLogs(r.Context(), t, sid, cid)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, commandLogsJSON(l))
		return nil
	}
	if _, err := s.sessions.Command(r.Context(), t, sid, cid); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	err = s.sessions.Follow(r.Context(), t, sid, cid, func(c sessions.Chunk) error {
		line := map[string]string{"stdout": string(c.Data)}
		if c.Stderr {
			line = map[string]string{"stderr": string(c.Data)}
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	if err != nil {
		return nil // the client left, or the session went: the stream just ends
	}
	if c, err := s.sessions.Command(r.Context(), t, sid, cid); err == nil && c.ExitCode != nil {
		_ = enc.Encode(map[string]int{"exit_code": *c.ExitCode})
	}
	return nil
}

// sessionInput is POST …/commands/{cid}/input {data}: data goes to the
// shell's stdin, which the running command reads; 409 once it ended.
func (s *server) sessionInput(w http.ResponseWriter, r *http.Request) error {
	var body sessionInputJSON
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	t, err := s.sessionTarget(r, "", "")
	if err != nil {
		return err
	}
	if err := s.sessions.Input(r.Context(), t, r.PathValue("sid"), r.PathValue("cid"), []byte(body.Data)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
