package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// Limits of terminals: what one sandbox may hold, and what the daemon
// keeps for each client of a terminal.
const (
	MaxTerminalsPerSandbox = 32
	MaxTerminalClients     = 8 // clients attached to one terminal
	MaxTerminalSize        = 1000
	// maxClientQueue bounds the output queued for one client: a client
	// that falls this far behind is dropped as slow, so a terminal
	// printing without end never grows the daemon's memory.
	maxClientQueue = 1 << 20
	// maxQueuedTotal bounds the output queued for all the clients of all
	// terminals of the daemon: past it, the client whose push would cross
	// it is dropped as slow.
	maxQueuedTotal = 64 << 20
)

// terminalTagPrefix starts the agent tag of a terminal:
// sandboxd.pty/<id>/<cols>x<rows>/<created, Unix ms>[/lazy]. The size is
// the one it started with: a resize is not recorded in the agent, so a
// daemon that reattaches reads the starting size.
const terminalTagPrefix = "sandboxd.pty/"

func terminalTag(info TerminalInfo) string {
	tag := fmt.Sprintf("%s%s/%dx%d/%d", terminalTagPrefix, info.ID, info.Cols, info.Rows, info.CreatedAt.UnixMilli())
	if info.Lazy {
		tag += "/lazy"
	}
	return tag
}

