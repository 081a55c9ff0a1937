package daytona

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/sessions"
)

// Limits of PTY sessions: what one sandbox may hold, and what the daemon
// keeps for each client of a terminal.
const (
	maxPTYsPerSandbox = 32
	maxPTYClients     = 8 // WebSocket clients attached to one terminal
	maxPTYSize        = 1000
	// maxPTYQueue bounds the output queued for one client: a client that
	// falls this far behind is closed ("slow consumer"), so a terminal
	// printing without end never grows the daemon's memory.
	maxPTYQueue = 1 << 20
	// maxPTYQueued bounds the output queued for all the clients of all
	// terminals of the daemon: past it, the client whose push would cross
	// it is closed as slow.
	maxPTYQueued = 64 << 20
	// maxPTYInput bounds one WebSocket message of input.
	maxPTYInput = 1 << 20
)

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

// ptySession is one terminal: a shell on a PTY, started through the
// agent, whose output goes to every attached WebSocket client. It outlives
// its clients: a client may disconnect and another connect later.
type ptySession struct {
	sandboxID string
	b         box

	mu       sync.Mutex
	info     ptyInfo
	proc     *agent.Process // nil until started (lazyStart)
	cancel   context.CancelFunc
	starting bool
	exited   bool
	exit     ptyExit
	clients  map[*ptyClient]struct{}
	done     chan struct{} // closed once the shell has ended
	killOnce sync.Once
}

// ptyExit is how a terminal's shell ended.
type ptyExit struct {
	code   int
	reason string // empty for exit 0
}

// ptyClient is one attached WebSocket: its queued output, bounded.
type ptyClient struct {
	conn        *wsConn
	exitControl bool
	budget      *atomic.Int64 // the daemon's queued bytes (Facade.ptyQueued)

	mu     sync.Mutex
	queue  [][]byte
	queued int
	closed bool          // no more output: the shell ended, or the client was dropped
	slow   bool          // dropped for falling behind
	wake   chan struct{} // signalled when queue or closed changes
}

// createPTY is POST /process/pty: a terminal, started at once unless
// lazyStart (then at its first connect). 201 {sessionId}; an id in use is
// 409.
func (f *Facade) createPTY(w http.ResponseWriter, r *http.Request, b box) error {
	var body ptyCreateBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	s, err := f.newPTY(r.Context(), b, body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"sessionId": s.info.ID})
	return nil
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
	s, err := f.newPTY(r.Context(), b, body)
	if err != nil {
		return err
	}
	return f.attachPTY(w, r, s)
}

// connectPTY is GET /process/pty/{sid}/connect (WebSocket): attach to a
// terminal. Its output from now on arrives as binary messages (no
// backlog); every message received is input. An unknown or ended terminal
// gets a control message with status "error", then the close.
func (f *Facade) connectPTY(w http.ResponseWriter, r *http.Request, b box) error {
	s, err := f.lookupPTY(b, r.PathValue("sid"))
	if err != nil {
		conn := acceptPTY(w, r)
		if conn == nil {
			return nil // Accept answered the client
		}
		refusePTY(r.Context(), conn, "Failed to connect to PTY session: "+err.Error())
		return nil
	}
	return f.attachPTY(w, r, s)
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

// attachPTY upgrades the request and serves it as a client of s until
// either side ends.
func (f *Facade) attachPTY(w http.ResponseWriter, r *http.Request, s *ptySession) error {
	conn := acceptPTY(w, r)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := r.Context()
	if err := f.startPTY(ctx, s); err != nil {
		refusePTY(ctx, conn, "Failed to start PTY session: "+classify(err).Message)
		return nil
	}
	cl := &ptyClient{conn: conn, exitControl: conn.Subprotocol() == ptyExitControl, budget: &f.ptyQueued, wake: make(chan struct{}, 1)}
	// Attach first, so no output is lost between "connected" and the
	// writer; the writer starts after "connected", so none precedes it.
	if msg := s.attach(cl); msg != "" {
		refusePTY(ctx, conn, msg)
		return nil
	}
	defer s.detach(cl)
	if err := conn.sendJSON(ctx, ptyControl{Type: "control", Status: "connected"}); err != nil {
		return nil
	}
	go cl.write(ctx, s)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return nil // the client left, or the writer closed the connection
		}
		s.mu.Lock()
		proc := s.proc
		s.mu.Unlock()
		if err := proc.SendInput(ctx, data); err != nil {
			cl.drop()
			return nil
		}
	}
}

