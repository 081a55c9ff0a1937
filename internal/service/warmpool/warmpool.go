// Package warmpool is the warm pool's state: the idle sandboxes ready per
// class, each class's target, and the refills and claims in flight; for a
// class whose size follows demand, its recent claims and misses and the
// rule that moves its target (Decide, a pure function, in adaptive.go). It
// holds memory only, under one mutex never held across I/O; the service
// does the I/O (poolclaim.go claims, pool.go refills, adopts, health-checks,
// evicts and gives up what Adapt releases) and asks this package what to do
// next. See docs/design.md, "The warm pool".
package warmpool

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Class is what makes two sandboxes interchangeable before a claim:
// the image, the runtime, the CPU, the memory, the disk limit (so only
// creates of a pooled class's disk limit, the default unless a target
// says otherwise, are served from the pool) and whether it has network.
// Everything else (owner, name, tags, env, secrets, timeout, annotations)
// is applied at the claim.
type Class struct {
	Image    string `json:"image"`
	Runtime  string `json:"runtime"`
	MilliCPU int64  `json:"milli_cpu"`
	MemoryMB int64  `json:"memory_mb"`
	DiskMB   int64  `json:"disk_mb"`
	Network  bool   `json:"network"`
}

func (c Class) String() string {
	return fmt.Sprintf("%s/%s/%dm/%dMB/disk=%dMB/net=%v", c.Image, c.Runtime, c.MilliCPU, c.MemoryMB, c.DiskMB, c.Network)
}

// Bounds of the pool.
const (
	// MaxSize bounds one class's target, MaxClasses the classes.
	MaxSize    = 64
	MaxClasses = 16
	// backoffMax bounds the wait after a class's refill failed.
	backoffMax = time.Minute
	// refillQuiet is how long refills wait after a claim. A claim's caller
	// usually execs right after it, and a refill is a container create
	// and start (hundreds of milliseconds of the engine's CPU): on a small
	// host, started at once it would double that first exec's latency.
	refillQuiet = 250 * time.Millisecond
)

// Idle is one idle sandbox: its id and the agent token it booted with
// (plain, and sealed as its row keeps it), and when it joined the ready
// list (the service's clock; set by Filled and Adopt).
type Idle struct {
	ID          string
	Token       string
	SealedToken []byte
	Since       time.Time
}

// Config is what the pool keeps of a class: Size idle sandboxes, or,
// when Max is above Size, a target that follows demand between the two
// over Window (see Adaptive and Decide).
type Config struct {
	Size, Max int
	Window    time.Duration
}

func (c Config) adaptive() Adaptive { return Adaptive{Min: c.Size, Max: c.Max, Window: c.Window} }

// Free is what the host's budget has free now, for the growth of
// adaptive classes.
type Free struct {
	MilliCPU, MemoryMB int64
}

// roomFor is how many sandboxes of c one growth may add within free: at
// most 1/growShare of it.
func roomFor(c Class, free Free) int {
	n := int64(MaxSize)
	if c.MilliCPU > 0 {
		n = min(n, max(free.MilliCPU, 0)/growShare/c.MilliCPU)
	}
	if c.MemoryMB > 0 {
		n = min(n, max(free.MemoryMB, 0)/growShare/c.MemoryMB)
	}
	return int(n)
}

// Pool is the warm pool's state: which idle sandboxes are ready, per
// class, what each class wants, and the refills in flight. Its mutex guards everything but the
// counters; nothing is held across I/O.
type Pool struct {
	concurrency int

	mu sync.Mutex
	// configs are the classes as configured; targets what each keeps now
	// (its Size, or an adaptive class's current target).
	configs map[Class]Config
	targets map[Class]int
	// claims and misses are an adaptive class's recent demand (Decide).
	claims, misses map[Class][]time.Time
	ready          map[Class][]Idle
	filling        map[Class]int
	// claiming counts sandboxes Take handed out whose claim has not ended:
	// they still count as the class's, so that a claim that gives its
	// sandbox back (a name conflict, a quota) never makes the refill add
	// one more.
	claiming map[Class]int
	backoff  map[Class]time.Time // no refill of the class before
	fails    map[Class]int
	// quietUntil is when the last claim's refillQuiet ends (wall time, not
	// the service's clock: it paces work, it decides nothing).
	quietUntil time.Time

	// userCreates counts cold creates in flight: refill waits while any is.
	userCreates atomic.Int64
	wake        chan struct{}
}

func New(concurrency int) *Pool {
	return &Pool{
		concurrency: max(concurrency, 1),
		configs:     map[Class]Config{},
		targets:     map[Class]int{},
		claims:      map[Class][]time.Time{},
		misses:      map[Class][]time.Time{},
		ready:       map[Class][]Idle{},
		filling:     map[Class]int{},
		claiming:    map[Class]int{},
		backoff:     map[Class]time.Time{},
		fails:       map[Class]int{},
		wake:        make(chan struct{}, 1),
	}
}

