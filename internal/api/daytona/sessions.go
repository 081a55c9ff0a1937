package daytona

import (
	"errors"
	"net/http"
	"slices"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/sessions"
)

// maxSessionLogsInput bounds a client message on the follow WebSocket,
// where the client sends nothing (any message ends it).
const maxSessionLogsInput = 1 << 10

// Prefixes of the follow WebSocket's frames: the SDK demultiplexes stdout
// and stderr by them.
var (
	stdoutPrefix = []byte{1, 1, 1}
	stderrPrefix = []byte{2, 2, 2}
)

// sessionInfo is Daytona's Session.
type sessionInfo struct {
	SessionID string        `json:"sessionId"`
	Commands  []commandInfo `json:"commands"`
}

// commandInfo is Daytona's Command; exitCode is absent while it runs.
type commandInfo struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

type createSessionBody struct {
	SessionID string `json:"sessionId"`
}

type sessionExecBody struct {
	Command  string `json:"command"`
	RunAsync bool   `json:"runAsync"`
	Async    bool   `json:"async"`
}

type sessionExecResponse struct {
	CmdID    string  `json:"cmdId"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Output   *string `json:"output,omitempty"`
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
}

type logsResponse struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

type inputBody struct {
	Data string `json:"data"`
}

// target is the sessions part's view of a box.
func (b box) target() sessions.Target {
	return sessions.Target{SandboxID: b.sb.ID, User: b.user, Cwd: b.home}
}

// sessionError maps the sessions part's refusals onto Daytona's statuses.
func sessionError(err error) error {
	var e *sessions.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case sessions.NotFound:
		return errorf(http.StatusNotFound, "%s", e.Msg)
	case sessions.Exists:
		return errorf(http.StatusConflict, "%s", e.Msg)
	case sessions.TooMany:
		return errorf(http.StatusTooManyRequests, "%s", e.Msg)
	case sessions.Ended:
		return errorf(http.StatusGone, "%s", e.Msg)
	}
	return badRequest("%s", e.Msg)
}

func toSessionInfo(s sessions.ShellInfo) sessionInfo {
	out := sessionInfo{SessionID: s.ID, Commands: make([]commandInfo, 0, len(s.Commands))}
	for _, c := range s.Commands {
		out.Commands = append(out.Commands, commandInfo(c))
	}
	return out
}

// createSession is POST /process/session {sessionId}: starts the shell.
// An id in use in this sandbox is 409.
func (f *Facade) createSession(w http.ResponseWriter, r *http.Request, b box) error {
	var body createSessionBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := f.sess.CreateShell(r.Context(), b.target(), body.SessionID); err != nil {
		var e *sessions.Error
		if errors.As(err, &e) && e.Kind == sessions.Ended {
			return errorf(http.StatusConflict, "%s", e.Msg)
		}
		return sessionError(err)
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// listSessions is GET /process/session.
func (f *Facade) listSessions(w http.ResponseWriter, r *http.Request, b box) error {
	all, err := f.sess.Shells(r.Context(), b.target())
	if err != nil {
		return sessionError(err)
	}
	out := make([]sessionInfo, 0, len(all))
	for _, s := range all {
		out = append(out, toSessionInfo(s))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getSession is GET /process/session/{sid}: its commands in order.
func (f *Facade) getSession(w http.ResponseWriter, r *http.Request, b box) error {
	s, err := f.sess.Shell(r.Context(), b.target(), r.PathValue("sid"))
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, toSessionInfo(s))
	return nil
}

// deleteSession is DELETE /process/session/{sid}: the shell and whatever
// it runs are killed.
func (f *Facade) deleteSession(w http.ResponseWriter, r *http.Request, b box) error {
	if err := f.sess.DeleteShell(r.Context(), b.target(), r.PathValue("sid")); err != nil {
		return sessionError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sessionExec is POST /process/session/{sid}/exec {command, runAsync}:
// the command runs in the session's shell after those before it. Sync:
// 200 with its exit code and output once it ends (or the client gives
// up; the command runs on). Async: 202 {cmdId} at once.
func (f *Facade) sessionExec(w http.ResponseWriter, r *http.Request, b box) error {
	var body sessionExecBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.Command == "" {
		return badRequest("command is required")
	}
	sid := r.PathValue("sid")
	cid, err := f.sess.Exec(r.Context(), b.target(), sid, body.Command)
	if err != nil {
		return sessionError(err)
	}
	if body.RunAsync || body.Async {
		writeJSON(w, http.StatusAccepted, sessionExecResponse{CmdID: cid})
		return nil
	}
	code, logs, err := f.sess.Wait(r.Context(), b.target(), sid, cid)
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, sessionExecResponse{
		CmdID: cid, ExitCode: &code, Output: &logs.Output, Stdout: &logs.Stdout, Stderr: &logs.Stderr,
	})
	return nil
}

// sessionCommand is GET …/command/{cid}: {id, command, exitCode?}.
func (f *Facade) sessionCommand(w http.ResponseWriter, r *http.Request, b box) error {
	c, err := f.sess.Command(r.Context(), b.target(), r.PathValue("sid"), r.PathValue("cid"))
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, commandInfo(c))
	return nil
}

// sessionLogs is GET …/command/{cid}/logs: JSON {output, stdout, stderr}
// so far, or with follow=true a WebSocket (no subprotocol) of binary
// frames, each stdout chunk after \x01\x01\x01 and each stderr chunk after
// \x02\x02\x02: the backlog, then live output, then close 1000 when the
// command has ended.
func (f *Facade) sessionLogs(w http.ResponseWriter, r *http.Request, b box) error {
	sid, cid := r.PathValue("sid"), r.PathValue("cid")
	if r.URL.Query().Get("follow") != "true" {
		logs, err := f.sess.CommandLogs(r.Context(), b.target(), sid, cid)
		if err != nil {
			return sessionError(err)
		}
		writeJSON(w, http.StatusOK, logsResponse(logs))
		return nil
	}
	// The command must exist before the upgrade: a missing one is a 404.
	if _, err := f.sess.Command(r.Context(), b.target(), sid, cid); err != nil {
		return sessionError(err)
	}
	conn := acceptWS(w, r, maxSessionLogsInput)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(r.Context())
	err := f.sess.Follow(ctx, b.target(), sid, cid, func(c sessions.Chunk) error {
		prefix := stdoutPrefix
		if c.Stderr {
			prefix = stderrPrefix
		}
		return conn.send(ctx, websocket.MessageBinary, append(slices.Clip(prefix), c.Data...))
	})
	if err == nil {
		conn.end(websocket.StatusNormalClosure, "")
	}
	return nil
}

// sessionInput is POST …/command/{cid}/input {data}: data goes to the
// shell's stdin, which the running command reads. 409 once it has ended.
func (f *Facade) sessionInput(w http.ResponseWriter, r *http.Request, b box) error {
	var body inputBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	err := f.sess.Input(r.Context(), b.target(), r.PathValue("sid"), r.PathValue("cid"), []byte(body.Data))
	if err != nil {
		var e *sessions.Error
		if errors.As(err, &e) && e.Kind == sessions.Ended {
			return errorf(http.StatusConflict, "%s", e.Msg)
		}
		return sessionError(err)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// dropSessions forgets every session, terminal and interpreter context of
// a sandbox (it stopped, restarted or is being deleted: its shells are
// gone or about to be).
func (f *Facade) dropSessions(sandboxID string) {
	f.sess.Drop(sandboxID)
}