// newPTY validates a terminal's parameters and registers it; unless
// lazyStart, its shell is started before it answers.
func (f *Facade) newPTY(ctx context.Context, b box, body ptyCreateBody) (*ptySession, error) {
	if !sessions.IDPattern.MatchString(body.ID) {
		return nil, badRequest("id must be 1-128 letters, digits, '.', '_' or '-'")
	}
	cols, rows := 80, 24
	if body.Cols != nil {
		cols = *body.Cols
	}
	if body.Rows != nil {
		rows = *body.Rows
	}
	if cols < 1 || cols > maxPTYSize || rows < 1 || rows > maxPTYSize {
		return nil, badRequest("cols and rows must be between 1 and %d", maxPTYSize)
	}
	envs := map[string]string{"TERM": "xterm-256color"}
	for k, v := range body.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00\n\r") {
			return nil, badRequest("env name %q is invalid", k)
		}
		envs[k] = v
	}
	cwd := body.Cwd
	if cwd == "" {
		cwd = b.home
	}
	s := &ptySession{
		sandboxID: b.sb.ID, b: b, clients: map[*ptyClient]struct{}{}, done: make(chan struct{}),
		info: ptyInfo{
			ID: body.ID, Cwd: cwd, Envs: envs, Cols: cols, Rows: rows,
			CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), LazyStart: body.LazyStart,
		},
	}
	f.mu.Lock()
	byID := f.ptys[b.sb.ID]
	if byID == nil {
		byID = map[string]*ptySession{}
		f.ptys[b.sb.ID] = byID
	}
	if old, dup := byID[body.ID]; dup {
		if !old.ended() {
			f.mu.Unlock()
			return nil, errorf(http.StatusConflict, "PTY session with ID '%s' already exists", body.ID)
		}
		delete(byID, body.ID) // an ended terminal's id is free again
	}
	if len(byID) >= maxPTYsPerSandbox {
		for id, old := range byID { // make room: forget ended terminals first
			if old.ended() {
				delete(byID, id)
			}
		}
	}
	if len(byID) >= maxPTYsPerSandbox {
		f.mu.Unlock()
		return nil, errorf(http.StatusTooManyRequests, "at most %d PTY sessions per sandbox", maxPTYsPerSandbox)
	}
	byID[body.ID] = s
	f.mu.Unlock()
	if body.LazyStart {
		return s, nil
	}
	if err := f.startPTY(ctx, s); err != nil {
		f.forgetPTY(s)
		return nil, err
	}
	return s, nil
}

// startPTY starts s's shell unless it is started (or ended). The shell is
// the sandbox user's bash, as a login shell, on a terminal of s's size.
func (f *Facade) startPTY(ctx context.Context, s *ptySession) error {
	s.mu.Lock()
	if s.proc != nil || s.exited || s.starting {
		s.mu.Unlock()
		return nil
	}
	s.starting = true
	info := s.info
	s.mu.Unlock()
	ac, err := f.agentFor(ctx, s.b)
	if err == nil {
		streamCtx, cancel := context.WithCancel(f.ctx)
		var proc *agent.Process
		proc, err = ac.StartProcess(streamCtx, agent.StartRequest{
			Cmd:  []string{"/bin/bash", "-l"},
			Env:  info.Envs,
			Cwd:  info.Cwd,
			User: s.b.user,
			Tag:  "daytona-pty-" + info.ID,
			PTY:  &agent.Size{Cols: uint32(info.Cols), Rows: uint32(info.Rows)},
		})
		if err == nil {
			s.mu.Lock()
			s.proc, s.cancel, s.info.Active, s.starting = proc, cancel, true, false
			s.mu.Unlock()
			go s.read()
			return nil
		}
		cancel()
	}
	s.mu.Lock()
	s.starting = false
	s.mu.Unlock()
	return agentError(err)
}

// read fans the terminal's output out to its clients until the shell
// ends; then each client gets the exit and its close.
func (s *ptySession) read() {
	var exit ptyExit
	for {
		out, err := s.proc.Recv()
		if err == nil {
			s.broadcast(out.Data)
			continue
		}
		if st, ok := s.proc.Exit(); ok && errors.Is(err, io.EOF) {
			exit = exitOf(st)
		} else {
			exit = ptyExit{code: -1, reason: "PTY session lost"}
		}
		break
	}
	_ = s.proc.Close()
	s.mu.Lock()
	s.cancel()
	s.exited, s.exit, s.info.Active = true, exit, false
	clients := s.clients
	s.clients = map[*ptyClient]struct{}{}
	s.mu.Unlock()
	close(s.done)
	for cl := range clients {
		cl.finish()
	}
}