// parseTerminalTag reads a tag the agent reported, which is hostile input.
func parseTerminalTag(tag string) (TerminalInfo, bool) {
	rest, ok := strings.CutPrefix(tag, terminalTagPrefix)
	if !ok {
		return TerminalInfo{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 || len(parts) > 4 || !IDPattern.MatchString(parts[0]) || (len(parts) == 4 && parts[3] != "lazy") {
		return TerminalInfo{}, false
	}
	c, r, ok := strings.Cut(parts[1], "x")
	cols, err1 := strconv.Atoi(c)
	rows, err2 := strconv.Atoi(r)
	ms, err3 := strconv.ParseInt(parts[2], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || cols < 1 || cols > MaxTerminalSize || rows < 1 || rows > MaxTerminalSize || ms < 0 {
		return TerminalInfo{}, false
	}
	return TerminalInfo{ID: parts[0], Cols: cols, Rows: rows, CreatedAt: time.UnixMilli(ms).UTC(), Lazy: len(parts) == 4}, true
}

// TerminalSpec is a terminal to create. Cols and Rows of zero are 80×24;
// an empty Cwd is the target's.
type TerminalSpec struct {
	ID         string
	Cwd        string
	Env        map[string]string
	Cols, Rows int
	// Lazy starts the shell at the first attach.
	Lazy bool
}

// TerminalInfo describes a terminal. Active: its shell runs.
type TerminalInfo struct {
	ID         string
	Cwd        string
	Env        map[string]string
	Cols, Rows int
	CreatedAt  time.Time
	Active     bool
	Lazy       bool
}

// TerminalExit is how a terminal's shell ended: a signal N is 128+N, as a
// shell reports it; Reason is empty for exit 0.
type TerminalExit struct {
	Code   int
	Reason string
}

// terminal is a shell on a PTY, started through the agent, whose output
// goes to every attached client. It outlives its clients, and the daemon.
type terminal struct {
	m    *Manager
	b    *box
	user string

	mu       sync.Mutex
	info     TerminalInfo
	proc     *agent.Process // nil until started (Lazy)
	cancel   context.CancelFunc
	starting bool
	exited   bool
	exit     TerminalExit
	clients  map[*TerminalClient]struct{}
	done     chan struct{} // closed once the shell has ended
	killOnce sync.Once
}

func (m *Manager) newTerminal(b *box, user string, info TerminalInfo) *terminal {
	return &terminal{m: m, b: b, user: user, info: info, clients: map[*TerminalClient]struct{}{}, done: make(chan struct{})}
}

// CreateTerminal validates spec and registers the terminal; unless Lazy,
// its shell (the target user's bash -l, TERM xterm-256color unless the
// env says otherwise) is started before it returns. An id in use by a
// terminal whose shell runs is Exists; an ended one's id is free again.
func (m *Manager) CreateTerminal(ctx context.Context, t Target, spec TerminalSpec) (TerminalInfo, error) {
	if !IDPattern.MatchString(spec.ID) {
		return TerminalInfo{}, errorf(Invalid, "a terminal id must be 1-128 letters, digits, '.', '_' or '-'")
	}
	if spec.Cols == 0 {
		spec.Cols = 80
	}
	if spec.Rows == 0 {
		spec.Rows = 24
	}
	if spec.Cols < 1 || spec.Cols > MaxTerminalSize || spec.Rows < 1 || spec.Rows > MaxTerminalSize {
		return TerminalInfo{}, errorf(Invalid, "cols and rows must be between 1 and %d", MaxTerminalSize)
	}
	env := map[string]string{"TERM": "xterm-256color"}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00\n\r") {
			return TerminalInfo{}, errorf(Invalid, "env name %q is invalid", k)
		}
		env[k] = v
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = t.Cwd
	}
	b, _, err := m.open(ctx, t)
	if err != nil {
		return TerminalInfo{}, err
	}
	info := TerminalInfo{
		ID: spec.ID, Cwd: cwd, Env: env, Cols: spec.Cols, Rows: spec.Rows,
		CreatedAt: time.Now().UTC(), Lazy: spec.Lazy,
	}
	term := m.newTerminal(b, t.User, info)
	b.mu.Lock()
	if b.dropped {
		b.mu.Unlock()
		return TerminalInfo{}, errorf(Ended, "sandbox %s stopped", t.SandboxID)
	}
	if old, dup := b.terms[spec.ID]; dup {
		if !old.ended() {
			b.mu.Unlock()
			return TerminalInfo{}, errorf(Exists, "PTY session with ID '%s' already exists", spec.ID)
		}
		delete(b.terms, spec.ID)
	}
	if len(b.terms) >= MaxTerminalsPerSandbox {
		for id, old := range b.terms { // make room: forget ended terminals first
			if old.ended() {
				delete(b.terms, id)
			}
		}
	}
	if len(b.terms) >= MaxTerminalsPerSandbox {
		b.mu.Unlock()
		return TerminalInfo{}, errorf(TooMany, "at most %d PTY sessions per sandbox", MaxTerminalsPerSandbox)
	}
	b.terms[spec.ID] = term
	b.mu.Unlock()
	if spec.Lazy {
		return term.snapshot(), nil
	}
	if err := m.startTerminal(ctx, t, term); err != nil {
		b.forgetTerm(term, false)
		return TerminalInfo{}, err
	}
	return term.snapshot(), nil
}

// startTerminal starts term's shell unless it is started (or ended).
func (m *Manager) startTerminal(ctx context.Context, t Target, term *terminal) error {
	term.mu.Lock()
	if term.proc != nil || term.exited || term.starting {
		term.mu.Unlock()
		return nil
	}
	term.starting = true
	info := term.info
	term.mu.Unlock()
	ac, err := m.agents.Agent(ctx, t.SandboxID)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		var proc *agent.Process
		var stop context.CancelFunc
		proc, stop, err = m.stream(sctx, func(s context.Context) (*agent.Process, error) {
			return ac.StartProcess(s, agent.StartRequest{
				Cmd: []string{"/bin/bash", "-l"}, Env: info.Env, Cwd: info.Cwd, User: term.user,
				Tag: terminalTag(info),
				PTY: &agent.Size{Cols: uint32(info.Cols), Rows: uint32(info.Rows)},
			})
		})
		cancel()
		if err == nil {
			if !term.started(proc, stop) {
				return errorf(Ended, "PTY session %s was deleted while it started", info.ID)
			}
			return nil
		}
	}
	term.mu.Lock()
	term.starting = false
	term.mu.Unlock()
	return agentError(err)
}

