package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// Limits of the code interpreter.
const (
	maxContextsPerSandbox = 16
	// maxInterpMarker bounds a control marker's text (an error's name,
	// value and traceback, which the worker truncates well below it):
	// output that opens a marker and does not close it in time is output.
	maxInterpMarker = 64 << 10
	// maxInterpChunk bounds the text of one stdout or stderr message.
	maxInterpChunk = 64 << 10
	// defaultInterpTimeout is Daytona's when the request names none.
	defaultInterpTimeout = 10 * time.Minute
	// interpGrace is how long after its timeout the worker may take to
	// report an interrupted execution before it is killed.
	interpGrace = 5 * time.Second
	// interpCloseTimeout is the WebSocket close code of a timed-out
	// execution; the SDK turns it into DaytonaTimeoutError.
	interpCloseTimeout websocket.StatusCode = 4008
	defaultContextID                        = "default"
)

// contextInfo is Daytona's InterpreterContext.
type contextInfo struct {
	ID        string `json:"id"`
	Cwd       string `json:"cwd"`
	CreatedAt string `json:"createdAt"`
	Active    bool   `json:"active"`
	Language  string `json:"language"`
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

// interpWorker is the Python program of a context: it runs each request
// (a JSON line on its stdin) in one namespace that persists between
// requests, its output on the worker's stdout and stderr, then prints
// \x1e<token>:E<error JSON>\x1e (if it raised) on stdout and
// \x1e<token>:D<status>\x1e on both streams. A timeout is a SIGALRM the
// worker sets itself (status "interrupted"). As Daytona's worker, its
// output is line-buffered (print("x") is one "x\n" message, not "x" then
// "\n") and an error's traceback has the cell's frames only, as
// File "<stdin>", line N, with the line's text.
const interpWorker = `
import json, linecache, os, signal, sys, traceback
tok = sys.argv[1]
sys.stdout.reconfigure(line_buffering=True)
sys.stderr.reconfigure(line_buffering=True)
proto = os.fdopen(os.dup(0), "rb")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
sys.stdin = open(os.devnull)
ns = {"__name__": "__main__", "__builtins__": __builtins__}
class _Timeout(BaseException):
    pass
def _alarm(*_):
    raise _Timeout()
signal.signal(signal.SIGALRM, _alarm)
def _tb(e):
    out = ["Traceback (most recent call last):\n"]
    for f in traceback.extract_tb(e.__traceback__):
        if f.filename == "<cell>":
            out.append('  File "<stdin>", line %d\n' % f.lineno)
            if f.line:
                out.append("    " + f.line + "\n")
    if len(out) == 1:
        out = []
    return "".join(out + traceback.format_exception_only(type(e), e))
def _mark(stream, text):
    stream.flush()
    stream.write("\x1e" + tok + ":" + text + "\x1e")
    stream.flush()
while True:
    line = proto.readline()
    if not line:
        break
    status, err = "completed", None
    saved = dict(os.environ)
    try:
        req = json.loads(line)
        os.environ.update(req.get("envs") or {})
        t = req.get("timeout") or 0
        if t > 0:
            signal.setitimer(signal.ITIMER_REAL, t)
        code = req["code"]
        linecache.cache["<cell>"] = (len(code), None, code.splitlines(True), "<cell>")
        exec(compile(code, "<cell>", "exec"), ns)
    except _Timeout:
        status = "interrupted"
    except KeyboardInterrupt:
        status = "interrupted"
    except BaseException as e:
        err = {"name": type(e).__name__, "value": str(e)[:8192], "traceback": _tb(e)[-32768:]}
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            status = "interrupted"
        os.environ.clear()
        os.environ.update(saved)
    if err is not None:
        _mark(sys.stdout, "E" + json.dumps(err))
    _mark(sys.stderr, "D" + status)
    _mark(sys.stdout, "D" + status)
`

// interpContext is one interpreter context: a Python worker in the
// sandbox, started through the agent, whose namespace lives as long as it
// does. One execution runs at a time; others wait their turn.
type interpContext struct {
	info      contextInfo
	sandboxID string
	proc      *agent.Process
	cancel    context.CancelFunc
	token     string
	turn      chan struct{} // holds one token: the right to execute
	dead      chan struct{} // closed when the worker's stream ended

	mu   sync.Mutex
	exec *interpExec // the execution whose output is flowing
}

// interpExec is one execution: where its output goes and when it ends.
type interpExec struct {
	send  func(interpMessage) // writes to the client; nil once it left
	dones int                 // done markers seen (one per stream)
	state string              // the worker's status once both arrived
	ended chan struct{}       // closed then
}

// createContext is POST /process/interpreter/context {cwd?, language?}:
// a new context (python only).
func (f *Facade) createContext(w http.ResponseWriter, r *http.Request, b box) error {
	var body createContextBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if l := strings.ToLower(body.Language); l != "" && l != "python" {
		return badRequest("unsupported language: %s (only 'python' is supported)", body.Language)
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails
	ic, err := f.startContext(r.Context(), b, hex.EncodeToString(id[:]), body.Cwd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ic.snapshot())
	return nil
}

func (ic *interpContext) snapshot() contextInfo {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.info
}

// listContexts is GET /process/interpreter/context: every context but the
// default one.
func (f *Facade) listContexts(w http.ResponseWriter, _ *http.Request, b box) error {
	f.mu.Lock()
	out := make([]contextInfo, 0, len(f.contexts[b.sb.ID]))
	var all []*interpContext
	for id, ic := range f.contexts[b.sb.ID] {
		if id != defaultContextID {
			all = append(all, ic)
		}
	}
	f.mu.Unlock()
	for _, ic := range all {
		out = append(out, ic.snapshot())
	}
	writeJSON(w, http.StatusOK, map[string][]contextInfo{"contexts": out})
	return nil
}

// deleteContext is DELETE /process/interpreter/context/{cid}: the worker
// is killed. The default context cannot be deleted (400).
func (f *Facade) deleteContext(w http.ResponseWriter, r *http.Request, b box) error {
	id := r.PathValue("cid")
	if id == defaultContextID {
		return badRequest("cannot delete default context")
	}
	f.mu.Lock()
	ic := f.contexts[b.sb.ID][id]
	if ic != nil {
		delete(f.contexts[b.sb.ID], id)
	}
	f.mu.Unlock()
	if ic == nil {
		return errorf(http.StatusNotFound, "context %s not found", id)
	}
	ic.kill()
	writeJSON(w, http.StatusOK, map[string]string{"message": "Context deleted successfully"})
	return nil
}

// startContext starts a worker and registers it under id.
func (f *Facade) startContext(ctx context.Context, b box, id, cwd string) (*interpContext, error) {
	if cwd == "" {
		cwd = b.home
	}
	f.mu.Lock()
	n := len(f.contexts[b.sb.ID])
	f.mu.Unlock()
	if n >= maxContextsPerSandbox {
		return nil, errorf(http.StatusTooManyRequests, "at most %d interpreter contexts per sandbox", maxContextsPerSandbox)
	}
	ac, err := f.agentFor(ctx, b)
	if err != nil {
		return nil, err
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:]) // never fails
	streamCtx, cancel := context.WithCancel(f.ctx)
	stopAfter := context.AfterFunc(ctx, cancel) // only the start is the request's
	proc, err := ac.StartProcess(streamCtx, agent.StartRequest{
		Cmd:   []string{"python3", "-c", interpWorker, hex.EncodeToString(tok[:])},
		User:  b.user,
		Cwd:   cwd,
		Tag:   "daytona-interpreter-" + id,
		Stdin: true,
	})
	if !stopAfter() {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		if proc != nil {
			killProc(proc)
		}
		cancel()
		return nil, agentError(err)
	}
	ic := &interpContext{
		info: contextInfo{
			ID: id, Cwd: cwd, Active: true, Language: "python",
			CreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
		},
		sandboxID: b.sb.ID, proc: proc, cancel: cancel, token: hex.EncodeToString(tok[:]),
		turn: make(chan struct{}, 1), dead: make(chan struct{}),
	}
	ic.turn <- struct{}{}
	f.mu.Lock()
	byID := f.contexts[b.sb.ID]
	if byID == nil {
		byID = map[string]*interpContext{}
		f.contexts[b.sb.ID] = byID
	}
	if _, dup := byID[id]; dup { // a concurrent first use of the default context
		f.mu.Unlock()
		ic.kill()
		return f.lookupContext(b, id)
	}
	byID[id] = ic
	f.mu.Unlock()
	go ic.read(func() { f.forgetContext(ic) })
	return ic, nil
}

func (f *Facade) lookupContext(b box, id string) (*interpContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ic := f.contexts[b.sb.ID][id]; ic != nil {
		return ic, nil
	}
	return nil, errorf(http.StatusNotFound, "context not found: %s", id)
}

func (f *Facade) forgetContext(ic *interpContext) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if byID := f.contexts[ic.sandboxID]; byID[ic.info.ID] == ic {
		delete(byID, ic.info.ID)
	}
}