// exitOf maps an agent exit status onto a shell's exit code: a signal N
// is 128+N, as a shell reports it.
func exitOf(st agent.ExitStatus) ptyExit {
	code := st.Code
	if !st.Exited {
		code = -1
		for sig := syscall.Signal(1); sig < 32; sig++ {
			if st.Status == "signal: "+sig.String() {
				code = 128 + int(sig)
				break
			}
		}
	}
	e := ptyExit{code: code}
	switch {
	case code == 0:
	case code == 130:
		e.reason = "Ctrl+C"
	case code == 137:
		e.reason = "SIGKILL"
	case code == 143:
		e.reason = "SIGTERM"
	case code > 128:
		e.reason = fmt.Sprintf("signal %d", code-128)
	default:
		e.reason = "non-zero exit"
	}
	return e
}

// ended reports whether the shell has ended.
func (s *ptySession) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

// attach adds cl to the clients, or says why it cannot be.
func (s *ptySession) attach(cl *ptyClient) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.exited:
		return fmt.Sprintf("PTY session %s has exited", s.info.ID)
	case s.proc == nil:
		return fmt.Sprintf("PTY session %s is not started", s.info.ID)
	case len(s.clients) >= maxPTYClients:
		return fmt.Sprintf("PTY session %s has %d clients already", s.info.ID, maxPTYClients)
	}
	s.clients[cl] = struct{}{}
	return ""
}

func (s *ptySession) detach(cl *ptyClient) {
	s.mu.Lock()
	delete(s.clients, cl)
	s.mu.Unlock()
	cl.drop()
}

func (s *ptySession) broadcast(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cl := range s.clients {
		if !cl.push(data) {
			delete(s.clients, cl)
		}
	}
}

// kill ends the shell's process group and forgets nothing: read reports
// the exit to the clients.
func (s *ptySession) kill() {
	s.killOnce.Do(func() {
		s.mu.Lock()
		proc, cancel := s.proc, s.cancel
		s.mu.Unlock()
		if proc == nil {
			s.mu.Lock()
			s.exited, s.exit = true, ptyExit{code: -1, reason: "PTY session killed"}
			s.mu.Unlock()
			close(s.done)
			return
		}
		ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = proc.Signal(ctx, syscall.SIGKILL)
		select { // read reports the exit; a stream that is gone ends here
		case <-s.done:
		case <-ctx.Done():
			cancel()
		}
	})
}

// push queues data for the client; false when the client is dropped (it
// fell maxPTYQueue behind).
func (cl *ptyClient) push(data []byte) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return false
	}
	if cl.queued+len(data) > maxPTYQueue || cl.budget.Add(int64(len(data))) > maxPTYQueued {
		if cl.queued+len(data) <= maxPTYQueue {
			cl.budget.Add(-int64(len(data))) // charged above: undo
		}
		cl.closed, cl.slow = true, true
		cl.takeLocked()
		cl.signal()
		return false
	}
	cl.queue = append(cl.queue, data)
	cl.queued += len(data)
	cl.signal()
	return true
}

// takeLocked empties the queue, returning what it held to the daemon's
// budget; the caller holds cl.mu.
func (cl *ptyClient) takeLocked() [][]byte {
	batch := cl.queue
	cl.budget.Add(-int64(cl.queued))
	cl.queue, cl.queued = nil, 0
	return batch
}

// finish marks the end of output: the writer sends the exit and closes.
func (cl *ptyClient) finish() {
	cl.mu.Lock()
	cl.closed = true
	cl.signal()
	cl.mu.Unlock()
}

// drop stops the client's output at once.
func (cl *ptyClient) drop() {
	cl.mu.Lock()
	cl.closed = true
	cl.takeLocked()
	cl.signal()
	cl.mu.Unlock()
	if cl.conn != nil {
		cl.conn.CloseNow()
	}
}