// attachTerminal reattaches to p when it is a terminal the cache lacks.
func (m *Manager) attachTerminal(ctx context.Context, b *box, ac *agent.Client, t Target, p agent.ProcessInfo) error {
	info, ok := parseTerminalTag(p.Tag)
	if !ok || p.PID == 0 {
		return nil
	}
	info.Cwd, info.Active = p.Cwd, true
	if len(p.Env) <= 256 {
		info.Env = p.Env
	}
	term := m.newTerminal(b, t.User, info)
	b.mu.Lock()
	_, have := b.terms[info.ID]
	if have || b.dropped || len(b.terms) >= MaxTerminalsPerSandbox {
		b.mu.Unlock()
		return nil
	}
	term.starting = true // reserved: not started, not startable
	b.terms[info.ID] = term
	b.mu.Unlock()
	proc, stop, err := m.stream(ctx, func(s context.Context) (*agent.Process, error) {
		return ac.ConnectProcess(s, agent.Attach{PID: p.PID, PTY: true, User: t.User})
	})
	if err != nil {
		b.forgetTerm(term, false)
		if isNotFound(err) {
			return nil // it ended meanwhile
		}
		return agentError(err)
	}
	if term.started(proc, stop) {
		b.mu.Lock()
		dropped := b.dropped
		b.mu.Unlock()
		if dropped {
			stop()
		}
	}
	return nil
}

// started records the stream of term's shell and starts its reader;
// false when term ended meanwhile (deleted, or its sandbox stopped): the
// shell is killed then.
func (term *terminal) started(proc *agent.Process, stop context.CancelFunc) bool {
	term.mu.Lock()
	if term.exited {
		term.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = proc.Signal(ctx, syscall.SIGKILL) // best effort
		_ = proc.Close()
		stop()
		return false
	}
	term.proc, term.cancel, term.info.Active, term.starting = proc, stop, true, false
	term.mu.Unlock()
	go term.read()
	return true
}

// read fans the terminal's output out to its clients until the shell
// ends; then each client gets the exit and its end. A stream lost while
// the shell may run (the daemon stops, the sandbox stopped, the agent
// went away) ends the clients as "PTY session lost" and forgets the
// terminal, which the next use finds again if it runs.
func (term *terminal) read() {
	var exit TerminalExit
	for {
		out, err := term.proc.Recv()
		if err == nil {
			term.broadcast(out.Data)
			continue
		}
		if st, ok := term.proc.Exit(); ok && errors.Is(err, io.EOF) {
			exit = exitOf(st)
		} else {
			exit = TerminalExit{Code: -1, Reason: "PTY session lost"}
			if term.m.ctx.Err() == nil {
				term.b.forgetTerm(term, true)
			}
		}
		break
	}
	_ = term.proc.Close()
	term.mu.Lock()
	term.cancel()
	term.exited, term.exit, term.info.Active = true, exit, false
	clients := term.clients
	term.clients = map[*TerminalClient]struct{}{}
	term.mu.Unlock()
	close(term.done)
	for cl := range clients {
		cl.finish()
	}
}

// exitOf maps an agent exit status onto a shell's exit code: a signal N
// is 128+N, as a shell reports it.
func exitOf(st agent.ExitStatus) TerminalExit {
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
	e := TerminalExit{Code: code}
	switch {
	case code == 0:
	case code == 130:
		e.Reason = "Ctrl+C"
	case code == 137:
		e.Reason = "SIGKILL"
	case code == 143:
		e.Reason = "SIGTERM"
	case code > 128:
		e.Reason = fmt.Sprintf("signal %d", code-128)
	default:
		e.Reason = "non-zero exit"
	}
	return e
}

func (term *terminal) ended() bool {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.exited
}

func (term *terminal) snapshot() TerminalInfo {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.info
}

func (term *terminal) broadcast(data []byte) {
	if len(data) == 0 {
		return // nothing to show: never queue an empty chunk
	}
	term.mu.Lock()
	defer term.mu.Unlock()
	for cl := range term.clients {
		if !cl.push(data) {
			delete(term.clients, cl)
		}
	}
}

// kill ends the shell's process group; read reports the exit to the
// clients.
func (term *terminal) kill() {
	term.killOnce.Do(func() {
		term.mu.Lock()
		proc, cancel := term.proc, term.cancel
		if proc == nil && !term.exited {
			term.exited, term.exit = true, TerminalExit{Code: -1, Reason: "PTY session killed"}
			close(term.done)
		}
		term.mu.Unlock()
		if proc == nil {
			return
		}
		ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = proc.Signal(ctx, syscall.SIGKILL)
		select { // read reports the exit; a stream that is gone ends here
		case <-term.done:
		case <-ctx.Done():
			cancel()
		}
	})
}

