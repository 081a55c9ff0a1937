package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service/warmpool"
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
//
// The part is three pieces: warmpool (the pool's state in memory, no
// I/O), this file (targets, the refill loop, adoption at start, health
// checks, eviction: the I/O warmpool's answers call for) and poolclaim.go
// (a create served from the pool).

// PoolClass is what makes two sandboxes interchangeable before a claim
// (warmpool.Class).
type PoolClass = warmpool.Class

// MaxPoolSize bounds one class's target.
const MaxPoolSize = warmpool.MaxSize

// poolCheckEvery is how often idle sandboxes are health-checked.
const poolCheckEvery = 15 * time.Second

// pooled is one idle sandbox (warmpool.Idle).
type pooled = warmpool.Idle

// PoolTarget is how many idle sandboxes of a class the pool keeps: Size,
// or, when Max is above Size, a number that follows demand between the
// two (adaptive: it grows while creates of the class find the pool empty
// within Window, and gives up idle sandboxes that waited a whole Window;
// warmpool.Decide). Window defaults to warmpool.DefaultWindow.
type PoolTarget struct {
	PoolClass
	Size   int           `json:"size"`
	Max    int           `json:"max,omitempty"`
	Window time.Duration `json:"window,omitempty"`
}

// PoolStatus is a class's configuration, its target now (Size, or where
// an adaptive class's demand has moved it) and what the pool holds of it.
type PoolStatus struct {
	PoolTarget
	Target  int `json:"target"`
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	// IDs are the ready sandboxes, oldest first (the next claimed first).
	IDs []string `json:"ids"`
}

// poolClass is the class a create request falls in; only a request
// without mounts, by a tenant, falls in one.
func poolClass(req CreateRequest) PoolClass {
	return PoolClass{Image: req.Image, Runtime: req.Runtime, MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Network: req.Network}
}

// normalizeTargets validates targets, filling each class's defaults the
// way a create request's are filled, and merges duplicates of fixed
// classes (an adaptive class is named once).
func (s *Service) normalizeTargets(targets []PoolTarget) (map[PoolClass]warmpool.Config, error) {
	out := map[PoolClass]warmpool.Config{}
	for i, t := range targets {
		field := fmt.Sprintf("pools[%d]", i)
		if t.Size < 0 || t.Size > MaxPoolSize {
			return nil, invalid(field+".size", "must be between 0 and %d", MaxPoolSize)
		}
		adaptive := t.Max != 0
		switch {
		case adaptive && (t.Max <= t.Size || t.Max > MaxPoolSize):
			return nil, invalid(field+".max_size", "must be above size (%d) and at most %d, or 0 for a fixed size", t.Size, MaxPoolSize)
		case !adaptive && t.Window != 0:
			return nil, invalid(field+".window_s", "applies only to a pool whose size follows demand (set max_size)")
		case adaptive && t.Window == 0:
			t.Window = warmpool.DefaultWindow
		}
		if adaptive && (t.Window < warmpool.MinWindow || t.Window > warmpool.MaxWindow) {
			return nil, invalid(field+".window_s", "must be from %d to %d seconds", warmpool.MinWindow/time.Second, warmpool.MaxWindow/time.Second)
		}
		req, err := s.normalize(CreateRequest{Owner: store.PoolOwner, Image: t.Image, Runtime: t.Runtime, MilliCPU: t.MilliCPU, MemoryMB: t.MemoryMB, DiskMB: t.DiskMB, Network: t.Network})
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = field + "." + fe.Field
			}
			return nil, err
		}
		c := poolClass(req)
		prev, dup := out[c]
		if dup && (adaptive || prev.Max != 0) {
			return nil, invalid(field, "names a class an earlier entry names: a class whose size follows demand is named once")
		}
		if adaptive {
			out[c] = warmpool.Config{Size: t.Size, Max: t.Max, Window: t.Window}
			continue
		}
		prev.Size += t.Size
		if prev.Size > MaxPoolSize {
			return nil, invalid(field+".size", "the class's sizes add up to more than %d", MaxPoolSize)
		}
		out[c] = prev
	}
	if len(out) > warmpool.MaxClasses {
		return nil, invalid("pools", "at most %d classes", warmpool.MaxClasses)
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
	s.pool.SetTargets(want)
	for _, e := range s.pool.Surplus() {
		s.destroyPooled(ctx, e.ID, "the pool's target shrank")
	}
	s.pool.Poke()
	s.observePool()
	return s.PoolStatus(), nil
}