// dropContexts kills every interpreter context of a sandbox.
func (f *Facade) dropContexts(sandboxID string) {
	f.mu.Lock()
	byID := f.contexts[sandboxID]
	delete(f.contexts, sandboxID)
	f.mu.Unlock()
	for _, ic := range byID {
		ic.kill()
	}
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
	var ic *interpContext
	if req.ContextID == "" || req.ContextID == defaultContextID {
		if ic, err = f.lookupContext(b, defaultContextID); err != nil {
			ic, err = f.startContext(ctx, b, defaultContextID, "")
		}
	} else {
		ic, err = f.lookupContext(b, req.ContextID)
	}
	if err != nil {
		conn.end(websocket.StatusPolicyViolation, classify(err).Message)
		return nil
	}
	ic.run(ctx, conn, req, timeout)
	return nil
}

// run runs one execution in the context and answers on conn.
func (ic *interpContext) run(ctx context.Context, conn *wsConn, req interpExecuteBody, timeout time.Duration) {
	select { // wait for the executions before this one
	case <-ic.turn:
	case <-ic.dead:
		conn.end(websocket.StatusInternalError, "interpreter context is not active")
		return
	case <-ctx.Done():
		return
	}
	var gone bool
	var sendMu sync.Mutex
	send := func(m interpMessage) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if gone {
			return
		}
		if err := conn.sendJSON(ctx, m); err != nil {
			gone = true // the client left; the code runs on to its end
		}
	}
	ex := &interpExec{send: send, ended: make(chan struct{})}
	ic.mu.Lock()
	ic.exec = ex
	ic.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"code": req.Code, "envs": req.Envs, "timeout": timeout.Seconds()})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := ic.proc.SendInput(sctx, append(line, '\n'))
	cancel()
	if err != nil {
		ic.kill()
		conn.end(websocket.StatusInternalError, "interpreter context is not active")
		return
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout + interpGrace)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-ex.ended:
		ic.turn <- struct{}{}
	case <-ic.dead:
		conn.end(websocket.StatusInternalError, "interpreter context died")
		return
	case <-deadline: // the worker did not interrupt the code: kill it
		ic.kill()
		conn.end(interpCloseTimeout, "execution timed out")
		return
	}
	ic.mu.Lock()
	state := ex.state
	ic.mu.Unlock()
	if state == "interrupted" && timeout > 0 {
		conn.end(interpCloseTimeout, "execution timed out")
		return
	}
	send(interpMessage{Type: "control", Text: state})
	conn.end(websocket.StatusNormalClosure, "")
}

