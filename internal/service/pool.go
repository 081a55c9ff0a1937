package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/store"
)

// The warm pool keeps started, idle sandboxes per class, so that a create
// whose request matches a class is a claim (one store write and one agent
// call) instead of a container create and start. See docs/design.md,
// section "The warm pool".
//
// A pooled sandbox is an ordinary running row owned by store.PoolOwner:
// admission counts it against the host's budget (under PoolOwner, which
// has no quota), the reconciler repairs it like any other, lookups and
// listings never show it. The pool's memory (which idle sandboxes are
// ready) is rebuilt from those rows at start.

// PoolClass is what makes two sandboxes interchangeable before a claim:
// the image, the runtime, the CPU, the memory, the disk limit (so only
// creates of a pooled class's disk limit, the default unless a target
// says otherwise, are served from the pool) and whether it has network.
// Everything else (owner, name, tags, env, secrets, timeout, annotations)
// is applied at the claim.
type PoolClass struct {
	Image    string `json:"image"`
	Runtime  string `json:"runtime"`
	MilliCPU int64  `json:"milli_cpu"`
	MemoryMB int64  `json:"memory_mb"`
	DiskMB   int64  `json:"disk_mb"`
	Network  bool   `json:"network"`
}

func (c PoolClass) String() string {
	return fmt.Sprintf("%s/%s/%dm/%dMB/disk=%dMB/net=%v", c.Image, c.Runtime, c.MilliCPU, c.MemoryMB, c.DiskMB, c.Network)
}

// PoolTarget is how many idle sandboxes of a class the pool keeps.
type PoolTarget struct {
	PoolClass
	Size int `json:"size"`
}

// PoolStatus is a class's target and what the pool holds of it now.
type PoolStatus struct {
	PoolTarget
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	// IDs are the ready sandboxes, oldest first (the next claimed first).
	IDs []string `json:"ids"`
}

// Pool bounds.
const (
	// MaxPoolSize bounds one class's target, maxPoolClasses the classes.
	MaxPoolSize    = 64
	maxPoolClasses = 16
	// poolCheckEvery is how often idle sandboxes are health-checked.
	poolCheckEvery = 15 * time.Second
	// poolBackoffMax bounds the wait after a class's refill failed.
	poolBackoffMax = time.Minute
	// refillQuiet is how long refills wait after a claim. A claim's caller
	// usually execs right after it, and a refill is a container create
	// and start (hundreds of milliseconds of the engine's CPU): on a small
	// host, started at once it would double that first exec's latency.
	refillQuiet = 250 * time.Millisecond
)

// pooled is one idle sandbox: its id and the agent token it booted with.
type pooled struct {
	id          string
	token       string
	sealedToken []byte
}

// pool is the warm pool's state. Its mutex guards everything but the
// counters; nothing is held across I/O.
type pool struct {
	concurrency int

	mu      sync.Mutex
	targets map[PoolClass]int
	ready   map[PoolClass][]pooled
	filling map[PoolClass]int
	// claiming counts sandboxes take handed out whose claim has not ended:
	// they still count as the class's, so that a claim that gives its
	// sandbox back (a name conflict, a quota) never makes the refill add
	// one more.
	claiming map[PoolClass]int
	backoff  map[PoolClass]time.Time // no refill of the class before
	fails    map[PoolClass]int
	// quietUntil is when the last claim's refillQuiet ends (wall time, not
	// the service's clock: it paces work, it decides nothing).
	quietUntil time.Time

	// userCreates counts cold creates in flight: refill waits while any is.
	userCreates atomic.Int64
	wake        chan struct{}
}

func newPool(concurrency int) *pool {
	return &pool{
		concurrency: max(concurrency, 1),
		targets:     map[PoolClass]int{},
		ready:       map[PoolClass][]pooled{},
		filling:     map[PoolClass]int{},
		claiming:    map[PoolClass]int{},
		backoff:     map[PoolClass]time.Time{},
		fails:       map[PoolClass]int{},
		wake:        make(chan struct{}, 1),
	}
}

