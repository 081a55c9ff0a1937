package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Auto-resume.
//
// A sandbox made with Lifecycle.AutoResume is resumed by the first
// request that reaches it while it is paused (frozen or hibernated),
// instead of that request being refused: the E2B facade's envd and port
// routes and the ingress's exposed ports call Wake, each only once the
// request passed the checks its port wants (a token, a private port's
// API token), so traffic without the sandbox's credentials never wakes
// it. A stopped sandbox (paused past --pause-max where the runtime
// cannot hibernate, or paused with PauseStop) is not woken: its
// processes are gone, and a start is the owner's call, as on E2B, where
// a file-system-only pause "cannot be auto-resumed by traffic".
//
// A wake has no API token of its own: it is held to the quota of the
// token that asked for the auto-resume (the create's, kept in the spec
// with the rule, as a failover's recreate is held to it), and a
// sandbox whose pause cleared its timeout runs again with its create's.
// Concurrent first requests resume it once: they share one resume
// (Wake), which runs on its own, bounded, whether they wait or not.

// wakeRule is a sandbox's auto-resume, kept in its spec.
type wakeRule struct {
	// Quota is the quota a wake is held to: that of the token that asked
	// for the auto-resume.
	Quota Quota `json:"quota"`
	// TimeoutMS is the timeout a woken sandbox whose pause cleared its
	// expiry runs with (its create's); 0: none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// wakeRuleOf is the auto-resume a create asks for, or nil.
func wakeRuleOf(req CreateRequest) *wakeRule {
	if !req.Lifecycle.AutoResume {
		return nil
	}
	return &wakeRule{Quota: req.Quota, TimeoutMS: req.Timeout.Milliseconds()}
}

// Wake resumes sandbox id, paused, for a request that reached it (its
// auto-resume), and reports whether the request may go on: ok is true
// when the sandbox has an auto-resume and runs now, woken by this call
// or by another (the caller then serves the request, trying its dial
// again). ok is false, with no error and nothing changed, for an id that
// names no sandbox, one without an auto-resume, and one neither paused
// nor running: the caller answers as it would have. A wake that fails
// (the owner's quota, the host's capacity, the engine) is ok with the
// typed error, and the sandbox stays paused. The caller has authorized
// the request: Wake checks nothing of it.
//
// The resume is not the caller's: one runs per sandbox at a time (the
// wakes in flight, wakeFlight), on its own bound (wakeTimeout), whoever
// asked for it going away; each caller waits for it only as long as its
// own ctx lets it, and one that gives up costs nothing more (its error
// is ErrUnavailable with ctx's). A resume that failed is answered to
// the wakes of the next wakeFailMemo instead of being tried again. A
// sandbox being hibernated is not woken (ErrPaused, at once): the wake
// neither queues behind the save nor undoes it once saved.
func (s *Service) Wake(ctx context.Context, id string) (sb Resumed, ok bool, err error) {
	if !IsID(id) {
		return Resumed{}, false, nil
	}
	// Without the lock first: a request to a running sandbox whose dial
	// failed for another reason costs one read.
	row, err := s.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Resumed{}, false, nil
	}
	if err != nil {
		return Resumed{}, false, fmt.Errorf("wake %s: %w: %w", id, ErrUnavailable, err)
	}
	if !wakeable(row) {
		return Resumed{}, false, nil
	}
	if row.State == store.StateRunning {
		return Resumed{Sandbox: fromRow(row)}, true, nil
	}
	// Only a wake that will resume waits for the startup repair: a
	// failed dial of any other sandbox keeps its own answer.
	if err := s.requireReady(); err != nil {
		return Resumed{}, true, err
	}
	if s.hibernating.has(id) {
		return Resumed{}, true, fmt.Errorf("wake %s: it is being hibernated: %w", id, ErrPaused)
	}
	call, err := s.wakes.join(id, row.Owner, func() *wakeCall { return s.startWake(ctx, row) })
	if err != nil {
		return Resumed{}, true, err
	}
	select {
	case <-call.done:
		return call.res, call.ok, call.err
	case <-ctx.Done():
		return Resumed{}, true, fmt.Errorf("wake %s: %w: the resume goes on without this request: %w", id, ErrUnavailable, ctx.Err())
	}
}