// detachStream ends the terminal's stream (not its shell): the sandbox
// stopped, or the daemon is stopping.
func (term *terminal) detachStream() {
	term.mu.Lock()
	cancel := term.cancel
	if term.proc == nil && !term.exited {
		term.exited, term.exit = true, TerminalExit{Code: -1, Reason: "PTY session lost"}
		close(term.done)
	}
	term.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// forgetTerm removes term from the cache if it is still there; relist:
// the next use lists the agent again.
func (b *box) forgetTerm(term *terminal, relist bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.terms[term.info.ID] == term {
		delete(b.terms, term.info.ID)
		if relist {
			b.loaded = false
		}
	}
}

func (m *Manager) lookupTerminal(ctx context.Context, t Target, id string) (*terminal, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	term := b.terms[id]
	b.mu.Unlock()
	if term == nil {
		return nil, errorf(NotFound, "PTY session %s not found", id)
	}
	return term, nil
}

// Terminals lists t's sandbox's terminals, by id.
func (m *Manager) Terminals(ctx context.Context, t Target) ([]TerminalInfo, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	all := make([]*terminal, 0, len(b.terms))
	for _, term := range b.terms {
		all = append(all, term)
	}
	b.mu.Unlock()
	out := make([]TerminalInfo, 0, len(all))
	for _, term := range all {
		out = append(out, term.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Terminal is one terminal (Active false once its shell ended).
func (m *Manager) Terminal(ctx context.Context, t Target, id string) (TerminalInfo, error) {
	term, err := m.lookupTerminal(ctx, t, id)
	if err != nil {
		return TerminalInfo{}, err
	}
	return term.snapshot(), nil
}

// DeleteTerminal kills a terminal's process group (its clients get the
// exit) and forgets it.
func (m *Manager) DeleteTerminal(ctx context.Context, t Target, id string) error {
	term, err := m.lookupTerminal(ctx, t, id)
	if err != nil {
		return err
	}
	term.b.forgetTerm(term, false)
	term.kill()
	return nil
}

// ResizeTerminal sets a terminal's size (the shell gets SIGWINCH); a lazy
// one starts with it. Ended once its shell ended.
func (m *Manager) ResizeTerminal(ctx context.Context, t Target, id string, cols, rows int) (TerminalInfo, error) {
	if cols < 1 || cols > MaxTerminalSize || rows < 1 || rows > MaxTerminalSize {
		return TerminalInfo{}, errorf(Invalid, "cols and rows must be between 1 and %d", MaxTerminalSize)
	}
	term, err := m.lookupTerminal(ctx, t, id)
	if err != nil {
		return TerminalInfo{}, err
	}
	term.mu.Lock()
	proc, exited := term.proc, term.exited
	term.mu.Unlock()
	switch {
	case exited:
		return TerminalInfo{}, errorf(Ended, "PTY session %s has exited", id)
	case proc != nil:
		if err := proc.Resize(ctx, agent.Size{Cols: uint32(cols), Rows: uint32(rows)}); err != nil {
			return TerminalInfo{}, agentError(err)
		}
	}
	term.mu.Lock()
	term.info.Cols, term.info.Rows = cols, rows
	term.mu.Unlock()
	return term.snapshot(), nil
}

// StartTerminal starts a lazy terminal's shell; a started one is left
// alone.
func (m *Manager) StartTerminal(ctx context.Context, t Target, id string) error {
	term, err := m.lookupTerminal(ctx, t, id)
	if err != nil {
		return err
	}
	return m.startTerminal(ctx, t, term)
}

// AttachTerminal attaches a client to a started terminal: it gets the
// terminal's output from now on (no backlog). Close it when done.
func (m *Manager) AttachTerminal(ctx context.Context, t Target, id string) (*TerminalClient, error) {
	term, err := m.lookupTerminal(ctx, t, id)
	if err != nil {
		return nil, err
	}
	cl := &TerminalClient{term: term, budget: &m.queued, wake: make(chan struct{}, 1)}
	term.mu.Lock()
	defer term.mu.Unlock()
	switch {
	case term.exited:
		return nil, errorf(Ended, "PTY session %s has exited", id)
	case term.proc == nil:
		return nil, errorf(Invalid, "PTY session %s is not started", id)
	case len(term.clients) >= MaxTerminalClients:
		return nil, errorf(TooMany, "PTY session %s has %d clients already", id, MaxTerminalClients)
	}
	term.clients[cl] = struct{}{}
	return cl, nil
}

// ClientState says how a client's output stands after a Next.
type ClientState int

// States of a TerminalClient.
const (
	Open    ClientState = iota // more output may come
	Exited                     // the shell ended: see Exit
	Slow                       // dropped for falling behind
	Dropped                    // closed (by Close, or its input failed)
)

// TerminalClient is one client attached to a terminal, with its queued
// output, bounded.
type TerminalClient struct {
	term   *terminal
	budget *atomic.Int64 // the daemon's queued bytes

	mu     sync.Mutex
	queue  [][]byte
	queued int
	closed bool // no more output: the shell ended, or the client was dropped
	slow   bool
	wake   chan struct{} // signalled when queue or closed changes
}

// Next waits for output and returns what is queued, with the client's
// state; a state other than Open comes once, with the last output.
func (cl *TerminalClient) Next(ctx context.Context) ([][]byte, ClientState, error) {
	for {
		cl.mu.Lock()
		closed, slow := cl.closed, cl.slow
		batch := cl.takeLocked()
		cl.mu.Unlock()
		switch {
		case slow:
			return batch, Slow, nil
		case closed:
			select {
			case <-cl.term.done:
				return batch, Exited, nil
			default:
				return batch, Dropped, nil
			}
		case len(batch) > 0:
			return batch, Open, nil
		}
		select {
		case <-cl.wake:
		case <-ctx.Done():
			return nil, Dropped, ctx.Err()
		}
	}
}

// Exit is how the shell ended, once Next said Exited.
func (cl *TerminalClient) Exit() TerminalExit {
	cl.term.mu.Lock()
	defer cl.term.mu.Unlock()
	return cl.term.exit
}

// Input writes data to the terminal; a failure drops the client.
func (cl *TerminalClient) Input(ctx context.Context, data []byte) error {
	cl.term.mu.Lock()
	proc := cl.term.proc
	cl.term.mu.Unlock()
	if err := proc.SendInput(ctx, data); err != nil {
		cl.Close()
		return agentError(err)
	}
	return nil
}

// Close detaches the client.
func (cl *TerminalClient) Close() {
	cl.term.mu.Lock()
	delete(cl.term.clients, cl)
	cl.term.mu.Unlock()
	cl.mu.Lock()
	cl.closed = true
	cl.takeLocked()
	cl.signal()
	cl.mu.Unlock()
}

// push queues data for the client; false when the client is dropped (it
// fell maxClientQueue behind).
func (cl *TerminalClient) push(data []byte) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return false
	}
	cost := len(data) + chunkOverhead // a queued chunk costs its slot too
	if cl.queued+cost > maxClientQueue || cl.budget.Add(int64(cost)) > maxQueuedTotal {
		if cl.queued+cost <= maxClientQueue {
			cl.budget.Add(-int64(cost)) // charged above: undo
		}
		cl.closed, cl.slow = true, true
		cl.takeLocked()
		cl.signal()
		return false
	}
	cl.queue = append(cl.queue, data)
	cl.queued += cost
	cl.signal()
	return true
}

// takeLocked empties the queue, returning what it held to the daemon's
// budget; the caller holds cl.mu.
func (cl *TerminalClient) takeLocked() [][]byte {
	batch := cl.queue
	cl.budget.Add(-int64(cl.queued))
	cl.queue, cl.queued = nil, 0
	return batch
}

// finish marks the end of output.
func (cl *TerminalClient) finish() {
	cl.mu.Lock()
	cl.closed = true
	cl.signal()
	cl.mu.Unlock()
}

func (cl *TerminalClient) signal() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}