// coldCreate counts a cold create of a tenant in flight until the
// returned func is called; the refill waits while any is, and is poked
// when the last ends.
func (p *pool) coldCreate() (done func()) {
	p.userCreates.Add(1)
	return func() {
		if p.userCreates.Add(-1) == 0 {
			p.poke()
		}
	}
}

// poke wakes the refill loop.
func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take pops an idle sandbox of class c, if the pool has one.
func (p *pool) take(c PoolClass) (pooled, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.ready[c]
	if len(list) == 0 {
		return pooled{}, false
	}
	// Oldest first: every idle sandbox gets used before it grows stale.
	e := list[0]
	p.ready[c] = slices.Delete(list, 0, 1)
	p.claiming[c]++
	return e, true
}

// giveBack returns an untouched sandbox that take handed out.
//
// It reports false, keeping nothing, when the class no longer wants it
// (drained, or its target shrank while the claim ran): the caller then
// destroys the sandbox.
func (p *pool) giveBack(c PoolClass, e pooled) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claiming[c]--
	if p.supply(c) >= p.targets[c] {
		return false
	}
	p.ready[c] = append([]pooled{e}, p.ready[c]...)
	return true
}

// gone ends the claim of a sandbox take handed out that the pool no
// longer has (claimed, or found dead): the refill replaces it.
func (p *pool) gone(c PoolClass) {
	p.mu.Lock()
	p.claiming[c]--
	p.quietUntil = time.Now().Add(refillQuiet)
	p.mu.Unlock()
	p.poke()
}

// remove drops id from the ready lists; it reports whether it was there.
func (p *pool) remove(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, list := range p.ready {
		if i := slices.IndexFunc(list, func(e pooled) bool { return e.id == id }); i >= 0 {
			p.ready[c] = slices.Delete(list, i, i+1)
			p.poke()
			return true
		}
	}
	return false
}

// status lists every class with a target or idle sandboxes.
func (p *pool) status() []PoolStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	classes := map[PoolClass]bool{}
	for c := range p.targets {
		classes[c] = true
	}
	for c, l := range p.ready {
		if len(l) > 0 {
			classes[c] = true
		}
	}
	out := make([]PoolStatus, 0, len(classes))
	for c := range classes {
		ids := make([]string, len(p.ready[c]))
		for i, e := range p.ready[c] {
			ids[i] = e.id
		}
		out = append(out, PoolStatus{PoolTarget: PoolTarget{PoolClass: c, Size: p.targets[c]}, Ready: len(ids), Filling: p.filling[c], IDs: ids})
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return cmp.Compare(a.String(), b.String()) })
	return out
}

// next picks a class to refill now and counts its refill as started, or
// reports when to look again (zero: when poked). Within refillQuiet of
// the last claim, only a class with no idle sandbox left is refilled.
func (p *pool) next(now time.Time) (PoolClass, bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	inFlight := 0
	for _, n := range p.filling {
		inFlight += n
	}
	if inFlight >= p.concurrency {
		return PoolClass{}, false, 0
	}
	quiet := time.Until(p.quietUntil)
	var wait time.Duration
	classes := slices.SortedFunc(maps.Keys(p.targets), func(a, b PoolClass) int { return cmp.Compare(a.String(), b.String()) })
	// The emptiest class first, so one class's refill never starves another.
	slices.SortStableFunc(classes, func(a, b PoolClass) int {
		return cmp.Compare(p.supply(a)-p.targets[a], p.supply(b)-p.targets[b])
	})
	for _, c := range classes {
		if p.supply(c) >= p.targets[c] {
			continue
		}
		if until := p.backoff[c]; now.Before(until) {
			if d := until.Sub(now); wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		if quiet > 0 && len(p.ready[c]) > 0 {
			// The last claim's first commands go first, unless the
			// class ran dry (a steady stream of claims would otherwise
			// keep pushing its refill back until it did).
			if wait == 0 || quiet < wait {
				wait = quiet
			}
			continue
		}
		p.filling[c]++
		return c, true, 0
	}
	return PoolClass{}, false, wait
}

// supply is what class c has or will have: idle, being made, being claimed.
func (p *pool) supply(c PoolClass) int { return len(p.ready[c]) + p.filling[c] + p.claiming[c] }

// filled ends a refill of c: e joins the ready list (when the refill
// succeeded and the class still wants it) or the class backs off.
func (p *pool) filled(c PoolClass, e pooled, err error, now time.Time) (keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filling[c]--
	if err != nil {
		p.fails[c]++
		d := min(time.Second<<min(p.fails[c]-1, 6), poolBackoffMax)
		p.backoff[c] = now.Add(d)
		return false
	}
	p.fails[c] = 0
	delete(p.backoff, c)
	if len(p.ready[c]) >= p.targets[c] {
		return false // the target shrank meanwhile
	}
	p.ready[c] = append(p.ready[c], e)
	return true
}

// surplus takes out the idle sandboxes beyond each class's target.
func (p *pool) surplus() []pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pooled
	for c, list := range p.ready {
		if n := p.targets[c]; len(list) > n {
			out = append(out, list[n:]...)
			p.ready[c] = list[:n:n]
		}
	}
	return out
}

