package daytona

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/sessions"
)

// maxPTYInput bounds one WebSocket message of input. The terminals' own
// limits are the sessions part's (package sessions).
const maxPTYInput = 1 << 20

// Subprotocols of the PTY WebSocket (Sec-WebSocket-Protocol): the SDK
// offers the exit-control token (answer it, and send an "exited" control
// message before the close) and the terminal's env as base64url JSON.
const (
	ptyExitControl = "X-Daytona-Pty-Exit-Control"
	ptyEnvsPrefix  = "X-Daytona-Pty-Envs~"
)

// ptyInfo is Daytona's PtySessionInfo.
type ptyInfo struct {
	ID        string            `json:"id"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	CreatedAt string            `json:"createdAt"`
	Active    bool              `json:"active"`
	LazyStart bool              `json:"lazyStart"`
}

type ptyCreateBody struct {
	ID        string            `json:"id"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	Cols      *int              `json:"cols"`
	Rows      *int              `json:"rows"`
	LazyStart bool              `json:"lazyStart"`
}

type ptyResizeBody struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ptyControl is a text message on the PTY WebSocket.
type ptyControl struct {
	Type       string `json:"type"` // always "control"
	Status     string `json:"status"`
	ExitCode   *int   `json:"exitCode,omitempty"`
	ExitReason string `json:"exitReason,omitempty"`
	Error      string `json:"error,omitempty"`
}

// toPTYInfo is Daytona's view of a terminal.
func toPTYInfo(i sessions.TerminalInfo) ptyInfo {
	return ptyInfo{
		ID: i.ID, Cwd: i.Cwd, Envs: i.Env, Cols: i.Cols, Rows: i.Rows,
		CreatedAt: i.CreatedAt.Format(time.RFC3339Nano), Active: i.Active, LazyStart: i.Lazy,
	}
}

// createPTY is POST /process/pty: a terminal, started at once unless
// lazyStart (then at its first connect). 201 {sessionId}; an id in use is
// 409.
func (f *Facade) createPTY(w http.ResponseWriter, r *http.Request, b box) error {
	var body ptyCreateBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	info, err := f.newPTY(r, b, body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"sessionId": info.ID})
	return nil
}

// newPTY creates the terminal body describes.
func (f *Facade) newPTY(r *http.Request, b box, body ptyCreateBody) (sessions.TerminalInfo, error) {
	spec := sessions.TerminalSpec{ID: body.ID, Cwd: body.Cwd, Env: body.Envs, Lazy: body.LazyStart, Cols: 80, Rows: 24}
	if body.Cols != nil {
		spec.Cols = *body.Cols
	}
	if body.Rows != nil {
		spec.Rows = *body.Rows
	}
	if spec.Cols < 1 || spec.Rows < 1 {
		return sessions.TerminalInfo{}, badRequest("cols and rows must be between 1 and %d", sessions.MaxTerminalSize)
	}
	info, err := f.sess.CreateTerminal(r.Context(), b.target(), spec)
	return info, sessionError(err)
}

// createConnectPTY is GET /process/pty/create-connect?id=&cols=&rows=&cwd=
// (WebSocket): createPTY and connectPTY in one round trip, the env in the
// X-Daytona-Pty-Envs~ subprotocol.
func (f *Facade) createConnectPTY(w http.ResponseWriter, r *http.Request, b box) error {
	q := r.URL.Query()
	body := ptyCreateBody{ID: q.Get("id"), Cwd: q.Get("cwd")}
	for name, dst := range map[string]**int{"cols": &body.Cols, "rows": &body.Rows} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return badRequest("%s must be a number", name)
			}
			*dst = &n
		}
	}
	envs, err := ptyEnvs(r.Header)
	if err != nil {
		return err
	}
	body.Envs = envs
	info, err := f.newPTY(r, b, body)
	if err != nil {
		return err
	}
	return f.attachPTY(w, r, b, info.ID)
}