func (cl *ptyClient) signal() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// write sends the client's queued output, and once the shell ended its
// exit: an "exited" control message (when the client asked for it) and a
// close carrying {exitCode, exitReason}, 1000 for exit 0, else 1011.
func (cl *ptyClient) write(ctx context.Context, s *ptySession) {
	defer cl.conn.CloseNow()
	for {
		cl.mu.Lock()
		closed, slow := cl.closed, cl.slow
		batch := cl.takeLocked()
		cl.mu.Unlock()
		for _, data := range batch {
			if err := cl.conn.send(ctx, websocket.MessageBinary, data); err != nil {
				return
			}
		}
		if slow {
			cl.conn.end(websocket.StatusPolicyViolation, "slow consumer")
			return
		}
		if closed {
			select {
			case <-s.done:
			default:
				return // dropped: the client left
			}
			s.mu.Lock()
			exit := s.exit
			s.mu.Unlock()
			code := exit.code
			if cl.exitControl {
				_ = cl.conn.sendJSON(ctx, ptyControl{Type: "control", Status: "exited", ExitCode: &code, ExitReason: exit.reason})
			}
			status := websocket.StatusNormalClosure
			if code != 0 {
				status = websocket.StatusInternalError
			}
			reason, _ := json.Marshal(struct {
				ExitCode   int    `json:"exitCode"`
				ExitReason string `json:"exitReason,omitempty"`
			}{code, exit.reason})
			cl.conn.end(status, string(reason))
			return
		}
		select {
		case <-cl.wake:
		case <-ctx.Done():
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
func (f *Facade) listPTYs(w http.ResponseWriter, _ *http.Request, b box) error {
	f.mu.Lock()
	all := make([]*ptySession, 0, len(f.ptys[b.sb.ID]))
	for _, s := range f.ptys[b.sb.ID] {
		all = append(all, s)
	}
	f.mu.Unlock()
	out := make([]ptyInfo, 0, len(all))
	for _, s := range all {
		out = append(out, s.snapshot())
	}
	writeJSON(w, http.StatusOK, map[string][]ptyInfo{"sessions": out})
	return nil
}

// getPTY is GET /process/pty/{sid}: its PtySessionInfo (active false once
// its shell ended).
func (f *Facade) getPTY(w http.ResponseWriter, r *http.Request, b box) error {
	s, err := f.lookupPTY(b, r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.snapshot())
	return nil
}

// deletePTY is DELETE /process/pty/{sid}: the shell's process group is
// killed, its clients get the exit, and the id is forgotten.
func (f *Facade) deletePTY(w http.ResponseWriter, r *http.Request, b box) error {
	s, err := f.lookupPTY(b, r.PathValue("sid"))
	if err != nil {
		return err
	}
	f.forgetPTY(s)
	s.kill()
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
	if body.Cols < 1 || body.Cols > maxPTYSize || body.Rows < 1 || body.Rows > maxPTYSize {
		return badRequest("cols and rows must be between 1 and %d", maxPTYSize)
	}
	s, err := f.lookupPTY(b, r.PathValue("sid"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	proc, exited := s.proc, s.exited
	s.mu.Unlock()
	switch {
	case exited:
		return errorf(http.StatusGone, "PTY session %s has exited", s.info.ID)
	case proc == nil: // lazy: the size it will start with
		s.mu.Lock()
		s.info.Cols, s.info.Rows = body.Cols, body.Rows
		s.mu.Unlock()
	default:
		if err := proc.Resize(r.Context(), agent.Size{Cols: uint32(body.Cols), Rows: uint32(body.Rows)}); err != nil {
			return agentError(err)
		}
		s.mu.Lock()
		s.info.Cols, s.info.Rows = body.Cols, body.Rows
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, s.snapshot())
	return nil
}

func (s *ptySession) snapshot() ptyInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// lookupPTY returns a terminal of the box's sandbox, or 404.
func (f *Facade) lookupPTY(b box, id string) (*ptySession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.ptys[b.sb.ID][id]
	if s == nil {
		return nil, errorf(http.StatusNotFound, "PTY session %s not found", id)
	}
	return s, nil
}

// forgetPTY removes s from its sandbox's terminals, if it is still there.
func (f *Facade) forgetPTY(s *ptySession) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if byID := f.ptys[s.sandboxID]; byID[s.info.ID] == s {
		delete(byID, s.info.ID)
	}
}

// dropPTYs kills every terminal of a sandbox (it stopped, restarted or is
// being deleted).
func (f *Facade) dropPTYs(sandboxID string) {
	f.mu.Lock()
	byID := f.ptys[sandboxID]
	delete(f.ptys, sandboxID)
	f.mu.Unlock()
	killAll(byID)
}

// killAll kills terminals in parallel (each waits up to 5 s for its shell
// to end) and returns when all have.
func killAll(byID map[string]*ptySession) {
	var wg sync.WaitGroup
	for _, s := range byID {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.kill()
		}()
	}
	wg.Wait()
}