// ColdCreate counts a cold create of a tenant in flight until the
// returned func is called; the refill waits while any is, and is poked
// when the last ends.
func (p *Pool) ColdCreate() (done func()) {
	p.userCreates.Add(1)
	return func() {
		if p.userCreates.Add(-1) == 0 {
			p.Poke()
		}
	}
}

// SetTargets replaces every class's configuration (a class of size 0
// that does not follow demand is none); what is now beyond a target is
// Surplus. An adaptive class that was adaptive before keeps its current
// target, brought within its new bounds, and its recent demand: setting
// the same configuration again changes nothing.
func (p *Pool) SetTargets(configs map[Class]Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, oldConfigs := p.targets, p.configs
	p.targets, p.configs = map[Class]int{}, map[Class]Config{}
	for c, cfg := range configs {
		a := cfg.adaptive()
		if !a.On() {
			if cfg.Size > 0 {
				p.configs[c], p.targets[c] = Config{Size: cfg.Size}, cfg.Size
			}
			continue
		}
		p.configs[c] = cfg
		p.targets[c] = a.Min
		if oldConfigs[c].adaptive().On() {
			p.targets[c] = min(max(old[c], a.Min), a.Max)
		}
	}
	maps.DeleteFunc(p.claims, func(c Class, _ []time.Time) bool { return !p.configs[c].adaptive().On() })
	maps.DeleteFunc(p.misses, func(c Class, _ []time.Time) bool { return !p.configs[c].adaptive().On() })
}

// Busy reports whether a cold create counted by ColdCreate is in flight:
// the refill waits until none is.
func (p *Pool) Busy() bool { return p.userCreates.Load() != 0 }

// Wake is poked when the refill loop has something to look at.
func (p *Pool) Wake() <-chan struct{} { return p.wake }

// Adopt puts e, an idle sandbox of class c an earlier process left, in
// c's ready list, idle since now; false when c has no room for it.
func (p *Pool) Adopt(c Class, e Idle, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready[c]) >= p.targets[c] {
		return false
	}
	e.Since = now
	p.ready[c] = append(p.ready[c], e)
	return true
}

// EvictLargest takes out one idle sandbox, of the class with the most
// memory (then CPU), newest first; false when the pool holds none.
func (p *Pool) EvictLargest() (Idle, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var (
		victim Idle
		from   Class
		found  bool
	)
	for c, list := range p.ready {
		if len(list) > 0 && (!found || c.MemoryMB > from.MemoryMB || (c.MemoryMB == from.MemoryMB && c.MilliCPU > from.MilliCPU)) {
			victim, from, found = list[len(list)-1], c, true
		}
	}
	if found {
		l := p.ready[from]
		p.ready[from] = l[:len(l)-1]
	}
	return victim, found
}

// Poke wakes the refill loop.
func (p *Pool) Poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Take pops an idle sandbox of class c, if the pool has one; at now, a
// claim of an adaptive class counts in its demand.
func (p *Pool) Take(c Class, now time.Time) (Idle, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.ready[c]
	if len(list) == 0 {
		return Idle{}, false
	}
	// Oldest first: every idle sandbox gets used before it grows stale.
	e := list[0]
	p.ready[c] = slices.Delete(list, 0, 1)
	p.claiming[c]++
	if a := p.configs[c].adaptive(); a.On() {
		p.claims[c] = remember(p.claims[c], now, now.Add(-a.Window), a.Max)
	}
	return e, true
}

// Missed counts, at now, a create of class c that found no idle sandbox
// and was served cold, in the class's demand when the class follows
// demand (nothing otherwise: only configured classes ever grow), and
// pokes the refill loop, whose Adapt grows the target.
func (p *Pool) Missed(c Class, now time.Time) {
	p.mu.Lock()
	a := p.configs[c].adaptive()
	if a.On() {
		p.misses[c] = remember(p.misses[c], now, now.Add(-a.Window), a.Max)
	}
	p.mu.Unlock()
	if a.On() {
		p.Poke()
	}
}

// Adapt moves every adaptive class's target where Decide says, at now
// with free the host's free budget, and takes out the idle sandboxes it
// gives up (the caller destroys them). next is how long until an answer
// may change without a claim, a miss or a refill (zero: not until one).
func (p *Pool) Adapt(now time.Time, free Free) (release []Idle, next time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var soonest time.Time
	for c, cfg := range p.configs {
		a := cfg.adaptive()
		if !a.On() {
			continue
		}
		list := p.ready[c]
		since := make([]time.Time, len(list))
		for i, e := range list {
			since[i] = e.Since
		}
		d := Decide(a, Demand{
			Target: p.targets[c], Supply: p.supply(c),
			Claims: p.claims[c], Misses: p.misses[c], IdleSince: since,
			Room: roomFor(c, free),
		}, now)
		p.targets[c] = d.Target
		// The same ones Decide counted: idle for a window, oldest first.
		cutoff := now.Add(-a.Window)
		kept := list[:0:0]
		for _, e := range list {
			if d.Release > 0 && !e.Since.After(cutoff) {
				release = append(release, e)
				d.Release--
				continue
			}
			kept = append(kept, e)
		}
		p.ready[c] = kept
		if !d.Next.IsZero() && (soonest.IsZero() || d.Next.Before(soonest)) {
			soonest = d.Next
		}
	}
	if !soonest.IsZero() {
		next = max(soonest.Sub(now), time.Millisecond)
	}
	return release, next
}

