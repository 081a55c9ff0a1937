package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Limits on what the part holds or asks the agent for.
const (
	// MaxShellsPerSandbox bounds a sandbox's shell sessions, those found
	// on its agent after a restart included.
	MaxShellsPerSandbox = 64
	// maxListed bounds the processes of one agent List the part looks at.
	maxListed = 4096
	// agentCallTimeout bounds one list, start or attach on the agent.
	agentCallTimeout = 30 * time.Second
)

// Agents resolves a sandbox to its agent. The caller of every Manager
// method has already checked that its caller owns the sandbox;
// *service.Service is one.
type Agents interface {
	Agent(ctx context.Context, sandboxID string) (*agent.Client, error)
}

// Events delivers the lifecycle events of this node's sandboxes;
// *service.Service is one.
type Events interface {
	SubscribeAll() *service.Subscription
}

// Options configures New. Agents is required.
type Options struct {
	Agents Agents
	// Events, when set, makes the part forget a sandbox's sessions when it
	// stops for any reason (stop, pause, delete, crash, auto-stop).
	Events Events
	// Limits bound the output shell commands keep in the daemon; zero
	// fields are DefaultLogLimits'.
	Limits LogLimits
	Logger *slog.Logger
}

// Target names the sandbox a call acts on and its user, which the
// sessions it starts run as (in Cwd, the user's home when empty).
type Target struct {
	SandboxID string
	User      string
	Cwd       string
}

// Kind says what an *Error is about.
type Kind int

// Kinds of *Error.
const (
	NotFound Kind = iota + 1 // no such session or command
	Exists                   // a session id in use
	TooMany                  // past MaxShellsPerSandbox
	Ended                    // the session's shell or the command has ended
	Invalid                  // bad input
)

// Error is a refusal of the part; it matches the service's sentinels
// (errors.Is), so any edge maps it, and an edge that speaks a wire with
// its own statuses switches on Kind.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap is the service sentinel of e's kind.
func (e *Error) Unwrap() error {
	switch e.Kind {
	case NotFound:
		return service.ErrNotFound
	case Exists, Ended:
		return service.ErrConflict
	case TooMany:
		return service.ErrQuotaExceeded
	}
	return service.ErrInvalidArgument
}

func errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Manager is the sessions part. Its state lives in the agents: a session
// is an agent process carrying a tag that names it, which keeps its
// recent output; what the Manager holds is a cache, rebuilt from the
// agent's list and replay when a sandbox is first used after a start of
// the daemon. Close it when the daemon stops: it ends the streams, never
// the sessions.
type Manager struct {
	agents Agents
	log    *slog.Logger
	logs   *logBudget

	ctx    context.Context // the streams' lifetime
	cancel context.CancelFunc
	done   chan struct{} // closed when the lifecycle listener returned

	// queued counts the terminal output queued for clients.
	queued atomic.Int64

	mu    sync.Mutex
	boxes map[string]*box // sandbox id → its sessions
}

// box is the cache of one sandbox's sessions.
type box struct {
	id string
	// loadMu is held while the sandbox's agent is listed and attached to.
	loadMu sync.Mutex

	mu       sync.Mutex
	loaded   bool                      // the agent's sessions are attached
	dropped  bool                      // the sandbox stopped: nothing more is cached here
	shells   map[string]*shell         // nil value: reserved by a create
	terms    map[string]*terminal      // terminals (PTYs)
	contexts map[string]*interpContext // interpreter contexts
	starting int                       // contexts being started, counted against the limit
}

// New returns the part and starts listening to Events. It does no I/O.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		agents: opts.Agents, log: opts.Logger, logs: newLogBudget(opts.Limits),
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		boxes: map[string]*box{},
	}
	if opts.Events == nil {
		close(m.done)
	} else {
		go m.listen(opts.Events)
	}
	return m
}

// Close ends every stream to the agents and forgets the caches. The
// sessions run on in their sandboxes, for the next daemon to reattach.
func (m *Manager) Close() error {
	m.cancel()
	<-m.done
	m.mu.Lock()
	boxes := m.boxes
	m.boxes = map[string]*box{}
	m.mu.Unlock()
	for _, b := range boxes {
		b.drop()
	}
	return nil
}