// wakeable reports whether row is a sandbox a wake may resume (paused) or
// find running: not the pool's, not being destroyed, with an auto-resume.
func wakeable(row store.Sandbox) bool {
	return row.Owner != store.PoolOwner && row.DestroyingSince.IsZero() && specOf(row).Wake != nil &&
		(row.State == store.StatePaused || row.State == store.StateRunning)
}

// Bounds of the wakes.
const (
	// wakeFailMemo is how long a failed resume (but a refusal of the
	// owner's quota or the host's capacity) is the answer to the wakes
	// of its sandbox: a storm of requests to a sandbox that cannot
	// resume (a restore that fails, an engine down) costs one attempt, not
	// one per request, and the owner's own Resume finds the lock free.
	wakeFailMemo = 3 * time.Second
	// maxWaking bounds the sandboxes resuming for requests at once (each
	// a restore: memory read back from disk, admission, the engine).
	// Past it a wake is ErrUnavailable, retryable.
	maxWaking = 32
	// maxWakingPerOwner is one owner's share of maxWaking: requests to
	// one tenant's many paused sandboxes never take every slot, so
	// another's wakes still run.
	maxWakingPerOwner = maxWaking / 4
)

// wakeTimeout bounds one wake's resume of a sandbox with memoryMB of
// memory, the wait for its transition lock included: a restore reads it
// all back, as a hibernate wrote it.
func wakeTimeout(memoryMB int64) time.Duration { return hibernateTimeout(memoryMB) }

// wakeCall is one resume for the wakes of a sandbox; done closes once
// res, ok and err are set.
type wakeCall struct {
	owner string
	done  chan struct{}
	res   Resumed
	ok    bool
	err   error
}

// wakeFlight is the wakes in flight, one per sandbox, and the failures
// remembered for wakeFailMemo. The zero value is ready.
type wakeFlight struct {
	mu       sync.Mutex
	inflight map[string]*wakeCall
	failed   map[string]wakeFailure
	now      func() time.Time // for tests; time.Now when nil
}

type wakeFailure struct {
	err   error
	until time.Time
}

func (f *wakeFlight) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// join returns the call in flight for id, or starts one of owner's with
// start; a failure remembered for id is returned as the error instead,
// as is ErrUnavailable when maxWaking sandboxes are waking, or
// maxWakingPerOwner of owner's.
func (f *wakeFlight) join(id, owner string, start func() *wakeCall) (*wakeCall, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.inflight[id]; c != nil {
		return c, nil
	}
	if fl, ok := f.failed[id]; ok {
		if f.clock().Before(fl.until) {
			return nil, fl.err
		}
		delete(f.failed, id)
	}
	if len(f.inflight) >= maxWaking {
		return nil, fmt.Errorf("wake %s: %d sandboxes are resuming for requests already: %w", id, maxWaking, ErrUnavailable)
	}
	mine := 0
	for _, c := range f.inflight { // at most maxWaking
		if c.owner == owner {
			mine++
		}
	}
	if mine >= maxWakingPerOwner {
		return nil, fmt.Errorf("wake %s: %d sandboxes of its owner's are resuming for requests already: %w", id, maxWakingPerOwner, ErrUnavailable)
	}
	if f.inflight == nil {
		f.inflight = map[string]*wakeCall{}
	}
	c := start()
	c.owner = owner
	f.inflight[id] = c
	return c, nil
}

