package sessions

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// Limits of the code interpreter.
const (
	MaxContextsPerSandbox = 16
	// maxInterpMarker bounds a control marker's text (an error's name,
	// value and traceback, which the worker truncates well below it):
	// output that opens a marker and does not close it in time is output.
	maxInterpMarker = 64 << 10
	// maxInterpChunk bounds the text of one stdout or stderr message.
	maxInterpChunk = 64 << 10
	// interpGrace is how long after its timeout the worker may take to
	// report an interrupted execution before it is killed.
	interpGrace = 5 * time.Second
	// DefaultContext is the context made at first use, neither listed nor
	// deletable.
	DefaultContext = "default"
)

// contextTagPrefix starts the agent tag of an interpreter context:
// sandboxd.interpreter/<id>/<token>/<created, Unix ms>.
const contextTagPrefix = "sandboxd.interpreter/"

var contextIDPattern = regexp.MustCompile(`^(default|[0-9a-f]{32})$`)

func contextTag(id, token string, created time.Time) string {
	return contextTagPrefix + id + "/" + token + "/" + strconv.FormatInt(created.UnixMilli(), 10)
}

// parseContextTag reads a tag the agent reported, which is hostile input.
func parseContextTag(tag string) (id, token string, created time.Time, ok bool) {
	rest, ok := strings.CutPrefix(tag, contextTagPrefix)
	if !ok {
		return "", "", time.Time{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || !contextIDPattern.MatchString(parts[0]) || !tokenPattern.MatchString(parts[1]) {
		return "", "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || ms < 0 {
		return "", "", time.Time{}, false
	}
	return parts[0], parts[1], time.UnixMilli(ms).UTC(), true
}

// ContextInfo describes an interpreter context (python only).
type ContextInfo struct {
	ID        string
	Cwd       string
	CreatedAt time.Time
	Active    bool
	Language  string
}

// ExecRequest is one execution in a context ("" or DefaultContext: the
// default one, made at first use). Timeout zero: none.
type ExecRequest struct {
	Code      string
	ContextID string
	Envs      map[string]string
	Timeout   time.Duration
}

// Message is one message of an execution: Type stdout or stderr with
// Text, or error with Name, Value and Traceback.
type Message struct {
	Type, Text, Name, Value, Traceback string
}

// ExecEnd says how an execution ended.
type ExecEnd int

// Ends of an execution.
const (
	Completed ExecEnd = iota // the worker reported a status (completed, interrupted…)
	TimedOut                 // past its timeout
	NotActive                // the context's worker was gone before it ran
	Died                     // the worker died while it ran
)

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
    status, err, xid = "completed", None, ""
    saved = dict(os.environ)
    try:
        req = json.loads(line)
        xid = str(req.get("id") or "")[:64]
        _mark(sys.stdout, "B" + xid)
        _mark(sys.stderr, "B" + xid)
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
        _mark(sys.stdout, "E" + xid + ":" + json.dumps(err))
    _mark(sys.stderr, "D" + xid + ":" + status)
    _mark(sys.stdout, "D" + xid + ":" + status)
`

// interpContext is one interpreter context: a Python worker in the
// sandbox, started through the agent, whose namespace lives as long as it
// does (a restart of the daemon included). One execution runs at a time;
// others wait their turn.
type interpContext struct {
	m      *Manager
	b      *box
	proc   *agent.Process
	cancel context.CancelFunc
	token  string
	turn   chan struct{} // holds one token: the right to execute
	dead   chan struct{} // closed when the worker's stream ended
	once   sync.Once

	mu      sync.Mutex
	info    ContextInfo
	exec    *interpExec // the execution whose output is flowing
	current [2]string   // per stream: the execution id whose output flows
}

// interpExec is one execution: where its output goes and when it ends.
type interpExec struct {
	id    string
	send  func(Message) // writes to the client
	dones int           // done markers seen (one per stream)
	state string        // the worker's status once both arrived
	ended chan struct{} // closed then
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// CreateContext starts a new context's worker, in cwd (the target's
// when empty). language must be empty or python.
func (m *Manager) CreateContext(ctx context.Context, t Target, cwd, language string) (ContextInfo, error) {
	if l := strings.ToLower(language); l != "" && l != "python" {
		return ContextInfo{}, errorf(Invalid, "unsupported language: %s (only 'python' is supported)", language)
	}
	ic, err := m.startContext(ctx, t, randomHex(16), cwd)
	if err != nil {
		return ContextInfo{}, err
	}
	return ic.snapshot(), nil
}

func (ic *interpContext) snapshot() ContextInfo {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.info
}

// Contexts lists the contexts but the default one, by id.
func (m *Manager) Contexts(ctx context.Context, t Target) ([]ContextInfo, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	all := make([]*interpContext, 0, len(b.contexts))
	for id, ic := range b.contexts {
		if id != DefaultContext && ic != nil {
			all = append(all, ic)
		}
	}
	b.mu.Unlock()
	out := make([]ContextInfo, 0, len(all))
	for _, ic := range all {
		out = append(out, ic.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteContext kills a context's worker and forgets it. The default
// context cannot be deleted.
func (m *Manager) DeleteContext(ctx context.Context, t Target, id string) error {
	if id == DefaultContext {
		return errorf(Invalid, "cannot delete default context")
	}
	b, _, err := m.open(ctx, t)
	if err != nil {
		return err
	}
	b.mu.Lock()
	ic := b.contexts[id]
	if ic != nil {
		delete(b.contexts, id)
	}
	b.mu.Unlock()
	if ic == nil {
		return errorf(NotFound, "context %s not found", id)
	}
	ic.kill()
	return nil
}

// startContext starts a worker and registers it under id; a concurrent
// start of the same id (the default context's first use) gets the one
// registered first.
func (m *Manager) startContext(ctx context.Context, t Target, id, cwd string) (*interpContext, error) {
	if cwd == "" {
		cwd = t.Cwd
	}
	b, ac, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	// A slot is taken before the start, so concurrent starts never pass
	// the limit together.
	b.mu.Lock()
	if len(b.contexts)+b.starting >= MaxContextsPerSandbox {
		b.mu.Unlock()
		return nil, errorf(TooMany, "at most %d interpreter contexts per sandbox", MaxContextsPerSandbox)
	}
	b.starting++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.starting--
		b.mu.Unlock()
	}()
	token, created := randomHex(8), time.Now().UTC()
	sctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	proc, stop, err := m.stream(sctx, func(s context.Context) (*agent.Process, error) {
		return ac.StartProcess(s, agent.StartRequest{
			Cmd: []string{"python3", "-c", interpWorker, token}, User: t.User, Cwd: cwd,
			Tag: contextTag(id, token, created), Stdin: true,
		})
	})
	if err != nil {
		return nil, agentError(err)
	}
	ic := m.newContext(b, proc, stop, token, ContextInfo{ID: id, Cwd: cwd, CreatedAt: created, Active: true, Language: "python"})
	b.mu.Lock()
	old, dup := b.contexts[id]
	if !dup && !b.dropped {
		b.contexts[id] = ic
	}
	b.mu.Unlock()
	switch {
	case dup: // a concurrent first use of the default context
		ic.kill()
		return old, nil
	case b.isDropped():
		ic.kill()
		return nil, errorf(Ended, "sandbox %s stopped", t.SandboxID)
	}
	go ic.read()
	return ic, nil
}

func (b *box) isDropped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

func (m *Manager) newContext(b *box, proc *agent.Process, stop context.CancelFunc, token string, info ContextInfo) *interpContext {
	ic := &interpContext{
		m: m, b: b, proc: proc, cancel: stop, token: token, info: info,
		turn: make(chan struct{}, 1), dead: make(chan struct{}),
	}
	ic.turn <- struct{}{}
	return ic
}

// attachContext reattaches to p when it is a context the cache lacks. An
// execution that was running when the daemon stopped runs on unseen.
func (m *Manager) attachContext(ctx context.Context, b *box, ac *agent.Client, t Target, p agent.ProcessInfo) error {
	id, token, created, ok := parseContextTag(p.Tag)
	if !ok || p.PID == 0 {
		return nil
	}
	b.mu.Lock()
	_, have := b.contexts[id]
	full := len(b.contexts) >= MaxContextsPerSandbox
	b.mu.Unlock()
	if have || full {
		return nil
	}
	proc, stop, err := m.stream(ctx, func(s context.Context) (*agent.Process, error) {
		return ac.ConnectProcess(s, agent.Attach{PID: p.PID, User: t.User})
	})
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return agentError(err)
	}
	ic := m.newContext(b, proc, stop, token, ContextInfo{ID: id, Cwd: p.Cwd, CreatedAt: created, Active: true, Language: "python"})
	b.mu.Lock()
	_, have = b.contexts[id]
	ok = !have && !b.dropped
	if ok {
		b.contexts[id] = ic
	}
	b.mu.Unlock()
	if !ok {
		ic.detach()
		return nil
	}
	go ic.read()
	return nil
}

// Execute runs one execution in a context, sending its output as it
// comes, and returns how it ended and, for Completed, the worker's
// status. The client leaving (ctx) does not stop the code, which runs to
// its end; its output is then dropped.
func (m *Manager) Execute(ctx context.Context, t Target, req ExecRequest, send func(Message) error) (string, ExecEnd, error) {
	if req.Code == "" {
		return "", 0, errorf(Invalid, "code is required")
	}
	var ic *interpContext
	var err error
	if req.ContextID == "" || req.ContextID == DefaultContext {
		if ic, err = m.lookupContext(ctx, t, DefaultContext); err != nil {
			ic, err = m.startContext(ctx, t, DefaultContext, "")
		}
	} else {
		ic, err = m.lookupContext(ctx, t, req.ContextID)
	}
	if err != nil {
		return "", 0, err
	}
	return ic.run(ctx, req, send)
}

func (m *Manager) lookupContext(ctx context.Context, t Target, id string) (*interpContext, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	ic := b.contexts[id]
	b.mu.Unlock()
	if ic == nil {
		return nil, errorf(NotFound, "context not found: %s", id)
	}
	return ic, nil
}

// run runs one execution in the context.
func (ic *interpContext) run(ctx context.Context, req ExecRequest, send func(Message) error) (string, ExecEnd, error) {
	select { // wait for the executions before this one
	case <-ic.turn:
	case <-ic.dead:
		return "", NotActive, nil
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
	var gone bool
	var sendMu sync.Mutex
	ex := &interpExec{id: randomHex(8), ended: make(chan struct{}), send: func(msg Message) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if !gone && send(msg) != nil {
			gone = true // the client left; the code runs on to its end
		}
	}}
	ic.mu.Lock()
	ic.exec = ex
	ic.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"id": ex.id, "code": req.Code, "envs": req.Envs, "timeout": req.Timeout.Seconds()})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := ic.proc.SendInput(sctx, append(line, '\n'))
	cancel()
	if err != nil {
		ic.kill()
		return "", NotActive, nil
	}
	var deadline <-chan time.Time
	if req.Timeout > 0 {
		tm := time.NewTimer(req.Timeout + interpGrace)
		defer tm.Stop()
		deadline = tm.C
	}
	select {
	case <-ex.ended:
		ic.turn <- struct{}{}
	case <-ic.dead:
		return "", Died, nil
	case <-deadline: // the worker did not interrupt the code: kill it
		ic.kill()
		return "", TimedOut, nil
	}
	ic.mu.Lock()
	state := ex.state
	ic.mu.Unlock()
	if state == "interrupted" && req.Timeout > 0 {
		return state, TimedOut, nil
	}
	return state, Completed, nil
}

// read demultiplexes the worker's output into its executions until the
// worker's stream ends; then the context is forgotten (the next use finds
// it again if the worker runs on).
func (ic *interpContext) read() {
	defer close(ic.dead)
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
			if ic.m.ctx.Err() == nil {
				ic.b.forgetContext(ic)
			}
			return
		}
		i := boolIndex(out.Stream == agent.Stderr)
		demux[i].feed(out.Data, func(text []byte) { ic.output(i, text) }, func(m string) { ic.marker(i, m) })
	}
}

func (b *box) forgetContext(ic *interpContext) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.contexts[ic.info.ID] == ic {
		delete(b.contexts, ic.info.ID)
		b.loaded = false
	}
}

// output sends text of one stream to the current execution, in valid
// UTF-8 messages of at most maxInterpChunk bytes.
func (ic *interpContext) output(stream int, text []byte) {
	ic.mu.Lock()
	ex := ic.exec
	ok := ex != nil && ic.current[stream] == ex.id
	ic.mu.Unlock()
	if !ok {
		return // between executions, or another's (one from before a restart): dropped
	}
	typ := "stdout"
	if stream == 1 {
		typ = "stderr"
	}
	for len(text) > 0 {
		n := min(len(text), maxInterpChunk)
		ex.send(Message{Type: typ, Text: strings.ToValidUTF8(string(text[:n]), "\uFFFD")})
		text = text[n:]
	}
}

// marker handles B<id>, E<id>:<error JSON> and D<id>:<status>; those of
// another execution than the current one are ignored.
func (ic *interpContext) marker(stream int, m string) {
	if m == "" {
		return
	}
	kind, rest := m[0], m[1:]
	ic.mu.Lock()
	ex := ic.exec
	if kind == 'B' {
		ic.current[stream] = rest
		ic.mu.Unlock()
		return
	}
	ic.mu.Unlock()
	id, body, ok := strings.Cut(rest, ":")
	if ex == nil || !ok || id != ex.id {
		return
	}
	switch kind {
	case 'E':
		var e struct{ Name, Value, Traceback string }
		if json.Unmarshal([]byte(body), &e) == nil {
			ex.send(Message{Type: "error", Name: e.Name, Value: e.Value, Traceback: e.Traceback})
		}
	case 'D':
		ic.mu.Lock()
		defer ic.mu.Unlock()
		ic.current[stream] = ""
		if ex.dones++; ex.dones == 2 {
			ex.state = body
			ic.exec = nil
			close(ex.ended)
		}
	}
}

// kill ends the worker (best effort) and its stream.
func (ic *interpContext) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = ic.proc.Signal(ctx, syscall.SIGKILL)
	ic.detach()
}

// detach ends the worker's stream (not the worker).
func (ic *interpContext) detach() {
	ic.once.Do(func() {
		_ = ic.proc.Close()
		ic.cancel()
	})
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