// connectPTY is GET /process/pty/{sid}/connect (WebSocket): attach to a
// terminal. Its output from now on arrives as binary messages (no
// backlog); every message received is input. An unknown or ended terminal
// gets a control message with status "error", then the close.
func (f *Facade) connectPTY(w http.ResponseWriter, r *http.Request, b box) error {
	id := r.PathValue("sid")
	if _, err := f.sess.Terminal(r.Context(), b.target(), id); err != nil {
		conn := acceptPTY(w, r)
		if conn == nil {
			return nil // Accept answered the client
		}
		refusePTY(r.Context(), conn, "Failed to connect to PTY session: "+classify(sessionError(err)).Message)
		return nil
	}
	return f.attachPTY(w, r, b, id)
}

// acceptPTY upgrades a PTY WebSocket (nil when Accept refused it).
func acceptPTY(w http.ResponseWriter, r *http.Request) *wsConn {
	return acceptWS(w, r, maxPTYInput, ptyExitControl)
}

// refusePTY sends an error control message and closes the connection.
func refusePTY(ctx context.Context, conn *wsConn, msg string) {
	defer conn.CloseNow()
	_ = conn.sendJSON(ctx, ptyControl{Type: "control", Status: "error", Error: msg})
	conn.end(websocket.StatusPolicyViolation, msg)
}

// attachPTY upgrades the request and serves it as a client of terminal id
// until either side ends.
func (f *Facade) attachPTY(w http.ResponseWriter, r *http.Request, b box, id string) error {
	conn := acceptPTY(w, r)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := r.Context()
	if err := f.sess.StartTerminal(ctx, b.target(), id); err != nil {
		refusePTY(ctx, conn, "Failed to start PTY session: "+classify(sessionError(err)).Message)
		return nil
	}
	// Attach first, so no output is lost between "connected" and the
	// writer; the writer starts after "connected", so none precedes it.
	cl, err := f.sess.AttachTerminal(ctx, b.target(), id)
	if err != nil {
		refusePTY(ctx, conn, classify(sessionError(err)).Message)
		return nil
	}
	defer cl.Close()
	if err := conn.sendJSON(ctx, ptyControl{Type: "control", Status: "connected"}); err != nil {
		return nil
	}
	go writePTY(ctx, conn, cl, conn.Subprotocol() == ptyExitControl)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return nil // the client left, or the writer closed the connection
		}
		if err := cl.Input(ctx, data); err != nil {
			return nil
		}
	}
}

// writePTY sends a client's output, and once the shell ended its exit: an
// "exited" control message (when the client asked for it) and a close
// carrying {exitCode, exitReason}, 1000 for exit 0, else 1011. A client
// that fell too far behind is closed 1008 "slow consumer".
func writePTY(ctx context.Context, conn *wsConn, cl *sessions.TerminalClient, exitControl bool) {
	defer conn.CloseNow()
	for {
		batch, state, err := cl.Next(ctx)
		if err != nil {
			return
		}
		for _, data := range batch {
			if err := conn.send(ctx, websocket.MessageBinary, data); err != nil {
				return
			}
		}
		switch state {
		case sessions.Slow:
			conn.end(websocket.StatusPolicyViolation, "slow consumer")
			return
		case sessions.Dropped:
			return
		case sessions.Exited:
			exit := cl.Exit()
			code := exit.Code
			if exitControl {
				_ = conn.sendJSON(ctx, ptyControl{Type: "control", Status: "exited", ExitCode: &code, ExitReason: exit.Reason})
			}
			status := websocket.StatusNormalClosure
			if code != 0 {
				status = websocket.StatusInternalError
			}
			reason, _ := json.Marshal(struct {
				ExitCode   int    `json:"exitCode"`
				ExitReason string `json:"exitReason,omitempty"`
			}{code, exit.Reason})
			conn.end(status, string(reason))
			return
		}
	}
}