// listen forgets a sandbox's sessions when it leaves the running state.
// A subscription dropped for falling behind lost events: everything is
// forgotten then (the caches are rebuilt from the agents on next use).
func (m *Manager) listen(ev Events) {
	defer close(m.done)
	for m.ctx.Err() == nil {
		sub := ev.SubscribeAll()
		stop := context.AfterFunc(m.ctx, sub.Close)
		for e := range sub.Events() {
			if e.Gone || e.Sandbox.State != service.StateRunning {
				m.Drop(e.Sandbox.ID)
			}
		}
		stop()
		sub.Close()
		if m.ctx.Err() == nil {
			m.log.Warn("sessions: lifecycle events lost; forgetting every cached session")
			m.dropAll()
		}
	}
}

// Drop forgets the sessions of a sandbox that stopped: their streams end
// and their output is no longer kept here. The processes died with the
// sandbox (or, when it still runs, are found again on next use).
func (m *Manager) Drop(sandboxID string) {
	m.mu.Lock()
	b := m.boxes[sandboxID]
	delete(m.boxes, sandboxID)
	m.mu.Unlock()
	if b != nil {
		b.drop()
	}
}

func (m *Manager) dropAll() {
	m.mu.Lock()
	boxes := m.boxes
	m.boxes = map[string]*box{}
	m.mu.Unlock()
	for _, b := range boxes {
		b.drop()
	}
}

func (b *box) drop() {
	b.mu.Lock()
	b.dropped = true
	shells, terms, contexts := b.shells, b.terms, b.contexts
	b.shells, b.terms, b.contexts = nil, nil, nil
	b.mu.Unlock()
	for _, ic := range contexts {
		ic.detach()
	}
	for _, s := range shells {
		if s != nil {
			s.detach()
		}
	}
	for _, term := range terms {
		term.detachStream()
	}
}

