package service

import (
	"context"
	"errors"
	"fmt"
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
// Concurrent first requests resume it once: each takes the sandbox's
// transition lock, and those after the first find it running.

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
func (s *Service) Wake(ctx context.Context, id string) (sb Resumed, ok bool, err error) {
	if !IsID(id) {
		return Resumed{}, false, nil
	}
	wakeable := func(row store.Sandbox) bool {
		return row.Owner != store.PoolOwner && row.DestroyingSince.IsZero() && specOf(row).Wake != nil &&
			(row.State == store.StatePaused || row.State == store.StateRunning)
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
	unlock, err := s.transitions.lock(ctx, id)
	if err != nil {
		return Resumed{}, true, err
	}
	defer unlock()
	row, err = s.Store.GetSandbox(ctx, id)
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
		return Resumed{Sandbox: fromRow(row)}, true, nil // another request woke it
	}
	rule := specOf(row).Wake
	r, err := s.resumeLocked(ctx, Caller{Owner: row.Owner, Quota: rule.Quota}, row)
	if err != nil {
		return Resumed{}, true, err
	}
	if r.ExpiresAt.IsZero() && rule.TimeoutMS > 0 {
		exp := s.Clock().Add(time.Duration(rule.TimeoutMS) * time.Millisecond)
		updated, err := s.Store.UpdateSandbox(ctx, id, store.SandboxUpdate{ExpiresAt: &exp})
		if err != nil {
			// It runs, and it would run for ever: a destroy (the only
			// way the write fails here) ends it anyway.
			return Resumed{}, true, s.mapStoreErr(err, id)
		}
		r.Sandbox = fromRow(updated)
	}
	s.Logger.Info("woke a paused sandbox for a request", "sandbox", id, "hibernated", !row.HibernatedAt.IsZero())
	s.Metrics.reconcileAction("auto_resume")
	return r, true, nil
}