// ptyEnvs decodes the X-Daytona-Pty-Envs~<base64url JSON> subprotocol.
func ptyEnvs(h http.Header) (map[string]string, error) {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			enc, ok := strings.CutPrefix(strings.TrimSpace(p), ptyEnvsPrefix)
			if !ok {
				continue
			}
			raw, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil {
				return nil, badRequest("PTY envs: %v", err)
			}
			var envs map[string]string
			if err := json.Unmarshal(raw, &envs); err != nil {
				return nil, badRequest("PTY envs: %v", err)
			}
			return envs, nil
		}
	}
	return nil, nil
}

// listPTYs is GET /process/pty: {sessions: [PtySessionInfo]}.
func (f *Facade) listPTYs(w http.ResponseWriter, r *http.Request, b box) error {
	all, err := f.sess.Terminals(r.Context(), b.target())
	if err != nil {
		return sessionError(err)
	}
	out := make([]ptyInfo, 0, len(all))
	for _, i := range all {
		out = append(out, toPTYInfo(i))
	}
	writeJSON(w, http.StatusOK, map[string][]ptyInfo{"sessions": out})
	return nil
}

// getPTY is GET /process/pty/{sid}: its PtySessionInfo (active false once
// its shell ended).
func (f *Facade) getPTY(w http.ResponseWriter, r *http.Request, b box) error {
	info, err := f.sess.Terminal(r.Context(), b.target(), r.PathValue("sid"))
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, toPTYInfo(info))
	return nil
}

// deletePTY is DELETE /process/pty/{sid}: the shell's process group is
// killed, its clients get the exit, and the id is forgotten.
func (f *Facade) deletePTY(w http.ResponseWriter, r *http.Request, b box) error {
	if err := f.sess.DeleteTerminal(r.Context(), b.target(), r.PathValue("sid")); err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "PTY session deleted"})
	return nil
}

// resizePTY is POST /process/pty/{sid}/resize {cols, rows}: the terminal's
// new size (the shell gets SIGWINCH); answers its PtySessionInfo. An ended
// terminal is 410.
func (f *Facade) resizePTY(w http.ResponseWriter, r *http.Request, b box) error {
	var body ptyResizeBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	info, err := f.sess.ResizeTerminal(r.Context(), b.target(), r.PathValue("sid"), body.Cols, body.Rows)
	if err != nil {
		return sessionError(err)
	}
	writeJSON(w, http.StatusOK, toPTYInfo(info))
	return nil
}

// TerminalRoute is how another part of the daemon (the dashboard, package
// ui) reaches a terminal through this facade, in process, without
// spelling its URLs: the path and query of the WebSocket that creates
// terminal tid of sandbox id (cols×rows, env) and attaches to it, the
// header that carries env, and the path whose DELETE ends the terminal.
func TerminalRoute(id, tid string, cols, rows int, env map[string]string) (connect string, header http.Header, remove string) {
	base := Prefix + "/toolbox/" + url.PathEscape(id) + "/process/pty"
	connect = base + "/create-connect?" + url.Values{
		"id": {tid}, "cols": {strconv.Itoa(cols)}, "rows": {strconv.Itoa(rows)},
	}.Encode()
	header = http.Header{}
	if len(env) > 0 {
		raw, _ := json.Marshal(env) // a map of strings always encodes
		header.Set("Sec-WebSocket-Protocol", ptyEnvsPrefix+base64.RawURLEncoding.EncodeToString(raw))
	}
	return connect, header, base + "/" + url.PathEscape(tid)
}

// TerminalResizeRoute is, like TerminalRoute, for the dashboard: the path
// whose POST {cols, rows} resizes terminal tid of sandbox id (resizePTY).
func TerminalResizeRoute(id, tid string) string {
	return Prefix + "/toolbox/" + url.PathEscape(id) + "/process/pty/" + url.PathEscape(tid) + "/resize"
}