// open returns the sandbox's cache, attached to the sessions its agent
// runs, and its agent.
func (m *Manager) open(ctx context.Context, t Target) (*box, *agent.Client, error) {
	ac, err := m.agents.Agent(ctx, t.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	for {
		m.mu.Lock()
		b := m.boxes[t.SandboxID]
		if b == nil {
			b = &box{id: t.SandboxID, shells: map[string]*shell{}, terms: map[string]*terminal{}, contexts: map[string]*interpContext{}}
			m.boxes[t.SandboxID] = b
		}
		m.mu.Unlock()
		if err := m.load(ctx, b, ac, t); err != nil {
			return nil, nil, err
		}
		b.mu.Lock()
		dropped := b.dropped
		b.mu.Unlock()
		if !dropped {
			return b, ac, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		// dropped while loading (a stop, or lost events): start over,
		// which fails once the sandbox is not running.
	}
}

// load attaches to the sessions the agent runs that the cache lacks: once
// per sandbox after the daemon starts, and again after a stream broke.
func (m *Manager) load(ctx context.Context, b *box, ac *agent.Client, t Target) error {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
	b.mu.Lock()
	done := b.loaded || b.dropped
	b.mu.Unlock()
	if done {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	procs, err := ac.ListProcesses(lctx)
	if err != nil {
		return agentError(err)
	}
	if len(procs) > maxListed {
		procs = procs[:maxListed]
	}
	var reattached []*shell
	for _, p := range procs {
		s, err := m.attachShell(lctx, b, ac, t, p)
		if err != nil {
			return err
		}
		if s != nil {
			reattached = append(reattached, s)
		}
		if err := m.attachTerminal(lctx, b, ac, t, p); err != nil {
			return err
		}
		if err := m.attachContext(lctx, b, ac, t, p); err != nil {
			return err
		}
	}
	// Answer from whole views: each shell's replay read (all within one
	// replayWait).
	sctx, cancelSettle := context.WithTimeout(lctx, replayWait)
	defer cancelSettle()
	for _, s := range reattached {
		s.waitSettled(sctx)
	}
	b.mu.Lock()
	b.loaded = true
	b.mu.Unlock()
	return nil
}

// attachShell reattaches to p when it is a shell session the cache lacks,
// with a replay of its kept output, from which its commands are rebuilt.
func (m *Manager) attachShell(ctx context.Context, b *box, ac *agent.Client, t Target, p agent.ProcessInfo) (*shell, error) {
	id, token, ok := parseShellTag(p.Tag)
	if !ok || p.PID == 0 {
		return nil, nil
	}
	b.mu.Lock()
	_, have := b.shells[id]
	if have || b.dropped || len(b.shells) >= MaxShellsPerSandbox {
		b.mu.Unlock()
		return nil, nil
	}
	b.shells[id] = nil // reserved
	b.mu.Unlock()
	proc, cancel, err := m.stream(ctx, func(sctx context.Context) (*agent.Process, error) {
		return ac.ConnectProcess(sctx, agent.Attach{PID: p.PID, User: t.User, Replay: true})
	})
	if err != nil {
		b.unreserve(id)
		if isNotFound(err) {
			return nil, nil // it ended meanwhile
		}
		return nil, agentError(err)
	}
	s := m.newShell(b, id, token, proc, cancel)
	if !b.store(id, s) {
		s.detach()
		return nil, nil
	}
	go s.read()
	return s, nil
}

// stream opens a stream that lives as long as the Manager (or until
// cancel), not ctx: only its opening is bounded, by ctx.
func (m *Manager) stream(ctx context.Context, open func(context.Context) (*agent.Process, error)) (*agent.Process, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(m.ctx)
	stopAfter := context.AfterFunc(ctx, cancel)
	p, err := open(sctx)
	if !stopAfter() {
		err = errors.Join(err, fmt.Errorf("%w: the agent did not answer in time", service.ErrUnavailable), ctx.Err())
	}
	if err != nil {
		if p != nil {
			_ = p.Close()
		}
		cancel()
		return nil, nil, err
	}
	return p, cancel, nil
}

// unreserve frees a reservation that did not become a session.
func (b *box) unreserve(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.shells[id]; ok && s == nil {
		delete(b.shells, id)
	}
}

// store puts s in the place reserved for it; false when the reservation
// is gone (the sandbox stopped meanwhile).
func (b *box) store(id string, s *shell) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.shells[id]; !ok || r != nil || b.dropped {
		return false
	}
	b.shells[id] = s
	return true
}

// forget removes s from the cache after its stream broke, so that the
// next use lists the agent again and reattaches.
func (b *box) forget(s *shell) {
	b.mu.Lock()
	if b.shells[s.id] == s {
		delete(b.shells, s.id)
		b.loaded = false
	}
	b.mu.Unlock()
}

// heaviestShell is the shell of sandboxID that keeps the most output.
func (m *Manager) heaviestShell(sandboxID string) *shell {
	m.mu.Lock()
	b := m.boxes[sandboxID]
	m.mu.Unlock()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var heaviest *shell
	for _, s := range b.shells {
		if s != nil && (heaviest == nil || s.kept.Load() > heaviest.kept.Load()) {
			heaviest = s
		}
	}
	return heaviest
}

// shells returns the cached shells of b, sorted by id.
func (b *box) list() []*shell {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*shell, 0, len(b.shells))
	for _, s := range b.shells {
		if s != nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func isNotFound(err error) bool { return connect.CodeOf(err) == connect.CodeNotFound }

// agentError maps an error of an agent call onto the service's sentinels;
// a stream or connection that failed is unavailable.
func agentError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) || errors.Is(err, context.Canceled) {
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %w", service.ErrNotFound, err)
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return fmt.Errorf("%w: %w", service.ErrInvalidArgument, err)
	case connect.CodeAlreadyExists:
		return fmt.Errorf("%w: %w", service.ErrConflict, err)
	}
	if errors.Is(err, service.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: sandbox agent: %w", service.ErrUnavailable, err)
}