// GiveBack returns an untouched sandbox that Take handed out.
//
// It reports false, keeping nothing, when the class no longer wants it
// (drained, or its target shrank while the claim ran): the caller then
// destroys the sandbox.
func (p *Pool) GiveBack(c Class, e Idle) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claiming[c]--
	if p.supply(c) >= p.targets[c] {
		return false
	}
	p.ready[c] = append([]Idle{e}, p.ready[c]...)
	return true
}

// Gone ends the claim of a sandbox Take handed out that the pool no
// longer has (claimed, or found dead): the refill replaces it.
func (p *Pool) Gone(c Class) {
	p.mu.Lock()
	p.claiming[c]--
	p.quietUntil = time.Now().Add(refillQuiet)
	p.mu.Unlock()
	p.Poke()
}

// Remove drops id from the ready lists; it reports whether it was there.
func (p *Pool) Remove(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, list := range p.ready {
		if i := slices.IndexFunc(list, func(e Idle) bool { return e.ID == id }); i >= 0 {
			p.ready[c] = slices.Delete(list, i, i+1)
			p.Poke()
			return true
		}
	}
	return false
}

// Status is a class's configuration, its target and what the pool holds
// of it now.
type Status struct {
	Class
	Config
	Target  int
	Ready   int
	Filling int
	// IDs are the ready sandboxes, oldest first (the next claimed first).
	IDs []string
}

// Status lists every class with a target or idle sandboxes, in the order
// of their String.
func (p *Pool) Status() []Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	classes := map[Class]bool{}
	for c := range p.configs {
		classes[c] = true
	}
	for c, l := range p.ready {
		if len(l) > 0 {
			classes[c] = true
		}
	}
	out := make([]Status, 0, len(classes))
	for c := range classes {
		ids := make([]string, len(p.ready[c]))
		for i, e := range p.ready[c] {
			ids[i] = e.ID
		}
		out = append(out, Status{Class: c, Config: p.configs[c], Target: p.targets[c], Ready: len(ids), Filling: p.filling[c], IDs: ids})
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.String(), b.String()) })
	return out
}

// Next picks a class to refill now and counts its refill as started, or
// reports when to look again (zero: when poked). Within refillQuiet of
// the last claim, only a class with no idle sandbox left is refilled.
func (p *Pool) Next(now time.Time) (Class, bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	inFlight := 0
	for _, n := range p.filling {
		inFlight += n
	}
	if inFlight >= p.concurrency {
		return Class{}, false, 0
	}
	quiet := time.Until(p.quietUntil)
	var wait time.Duration
	classes := slices.SortedFunc(maps.Keys(p.targets), func(a, b Class) int { return cmp.Compare(a.String(), b.String()) })
	// The emptiest class first, so one class's refill never starves another.
	slices.SortStableFunc(classes, func(a, b Class) int {
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
	return Class{}, false, wait
}

// supply is what class c has or will have: idle, being made, being claimed.
func (p *Pool) supply(c Class) int { return len(p.ready[c]) + p.filling[c] + p.claiming[c] }

// Filled ends a refill of c: e joins the ready list, idle since now
// (when the refill succeeded and the class still wants it), or the class
// backs off.
func (p *Pool) Filled(c Class, e Idle, err error, now time.Time) (keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filling[c]--
	if err != nil {
		p.fails[c]++
		d := min(time.Second<<min(p.fails[c]-1, 6), backoffMax)
		p.backoff[c] = now.Add(d)
		return false
	}
	p.fails[c] = 0
	delete(p.backoff, c)
	if len(p.ready[c]) >= p.targets[c] {
		return false // the target shrank meanwhile
	}
	e.Since = now
	p.ready[c] = append(p.ready[c], e)
	return true
}

// Surplus takes out the idle sandboxes beyond each class's target.
func (p *Pool) Surplus() []Idle {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Idle
	for c, list := range p.ready {
		if n := p.targets[c]; len(list) > n {
			out = append(out, list[n:]...)
			p.ready[c] = list[:n:n]
		}
	}
	return out
}

// Ready is a snapshot of every ready sandbox.
func (p *Pool) Ready() []Idle {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Idle
	for _, list := range p.ready {
		out = append(out, list...)
	}
	return out
}

// Drain takes out every ready sandbox and clears the targets, in one
// locked step (a claim racing it gets either its sandbox or none).
func (p *Pool) Drain() []Idle {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Idle
	for _, list := range p.ready {
		out = append(out, list...)
	}
	clear(p.ready)
	clear(p.targets)
	clear(p.configs)
	clear(p.claims)
	clear(p.misses)
	return out
}