// PoolStatus reports every class the pool keeps.
func (s *Service) PoolStatus() []PoolStatus {
	st := s.pool.Status()
	out := make([]PoolStatus, len(st))
	for i, c := range st {
		t := PoolTarget{PoolClass: c.Class, Size: c.Size}
		if c.Max > c.Size {
			t.Max, t.Window = c.Max, c.Window
		}
		out[i] = PoolStatus{PoolTarget: t, Target: c.Target, Ready: c.Ready, Filling: c.Filling, IDs: c.IDs}
	}
	return out
}

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
		// Adaptive classes first: a target that grew is refilled below, and
		// idle sandboxes given up go on their own (a destroy takes the
		// engine's time, not the loop's).
		release, wait := s.pool.Adapt(s.Clock(), s.poolFree())
		for _, e := range release {
			wg.Go(func() { s.destroyPooled(ctx, e.ID, "it waited a whole window unclaimed, beyond the pool's minimum") })
		}
		if len(release) > 0 {
			s.observePool()
		}
		// Refill yields to tenants: nothing starts while a cold create is
		// in flight (it is poked when the last one ends). A refill holds
		// capacity that no eviction can free until it is done, so running
		// one beside cold creates could turn a tenant's create into a 429;
		// under a steady stream of cold creates the pool waits instead,
		// which costs only latency (those creates would miss it anyway).
		for !s.pool.Busy() {
			c, ok, w := s.pool.Next(s.Clock())
			if !ok {
				if w > 0 && (wait == 0 || w < wait) {
					wait = w
				}
				break
			}
			wg.Go(func() { s.refill(ctx, c) })
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = time.After(wait) // a backoff (at most a minute) or an adaptive class's window
		}
		select {
		case <-ctx.Done():
			return
		case <-s.pool.Wake():
		case <-timer:
		case <-check.C:
			s.checkPooled(ctx)
		}
	}
}

// refill makes one idle sandbox of class c through the create chain.
func (s *Service) refill(ctx context.Context, c PoolClass) {
	defer s.pool.Poke()
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
			e = pooled{ID: created.ID, SealedToken: row.AgentTokenSealed}
			e.Token, err = s.openToken(row)
		}
		if err != nil {
			s.destroyPooled(ctx, created.ID, "its row could not be read")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Warn("pool: refill failed", "class", c.String(), "err", err)
		}
		s.pool.Filled(c, pooled{}, err, s.Clock())
		return
	}
	s.Metrics.poolRefilled(time.Since(start))
	s.warmUp(ctx, e)
	if !s.pool.Filled(c, e, nil, s.Clock()) {
		s.destroyPooled(ctx, e.ID, "the pool's target shrank")
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
	if _, err := s.cacheClient(e.ID, e.Token).Exec(wctx, agent.ExecRequest{Cmd: []string{"true"}}); err != nil {
		s.Logger.Debug("pool: warm-up exec", "sandbox", e.ID, "err", err)
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
	s.pool.Poke()
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
	if !s.pool.Adopt(c, pooled{ID: row.ID, Token: tok, SealedToken: row.AgentTokenSealed}, s.Clock()) {
		return "the pool has no room for its class"
	}
	return ""
}

// checkPooled health-checks every idle sandbox with an authenticated call
// and replaces those that fail, then destroys what exceeds the targets.
func (s *Service) checkPooled(ctx context.Context) {
	for _, e := range s.pool.Ready() {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.cacheClient(e.ID, e.Token).Check(hctx)
		cancel()
		if err != nil && ctx.Err() == nil && s.pool.Remove(e.ID) {
			s.destroyPooled(ctx, e.ID, "it failed its health check: "+err.Error())
		}
	}
	for _, e := range s.pool.Surplus() {
		s.destroyPooled(ctx, e.ID, "the pool's target shrank")
	}
	s.observePool()
}

// evictIdle destroys one idle sandbox, the largest, to make room for a
// tenant's create; false when the pool holds none.
func (s *Service) evictIdle(ctx context.Context) bool {
	victim, found := s.pool.EvictLargest()
	if !found {
		return false
	}
	s.destroyPooled(ctx, victim.ID, "a tenant's create needs its capacity")
	s.Metrics.poolEvicted()
	return true
}

// DrainPool destroys every idle sandbox and stops refilling (a daemon
// that stops leaves no idle sandboxes; one that is killed leaves them for
// the next start to adopt).
func (s *Service) DrainPool(ctx context.Context) {
	ids := s.pool.Drain()
	var wg sync.WaitGroup
	for _, e := range ids {
		wg.Go(func() { s.destroyPooled(ctx, e.ID, "the daemon stops") })
	}
	wg.Wait()
}

// destroyPooled destroys an idle sandbox the pool no longer keeps.
func (s *Service) destroyPooled(ctx context.Context, id, why string) {
	s.Logger.Info("pool: destroying an idle sandbox", "sandbox", id, "why", why)
	s.destroyDetached(ctx, id, why)
}

// poolFree is what the host's admission budget has free now, which an
// adaptive class's growth takes at most half of (warmpool.Adapt).
func (s *Service) poolFree() warmpool.Free {
	used, budget := s.Admission.Usage()
	return warmpool.Free{MilliCPU: budget.MilliCPU - used.MilliCPU, MemoryMB: budget.MemoryMB - used.MemoryMB}
}

// poolMissed counts a create of req served cold, after it succeeded,
// in its class's demand when req was one the pool serves (nothing for a
// class that does not follow demand). Only creates that got a sandbox
// count: a tenant refused (a quota, a bad image) grows no pool.
func (s *Service) poolMissed(req CreateRequest) {
	if req.Owner == store.PoolOwner || req.Owner == buildOwner || len(req.Mounts) > 0 || req.Template != "" {
		return
	}
	n, err := s.normalize(req)
	if err != nil {
		return
	}
	s.pool.Missed(poolClass(n), s.Clock())
}

func (s *Service) observePool() {
	for _, st := range s.pool.Status() {
		s.Metrics.poolReady(st.Class, st.Ready)
	}
}
