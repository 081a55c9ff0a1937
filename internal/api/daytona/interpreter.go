package daytona

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/sessions"
)

// Wire details of the code interpreter; the contexts are the sessions
// part's (package sessions).
const (
	// defaultInterpTimeout is Daytona's when the request names none.
	defaultInterpTimeout = 10 * time.Minute
	// interpCloseTimeout is the WebSocket close code of a timed-out
	// execution; the SDK turns it into DaytonaTimeoutError.
	interpCloseTimeout websocket.StatusCode = 4008
)

// contextInfo is Daytona's InterpreterContext.
type contextInfo struct {
	ID        string `json:"id"`
	Cwd       string `json:"cwd"`
	CreatedAt string `json:"createdAt"`
	Active    bool   `json:"active"`
	Language  string `json:"language"`
}

func toContextInfo(c sessions.ContextInfo) contextInfo {
	return contextInfo{ID: c.ID, Cwd: c.Cwd, CreatedAt: c.CreatedAt.Format(time.RFC3339Nano), Active: c.Active, Language: c.Language}
}

type createContextBody struct {
	Cwd      string `json:"cwd"`
	Language string `json:"language"`
}

type interpExecuteBody struct {
	Code      string            `json:"code"`
	ContextID string            `json:"contextId"`
	Envs      map[string]string `json:"envs"`
	Timeout   *float64          `json:"timeout"`
}

// interpMessage is one message of the execute WebSocket, as the SDK
// parses it.
type interpMessage struct {
	Type      string `json:"type"` // stdout, stderr, error, control
	Text      string `json:"text,omitempty"`
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// createContext is POST /process/interpreter/context {cwd?, language?}:
// a new context (python only).
func (f *Facade) createContext(w http.ResponseWriter, r *http.Request, b box) error {
	var body createContextBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	info, err := f.sess.CreateContext(r.Context(), b.target(), body.Cwd, body.Language)
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, toContextInfo(info))
	return nil
}

// listContexts is GET /process/interpreter/context: every context but the
// default one.
func (f *Facade) listContexts(w http.ResponseWriter, r *http.Request, b box) error {
	all, err := f.sess.Contexts(r.Context(), b.target())
	if err != nil {
		return sessionError(err)
	}
	out := make([]contextInfo, 0, len(all))
	for _, c := range all {
		out = append(out, toContextInfo(c))
	}
	writeJSON(w, http.StatusOK, map[string][]contextInfo{"contexts": out})
	return nil
}

// deleteContext is DELETE /process/interpreter/context/{cid}: the worker
// is killed. The default context cannot be deleted (400).
func (f *Facade) deleteContext(w http.ResponseWriter, r *http.Request, b box) error {
	if err := f.sess.DeleteContext(r.Context(), b.target(), r.PathValue("cid")); err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Context deleted successfully"})
	return nil
}

// interpreterExecute is GET /process/interpreter/execute (WebSocket): the
// first message is {code, contextId?, envs?, timeout?}; the answer is
// stdout, stderr and error messages as the code runs, then
// {"type":"control","text":"completed"} (or "interrupted") and close 1000.
// A timeout (seconds; none given is 10 minutes, 0 is none) is close 4008;
// a bad request or unknown context is close 1008 with the reason, a worker
// that died 1011.
func (f *Facade) interpreterExecute(w http.ResponseWriter, r *http.Request, b box) error {
	conn := acceptWS(w, r, f.maxBody)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, raw, err := conn.Read(ctx)
	if err != nil {
		conn.end(websocket.StatusProtocolError, "failed to read first message")
		return nil
	}
	var req interpExecuteBody
	if err := json.Unmarshal(raw, &req); err != nil {
		conn.end(websocket.StatusProtocolError, "invalid JSON payload")
		return nil
	}
	timeout := defaultInterpTimeout
	switch {
	case req.Code == "":
		conn.end(websocket.StatusPolicyViolation, "code is required")
		return nil
	case req.Timeout != nil && (*req.Timeout < 0 || *req.Timeout > 24*3600):
		conn.end(websocket.StatusPolicyViolation, "timeout must be between 0 and 86400 seconds")
		return nil
	case req.Timeout != nil:
		timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	ctx = conn.CloseRead(ctx) // the client says nothing more; its close ends ctx
	send := func(m sessions.Message) error {
		return conn.sendJSON(ctx, interpMessage(m))
	}
	state, end, err := f.sess.Execute(ctx, b.target(), sessions.ExecRequest{
		Code: req.Code, ContextID: req.ContextID, Envs: req.Envs, Timeout: timeout,
	}, send)
	switch {
	case err != nil && ctx.Err() != nil:
		// the client left
	case err != nil:
		conn.end(websocket.StatusPolicyViolation, classify(sessionError(err)).Message)
	case end == sessions.NotActive:
		conn.end(websocket.StatusInternalError, "interpreter context is not active")
	case end == sessions.Died:
		conn.end(websocket.StatusInternalError, "interpreter context died")
	case end == sessions.TimedOut:
		conn.end(interpCloseTimeout, "execution timed out")
	default:
		_ = send(sessions.Message{Type: "control", Text: state})
		conn.end(websocket.StatusNormalClosure, "")
	}
	return nil
}