// idle is a snapshot of every ready sandbox.
func (p *pool) idle() []pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pooled
	for _, list := range p.ready {
		out = append(out, list...)
	}
	return out
}

// drain takes out every ready sandbox and clears the targets, in one
// locked step (a claim racing it gets either its sandbox or none).
func (p *pool) drain() []pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pooled
	for _, list := range p.ready {
		out = append(out, list...)
	}
	clear(p.ready)
	clear(p.targets)
	return out
}

// poolClass is the class a create request falls in; only a request
// without mounts, by a tenant, falls in one.
func poolClass(req CreateRequest) PoolClass {
	return PoolClass{Image: req.Image, Runtime: req.Runtime, MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Network: req.Network}
}

// normalizeTargets validates targets, filling each class's defaults the
// way a create request's are filled, and merges duplicates.
func (s *Service) normalizeTargets(targets []PoolTarget) (map[PoolClass]int, error) {
	out := map[PoolClass]int{}
	for i, t := range targets {
		field := fmt.Sprintf("pools[%d]", i)
		if t.Size < 0 || t.Size > MaxPoolSize {
			return nil, invalid(field+".size", "must be between 0 and %d", MaxPoolSize)
		}
		req, err := s.normalize(CreateRequest{Owner: store.PoolOwner, Image: t.Image, Runtime: t.Runtime, MilliCPU: t.MilliCPU, MemoryMB: t.MemoryMB, DiskMB: t.DiskMB, Network: t.Network})
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = field + "." + fe.Field
			}
			return nil, err
		}
		out[poolClass(req)] += t.Size
		if out[poolClass(req)] > MaxPoolSize {
			return nil, invalid(field+".size", "the class's sizes add up to more than %d", MaxPoolSize)
		}
	}
	if len(out) > maxPoolClasses {
		return nil, invalid("pools", "at most %d classes", maxPoolClasses)
	}
	return out, nil
}

// SetPool replaces the pool's targets: classes it no longer names, and
// idle sandboxes beyond a smaller target, are destroyed; the refill adds
// what is missing in the background. It returns the pool's state.
func (s *Service) SetPool(ctx context.Context, targets []PoolTarget) ([]PoolStatus, error) {
	want, err := s.normalizeTargets(targets)
	if err != nil {
		return nil, err
	}
	s.pool.mu.Lock()
	clear(s.pool.targets)
	for c, n := range want {
		if n > 0 {
			s.pool.targets[c] = n
		}
	}
	s.pool.mu.Unlock()
	for _, e := range s.pool.surplus() {
		s.destroyPooled(ctx, e.id, "the pool's target shrank")
	}
	s.pool.poke()
	s.observePool()
	return s.pool.status(), nil
}

// PoolStatus reports every class the pool keeps.
func (s *Service) PoolStatus() []PoolStatus { return s.pool.status() }

// PeerPools reports the pools of the cluster's other nodes (each node
// keeps its own); nil on a single node.
func (s *Service) PeerPools(ctx context.Context) []NodePools {
	if s.Peers == nil {
		return nil
	}
	return s.Peers.PeerPools(ctx)
}