// read demultiplexes the worker's output into its executions until the
// worker ends; then it is forgotten.
func (ic *interpContext) read(forget func()) {
	defer close(ic.dead)
	defer forget()
	defer ic.cancel()
	open := []byte("\x1e" + ic.token + ":")
	demux := [2]*markerSplitter{{open: open, limit: maxInterpMarker}, {open: open, limit: maxInterpMarker}}
	for {
		out, err := ic.proc.Recv()
		if err != nil {
			ic.mu.Lock()
			ic.info.Active = false
			ic.mu.Unlock()
			_ = ic.proc.Close()
			return
		}
		stderr := out.Stream == agent.Stderr
		demux[boolIndex(stderr)].feed(out.Data, func(text []byte) { ic.output(stderr, text) }, func(m string) { ic.marker(m) })
	}
}

// output sends text of one stream to the current execution, in valid
// UTF-8 messages of at most maxInterpChunk bytes.
func (ic *interpContext) output(stderr bool, text []byte) {
	ic.mu.Lock()
	ex := ic.exec
	ic.mu.Unlock()
	if ex == nil {
		return // between executions (a background thread's output): dropped
	}
	typ := "stdout"
	if stderr {
		typ = "stderr"
	}
	for len(text) > 0 {
		n := min(len(text), maxInterpChunk)
		ex.send(interpMessage{Type: typ, Text: strings.ToValidUTF8(string(text[:n]), "\uFFFD")})
		text = text[n:]
	}
}