// finish ends id's call c with its outcome, remembering a failure.
func (f *wakeFlight) finish(id string, c *wakeCall, remember bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	if c.err != nil && remember {
		now := f.clock()
		if f.failed == nil {
			f.failed = map[string]wakeFailure{}
		}
		for k, fl := range f.failed { // bounded by the sandboxes that failed within wakeFailMemo
			if !now.Before(fl.until) {
				delete(f.failed, k)
			}
		}
		f.failed[id] = wakeFailure{err: c.err, until: now.Add(wakeFailMemo)}
	}
	close(c.done)
}

// startWake starts the resume of row, paused, for the wakes of its
// sandbox (under s.wakes.mu), and returns its call. The resume keeps
// ctx's values, not its cancellation: a restore cut short by its caller
// would end the sandbox.
func (s *Service) startWake(ctx context.Context, row store.Sandbox) *wakeCall {
	c := &wakeCall{done: make(chan struct{})}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout(row.MemoryMB))
		defer cancel()
		var remember bool
		c.res, c.ok, c.err, remember = s.wakeOnce(ctx, row)
		s.wakes.finish(row.ID, c, remember)
	}()
	return c
}

// wakeOnce is the resume of a wake: row is the paused row Wake read. It
// reports whether its failure is the sandbox's (remembered) rather than
// a refusal of this one wake.
func (s *Service) wakeOnce(ctx context.Context, seen store.Sandbox) (_ Resumed, ok bool, _ error, remember bool) {
	id := seen.ID
	unlock, err := s.transitions.lock(ctx, id)
	if err != nil {
		return Resumed{}, true, err, false
	}
	defer unlock()
	row, err := s.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Resumed{}, false, nil, false
	}
	if err != nil {
		return Resumed{}, false, fmt.Errorf("wake %s: %w: %w", id, ErrUnavailable, err), false
	}
	if !wakeable(row) {
		return Resumed{}, false, nil, false
	}
	if row.State == store.StateRunning {
		return Resumed{Sandbox: fromRow(row)}, true, nil, false // another request woke it
	}
	if !row.HibernatedAt.Equal(seen.HibernatedAt) {
		// Hibernated while this wake waited for the lock (the save
		// had begun after Wake looked): the wake does not undo it; the
		// next request wakes it from its image.
		return Resumed{}, true, fmt.Errorf("wake %s: it was hibernated meanwhile: %w", id, ErrPaused), false
	}
	rule := specOf(row).Wake
	r, err := s.resumeLocked(ctx, Caller{Owner: row.Owner, Quota: rule.Quota}, row)
	if err != nil {
		// A refusal of the quota or the capacity is decided before any
		// work, and ends when the owner frees a slot: not remembered.
		cheap := errors.Is(err, ErrQuotaExceeded) || errors.Is(err, ErrCapacityExhausted)
		return Resumed{}, true, err, !cheap
	}
	if r.ExpiresAt.IsZero() && rule.TimeoutMS > 0 {
		exp := s.Clock().Add(time.Duration(rule.TimeoutMS) * time.Millisecond)
		updated, err := s.Store.UpdateSandbox(ctx, id, store.SandboxUpdate{ExpiresAt: &exp})
		if err != nil {
			// It runs, and it would run for ever: a destroy (the only
			// way the write fails here) ends it anyway.
			return Resumed{}, true, s.mapStoreErr(err, id), false
		}
		r.Sandbox = fromRow(updated)
	}
	s.Logger.Info("woke a paused sandbox for a request", "sandbox", id, "hibernated", !row.HibernatedAt.IsZero())
	s.Metrics.reconcileAction("auto_resume")
	return r, true, nil, false
}

// hibernations is the sandboxes a hibernate is saving, so that a wake
// does not queue behind a save to undo it. The zero value is ready.
type hibernations struct{ m sync.Map }

// begin marks id hibernating until the returned func runs.
func (h *hibernations) begin(id string) func() {
	h.m.Store(id, struct{}{})
	return func() { h.m.Delete(id) }
}

func (h *hibernations) has(id string) bool { _, ok := h.m.Load(id); return ok }
