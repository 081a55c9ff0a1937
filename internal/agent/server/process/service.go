package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/logbook"
	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
)

// Defaults of [Options].
const (
	// DefaultOutputGrace: how long output is still read after a process
	// exited, for descendants that inherited its pipes.
	DefaultOutputGrace = 2 * time.Second
	// DefaultKeepalive is the keepalive interval of streams whose request
	// names none (envd's default).
	DefaultKeepalive = 90 * time.Second
	// MaxKeepOutput caps the output one process keeps for replay.
	MaxKeepOutput = 4 << 20
	// EndedKeep is how long a process that kept its output stays known to
	// Connect after it ended, so that a client that reattaches late still
	// reads its last output and its end; at most MaxEnded such processes
	// are kept, the oldest ended dropped first.
	EndedKeep = 10 * time.Minute
	MaxEnded  = 32
)

// Options configure a [Service]. The zero value is usable.
type Options struct {
	// Users resolves the user a request acts as; default /etc/passwd.
	Users *account.Directory
	// Waiter starts children and reports their exit: a *reaper.Reaper when
	// the agent is PID 1, reaper.Own{} (the default) otherwise.
	Waiter interface {
		Start(start func() (int, error)) (<-chan reaper.Exit, error)
	}
	// Env is added to every process's environment, before what SetEnv
	// sets and the request's.
	Env map[string]string
	// OutputGrace: see DefaultOutputGrace.
	OutputGrace time.Duration
	// Keepalive: see DefaultKeepalive.
	Keepalive time.Duration
	// Log receives unexpected failures; default discards.
	Log *slog.Logger
	// AtExec, when set, is called with the pid of every child started,
	// while the child is stopped at the exec of its program, before its
	// first instruction (hold.go), so that what it sets holds for all the
	// child's descendants; toolboxd sets the child's oom_score_adj. It
	// must be quick. A program that is setuid, setgid or has file
	// capabilities is not held (tracing would cancel its privilege):
	// AtExec then runs right after the start.
	AtExec func(pid int)
	// Logbook gets the output of every process the service starts (but
	// those started with X-Sandboxd-Log: off); default a new one, see
	// [Service.Logbook].
	Logbook *logbook.Book
}

// Service is the process.Process Connect service. Create it with [New];
// it is safe for concurrent use.
type Service struct {
	users     *account.Directory
	waiter    waiter
	env       map[string]string
	grace     time.Duration
	keepalive time.Duration
	log       *slog.Logger
	atExec    func(pid int)
	book      *logbook.Book

	now func() time.Time

	mu     sync.Mutex
	late   map[string]string // SetEnv's; replaced whole, never mutated
	procs  map[uint32]*proc
	ended  []endedProc // processes that kept output and ended, oldest first
	seq    uint64
	closed bool
}