// marker handles E<error JSON> and D<status>.
func (ic *interpContext) marker(m string) {
	ic.mu.Lock()
	ex := ic.exec
	ic.mu.Unlock()
	if ex == nil || m == "" {
		return
	}
	switch m[0] {
	case 'E':
		var e struct{ Name, Value, Traceback string }
		if json.Unmarshal([]byte(m[1:]), &e) == nil {
			ex.send(interpMessage{Type: "error", Name: e.Name, Value: e.Value, Traceback: e.Traceback})
		}
	case 'D':
		ic.mu.Lock()
		defer ic.mu.Unlock()
		if ex.dones++; ex.dones == 2 {
			ex.state = m[1:]
			ic.exec = nil
			close(ex.ended)
		}
	}
}

// kill ends the worker (best effort) and its stream.
func (ic *interpContext) kill() {
	killProc(ic.proc)
	ic.cancel()
}

// markerSplitter splits one output stream at markers open<text>\x1e: text
// outside markers is output, in valid UTF-8 pieces (an incomplete rune at
// a chunk's end waits for the next chunk); a marker's text longer than
// limit is output too.
type markerSplitter struct {
	open  []byte
	limit int
	buf   []byte
}

func (d *markerSplitter) feed(data []byte, output func([]byte), marker func(string)) {
	d.buf = append(d.buf, data...)
	for {
		i := bytes.Index(d.buf, d.open)
		if i < 0 {
			keep := partialSuffix(d.buf, d.open)
			keep = max(keep, incompleteRune(d.buf[:len(d.buf)-keep]))
			emit(output, d.buf[:len(d.buf)-keep])
			d.buf = append([]byte(nil), d.buf[len(d.buf)-keep:]...)
			return
		}
		emit(output, d.buf[:i])
		rest := d.buf[i+len(d.open):]
		j := bytes.IndexByte(rest, 0x1e)
		if j < 0 && len(rest) <= d.limit {
			d.buf = append([]byte(nil), d.buf[i:]...)
			return
		}
		if j < 0 || j > d.limit { // not a marker: output
			emit(output, d.buf[i:i+len(d.open)])
			d.buf = rest
			continue
		}
		marker(string(rest[:j]))
		d.buf = rest[j+1:]
	}
}

func emit(output func([]byte), b []byte) {
	if len(b) > 0 {
		output(b)
	}
}

// incompleteRune is the length of an incomplete UTF-8 sequence at b's end
// (0 when b ends on a rune boundary or with invalid bytes, which are
// replaced, never held).
func incompleteRune(b []byte) int {
	for k := 1; k <= min(3, len(b)); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}

// killProc kills a worker's process group (best effort: the sandbox may
// be gone) and closes its stream.
func killProc(p *agent.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Signal(ctx, syscall.SIGKILL)
	_ = p.Close()
}

// partialSuffix is the length of the longest proper prefix of marker that
// b ends with: bytes to hold back until the next chunk decides.
func partialSuffix(b, marker []byte) int {
	for k := min(len(marker)-1, len(b)); k > 0; k-- {
		if bytes.HasSuffix(b, marker[:k]) {
			return k
		}
	}
	return 0
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