// runPool refills the pool, health-checks its idle sandboxes and replaces
// the ones that failed, until ctx ends. It first adopts the idle sandboxes
// a previous process left (their rows), destroying those it cannot use.
func (s *Service) runPool(ctx context.Context) {
	s.adoptPooled(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	check := time.NewTicker(poolCheckEvery)
	defer check.Stop()
	for {
		// Refill yields to tenants: nothing starts while a cold create is
		// in flight (it is poked when the last one ends). A refill holds
		// capacity that no eviction can free until it is done, so running
		// one beside cold creates could turn a tenant's create into a 429;
		// under a steady stream of cold creates the pool waits instead,
		// which costs only latency (those creates would miss it anyway).
		var wait time.Duration
		for s.pool.userCreates.Load() == 0 {
			c, ok, w := s.pool.next(s.Clock())
			if !ok {
				wait = w
				break
			}
			wg.Go(func() { s.refill(ctx, c) })
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = time.After(wait) // at most poolBackoffMax
		}
		select {
		case <-ctx.Done():
			return
		case <-s.pool.wake:
		case <-timer:
		case <-check.C:
			s.checkPooled(ctx)
		}
	}
}

// refill makes one idle sandbox of class c through the create chain.
func (s *Service) refill(ctx context.Context, c PoolClass) {
	defer s.pool.poke()
	// A refill is never cut short: an engine create abandoned mid-way can
	// finish after its undo and leave a container behind. The daemon's stop
	// waits for it (bounded), then drains the pool.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	start := time.Now()
	created, err := s.create(ctx, CreateRequest{
		Owner: store.PoolOwner, Image: c.Image, Runtime: c.Runtime,
		MilliCPU: c.MilliCPU, MemoryMB: c.MemoryMB, DiskMB: c.DiskMB, Network: c.Network,
	}, "", nil)
	var e pooled
	if err == nil {
		var row store.Sandbox
		row, err = s.Store.GetSandbox(ctx, created.ID)
		if err == nil {
			e = pooled{id: created.ID, sealedToken: row.AgentTokenSealed}
			e.token, err = s.openToken(row)
		}
		if err != nil {
			s.destroyPooled(ctx, created.ID, "its row could not be read")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Warn("pool: refill failed", "class", c.String(), "err", err)
		}
		s.pool.filled(c, pooled{}, err, s.Clock())
		return
	}
	s.Metrics.poolRefilled(time.Since(start))
	s.warmUp(ctx, e)
	if !s.pool.filled(c, e, nil, s.Clock()) {
		s.destroyPooled(ctx, e.id, "the pool's target shrank")
	}
	s.observePool()
}

// warmUpTimeout bounds warmUp.
const warmUpTimeout = 5 * time.Second

// warmUp runs `true` once in a new idle sandbox, so that its owner's first
// command is not the first the agent starts: that one pays for what the
// agent and the container have not touched yet (about 2 ms here). The
// process is gone when the call returns (the agent keeps no record of an
// ended process), and an image without `true` just goes without. A dead
// agent is the health check's business, not this.
func (s *Service) warmUp(ctx context.Context, e pooled) {
	wctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	if _, err := s.cacheClient(e.id, e.token).Exec(wctx, agent.ExecRequest{Cmd: []string{"true"}}); err != nil {
		s.Logger.Debug("pool: warm-up exec", "sandbox", e.id, "err", err)
	}
}

// openToken opens a row's agent token.
func (s *Service) openToken(row store.Sandbox) (string, error) {
	tok, err := s.Keyring.Open(row.AgentTokenSealed, agentTokenAD(row.ID))
	if err != nil {
		return "", fmt.Errorf("open agent token of %s: %w", row.ID, err)
	}
	return string(tok), nil
}

// adoptPooled rebuilds the ready lists from the pool's rows: a running
// row of a wanted class whose agent answers is ready again; every other
// row of the pool is destroyed.
func (s *Service) adoptPooled(ctx context.Context) {
	var rows []store.Sandbox
	for token := ""; ; {
		page, next, err := s.Store.ListSandboxes(ctx, store.ListFilter{Owner: store.PoolOwner, Limit: store.MaxListLimit, PageToken: token})
		if err != nil {
			if ctx.Err() == nil {
				s.Logger.Error("pool: list the idle sandboxes of the last run", "err", err)
			}
			return
		}
		rows = append(rows, page...)
		if token = next; token == "" {
			break
		}
	}
	for _, row := range rows {
		if reason := s.adoptable(ctx, row); reason != "" {
			s.destroyPooled(ctx, row.ID, reason)
		}
	}
	s.observePool()
	s.pool.poke()
}

// adoptable puts a pool row from an earlier run in its class's ready list,
// or says why it cannot.
func (s *Service) adoptable(ctx context.Context, row store.Sandbox) string {
	if row.State != store.StateRunning {
		return "it is " + string(row.State)
	}
	var spec sandboxSpec
	_ = json.Unmarshal(row.Spec, &spec) // written by us; a bad row is of no wanted class
	c := PoolClass{Image: row.Image, Runtime: cmp.Or(spec.Runtime, RuntimeDocker), MilliCPU: row.CPUMillis, MemoryMB: row.MemoryMB, DiskMB: spec.DiskMB, Network: spec.Network}
	tok, err := s.openToken(row)
	if err != nil {
		return err.Error()
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.cacheClient(row.ID, tok).Check(hctx); err != nil {
		return "its agent does not answer with its token: " + err.Error()
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	if len(s.pool.ready[c]) >= s.pool.targets[c] {
		return "the pool has no room for its class"
	}
	s.pool.ready[c] = append(s.pool.ready[c], pooled{id: row.ID, token: tok, sealedToken: row.AgentTokenSealed})
	return ""
}

// checkPooled health-checks every idle sandbox with an authenticated call
// and replaces those that fail, then destroys what exceeds the targets.
func (s *Service) checkPooled(ctx context.Context) {
	for _, e := range s.pool.idle() {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.cacheClient(e.id, e.token).Check(hctx)
		cancel()
		if err != nil && ctx.Err() == nil && s.pool.remove(e.id) {
			s.destroyPooled(ctx, e.id, "it failed its health check: "+err.Error())
		}
	}
	for _, e := range s.pool.surplus() {
		s.destroyPooled(ctx, e.id, "the pool's target shrank")
	}
	s.observePool()
}

// evictIdle destroys one idle sandbox, the largest, to make room for a
// tenant's create; false when the pool holds none.
func (s *Service) evictIdle(ctx context.Context) bool {
	s.pool.mu.Lock()
	var (
		victim pooled
		from   PoolClass
		found  bool
	)
	for c, list := range s.pool.ready {
		if len(list) > 0 && (!found || c.MemoryMB > from.MemoryMB || (c.MemoryMB == from.MemoryMB && c.MilliCPU > from.MilliCPU)) {
			victim, from, found = list[len(list)-1], c, true
		}
	}
	if found {
		l := s.pool.ready[from]
		s.pool.ready[from] = l[:len(l)-1]
	}
	s.pool.mu.Unlock()
	if !found {
		return false
	}
	s.destroyPooled(ctx, victim.id, "a tenant's create needs its capacity")
	s.Metrics.poolEvicted()
	return true
}

// DrainPool destroys every idle sandbox and stops refilling (a daemon
// that stops leaves no idle sandboxes; one that is killed leaves them for
// the next start to adopt).
func (s *Service) DrainPool(ctx context.Context) {
	ids := s.pool.drain()
	var wg sync.WaitGroup
	for _, e := range ids {
		wg.Go(func() { s.destroyPooled(ctx, e.id, "the daemon stops") })
	}
	wg.Wait()
}

// destroyPooled destroys an idle sandbox the pool no longer keeps.
func (s *Service) destroyPooled(ctx context.Context, id, why string) {
	s.Logger.Info("pool: destroying an idle sandbox", "sandbox", id, "why", why)
	s.destroyDetached(ctx, id, why)
}

func (s *Service) observePool() {
	for _, st := range s.pool.status() {
		s.Metrics.poolReady(st.PoolClass, st.Ready)
	}
}