// endedProc is a process that kept its output, after its end.
type endedProc struct {
	p  *proc
	at time.Time
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// New returns a Service with no processes.
func New(o Options) *Service {
	s := &Service{
		users: o.Users, waiter: o.Waiter, env: o.Env, grace: o.OutputGrace,
		keepalive: o.Keepalive, log: o.Log, atExec: o.AtExec, procs: make(map[uint32]*proc),
		book: o.Logbook, now: time.Now,
	}
	if s.book == nil {
		s.book = logbook.New(nil)
	}
	if s.users == nil {
		s.users = account.NewDirectory(account.DefaultPasswd)
	}
	if s.waiter == nil {
		s.waiter = reaper.Own{}
	}
	if s.grace <= 0 {
		s.grace = DefaultOutputGrace
	}
	if s.keepalive <= 0 {
		s.keepalive = DefaultKeepalive
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// SetEnv replaces the variables every process started from now on gets
// after the service's Env and before the request's: the daemon hands the
// sandbox's secret env over this way once the agent runs, so that it never
// sits in the engine's configuration of the container. Processes already
// running keep the environment they started with.
func (s *Service) SetEnv(env map[string]string) {
	env = maps.Clone(env)
	s.mu.Lock()
	s.late = env
	s.mu.Unlock()
}

// defaults is what a process gets before its request's variables.
func (s *Service) defaults() map[string]string {
	s.mu.Lock()
	late := s.late
	s.mu.Unlock()
	if len(late) == 0 {
		return s.env
	}
	merged := maps.Clone(s.env)
	if merged == nil {
		merged = make(map[string]string, len(late))
	}
	maps.Copy(merged, late)
	return merged
}

// Logbook is the sandbox's log the service writes its processes' output
// to.
func (s *Service) Logbook() *logbook.Book { return s.book }

// Handle registers the service's Connect handlers on mux.
func (s *Service) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	mux.Handle(processconnect.NewProcessHandler(s, opts...))
}

// Shutdown stops every process: SIGTERM to each process group, then, for
// those still running when ctx ends, SIGKILL. It returns once every process
// has ended (or ctx ended twice over: after the SIGKILL it waits at most
// one more output grace). New Starts fail with ErrClosed from the moment
// it is called.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()

	for _, p := range procs {
		_ = p.signal(unix.SIGTERM)
	}
	if waitAll(ctx, procs) == nil {
		return nil
	}
	for _, p := range procs {
		_ = p.signal(unix.SIGKILL)
	}
	kctx, cancel := context.WithTimeout(context.Background(), 2*s.grace)
	defer cancel()
	if err := waitAll(kctx, procs); err != nil {
		return fmt.Errorf("processes still running after SIGKILL: %w", err)
	}
	return nil
}

func waitAll(ctx context.Context, procs []*proc) error {
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// launchProc starts l and tracks it until it ends (and, when it keeps keep
// bytes of output, for EndedKeep after). sub, subscribed before the
// process starts, sees all of its output.
func (s *Service) launchProc(l launch, lifetime time.Duration, keep int) (*proc, *sub, error) {
	h := newHub(keep)
	h.book = s.book
	sb := h.subscribe()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	s.mu.Unlock()
	p, exits, err := start(s.waiter, l, h, s.atExec)
	if err != nil {
		return nil, nil, err
	}
	p.limit(lifetime)
	s.mu.Lock()
	s.seq++
	p.seq = s.seq
	s.procs[p.pid] = p
	s.mu.Unlock()
	go func() {
		p.wait(exits, s.grace)
		s.mu.Lock()
		if s.procs[p.pid] == p {
			delete(s.procs, p.pid)
		}
		if keep > 0 {
			s.ended = append(s.ended, endedProc{p: p, at: s.now()})
			s.pruneEnded()
		}
		s.mu.Unlock()
	}()
	return p, sb, nil
}

// pruneEnded forgets ended processes past EndedKeep or MaxEnded. Called
// with mu held.
func (s *Service) pruneEnded() {
	cut := s.now().Add(-EndedKeep)
	drop := max(len(s.ended)-MaxEnded, 0)
	for drop < len(s.ended) && s.ended[drop].at.Before(cut) {
		drop++
	}
	if drop > 0 {
		s.ended = slices.Delete(s.ended, 0, drop)
	}
}

// lookupAny is lookup that, when withEnded is set and no running process
// matches, also finds a process that kept its output and ended recently
// (the one that ended last, for a tag).
func (s *Service) lookupAny(sel *rpc.ProcessSelector, withEnded bool) (*proc, error) {
	p, err := s.lookup(sel)
	if err == nil || !withEnded || !errors.Is(err, ErrNotFound) {
		return p, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneEnded()
	for i := len(s.ended) - 1; i >= 0; i-- {
		e := s.ended[i].p
		switch v := sel.GetSelector().(type) {
		case *rpc.ProcessSelector_Pid:
			if e.pid == v.Pid {
				return e, nil
			}
		case *rpc.ProcessSelector_Tag:
			if e.tag != nil && *e.tag == v.Tag {
				return e, nil
			}
		}
	}
	return nil, err
}

// lookup finds the process sel names. A tag names the earliest started
// process that carries it; every process is considered, not just the
// first one seen.
func (s *Service) lookup(sel *rpc.ProcessSelector) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *rpc.ProcessSelector_Pid:
		if p, ok := s.procs[v.Pid]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("%w: pid %d", ErrNotFound, v.Pid)
	case *rpc.ProcessSelector_Tag:
		var found *proc
		for _, p := range s.procs {
			if p.tag != nil && *p.tag == v.Tag && (found == nil || p.seq < found.seq) {
				found = p
			}
		}
		if found == nil {
			return nil, fmt.Errorf("%w: tag %q", ErrNotFound, v.Tag)
		}
		return found, nil
	default:
		return nil, fmt.Errorf("%w: process selector names neither pid nor tag", ErrInvalid)
	}
}

// headerInt reads a non-negative integer header; absent means zero.
func headerInt(h http.Header, key string) (int, error) {
	d, err := headerDuration(h, key, 1)
	return int(min(d, math.MaxInt32)), err
}

// headerDuration reads a non-negative integer header in the given unit;
// absent means zero.
func headerDuration(h http.Header, key string, unit time.Duration) (time.Duration, error) {
	v := h.Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: header %s: %q is not a non-negative integer", ErrInvalid, key, v)
	}
	return time.Duration(n) * unit, nil
}
