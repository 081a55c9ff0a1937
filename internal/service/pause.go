package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Pause and resume.
//
// A paused sandbox's processes are frozen in memory by the engine (the
// cgroup freezer: runtime.Pause) and thawed where they were by Resume. It
// keeps its admission reservation (its memory stays held), its timeout
// does not run (the reaper skips it; a resume gives the timeout back the
// time it spent paused), and calls that need its processes (exec, files)
// answer ErrPaused. After Config.PauseMax paused, the background loop
// stops it (its file system kept, its capacity released); the next
// resume then starts it afresh and says so (Resumed.ProcessesRestarted).
//
// Every transition of one sandbox (pause, resume, stop, start, the
// pause-max stop, the timeout's pause and the reconciler's repairs) runs
// under that sandbox's lock in s.transitions, and is a compare-and-set of
// the row (store.PauseSandbox, store.ResumeSandbox) followed by the
// engine call. So concurrent calls are serialized, and among racing
// pauses and resumes each sees the state the previous one left. A destroy
// takes no lock: it marks the row first, after which every transition's
// write answers not found and an engine call finds no container.
//
// The row is the truth. The write comes first, so a crash between it and
// the engine call leaves the engine behind the row, never ahead of it, and
// the reconciler moves the engine to the row: a paused row's running
// container is frozen again, a running row's frozen container is thawed
// (Decide's Refreeze and Thaw). An engine call that fails is undone: the
// engine is asked back where it was and the row written back; whatever
// that leaves is again the reconciler's to converge.

// Resumed is the outcome of Resume.
type Resumed struct {
	Sandbox
	// ProcessesRestarted: the sandbox was not paused but stopped (by
	// Config.PauseMax, a Stop, or its container's death) and was started
	// again: its processes are new, only its file system was kept.
	ProcessesRestarted bool
	// ConnectionsClosed: connections from outside the sandbox (through
	// the ingress, its agent's exec and file streams, port tunnels) did
	// not survive the pause: it was hibernated (a checkpoint cannot keep
	// them; its processes saw them closed) or its processes restarted.
	// A client reconnects. False for a thaw, which keeps them.
	ConnectionsClosed bool
}

// Pause freezes a running sandbox's processes in memory. Pausing a paused
// sandbox returns it unchanged. A sandbox in any other state is
// ErrConflict, as is one whose container is no longer running.
func (s *Service) Pause(ctx context.Context, c Caller, idOrName string) (Sandbox, error) {
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	defer unlock()
	switch row.State {
	case store.StatePaused:
		return fromRow(row), nil
	case store.StateRunning:
	default:
		return Sandbox{}, fmt.Errorf("sandbox %s is %s; only a running sandbox pauses: %w", row.ID, row.State, ErrConflict)
	}
	if row.Owner == store.PoolOwner {
		return Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	paused, err := s.Store.PauseSandbox(ctx, row.ID)
	if err != nil {
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	if err := s.Runtime.Pause(ctx, row.ID); err != nil {
		s.undoPause(row.ID)
		return Sandbox{}, s.engineErr(ctx, "pause", row.ID, err)
	}
	return fromRow(paused), nil
}

// undoPause puts a sandbox whose engine pause failed back to running: the
// engine first (the pause may have happened, its answer lost), then the
// row.
func (s *Service) undoPause(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if err := s.Runtime.Resume(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) {
		s.Logger.Warn("pause: resume after a failed pause", "sandbox", id, "err", err)
	}
	if _, err := s.Store.ResumeSandbox(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.Logger.Warn("pause: row back to running after a failed pause", "sandbox", id, "err", err)
	}
}

// Resume thaws a paused sandbox. A stopped sandbox (or one in error whose
// container still exists) is started instead, with ProcessesRestarted set:
// what a sandbox paused past Config.PauseMax becomes. Resuming a running
// sandbox returns it unchanged.
func (s *Service) Resume(ctx context.Context, c Caller, idOrName string) (Resumed, error) {
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Resumed{}, err
	}
	defer unlock()
	return s.resumeLocked(ctx, c, row)
}

// resumeLocked is Resume under the sandbox's transition lock.
func (s *Service) resumeLocked(ctx context.Context, c Caller, row store.Sandbox) (Resumed, error) {
	switch row.State {
	case store.StateRunning:
		return Resumed{Sandbox: fromRow(row)}, nil
	case store.StatePaused:
		if !row.HibernatedAt.IsZero() {
			return s.resumeHibernated(ctx, c, row)
		}
	case store.StateCreating:
		return Resumed{}, fmt.Errorf("sandbox %s is still being created: %w", row.ID, ErrConflict)
	default:
		sb, err := s.startLocked(ctx, c, row)
		return Resumed{Sandbox: sb, ProcessesRestarted: err == nil, ConnectionsClosed: err == nil}, err
	}
	resumed, err := s.Store.ResumeSandbox(ctx, row.ID)
	if err != nil {
		return Resumed{}, s.mapStoreErr(err, row.ID)
	}
	err = s.Runtime.Resume(ctx, row.ID)
	if errors.Is(err, runtime.ErrNotRunning) {
		// The container stopped while paused (a host reboot, the engine's
		// restart): what it ran is gone, its file system is not.
		s.Logger.Warn("resume: the paused sandbox's container had stopped; starting it", "sandbox", row.ID)
		sb, err := s.startLocked(ctx, c, resumed)
		return Resumed{Sandbox: sb, ProcessesRestarted: err == nil, ConnectionsClosed: err == nil}, err
	}
	if err != nil {
		uctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		if perr := s.Runtime.Pause(uctx, row.ID); perr != nil && !errors.Is(perr, runtime.ErrNotFound) {
			s.Logger.Warn("resume: pause again after a failed resume", "sandbox", row.ID, "err", perr)
		}
		if _, perr := s.Store.PauseSandbox(uctx, row.ID); perr != nil && !errors.Is(perr, store.ErrNotFound) {
			s.Logger.Warn("resume: row back to paused after a failed resume", "sandbox", row.ID, "err", perr)
		}
		cancel()
		return Resumed{}, s.engineErr(ctx, "resume", row.ID, err)
	}
	return Resumed{Sandbox: fromRow(resumed)}, nil
}

// engineErr is the answer to a pause or resume whose engine call failed:
// not found when the sandbox was destroyed meanwhile (or is being), a conflict when its
// container is gone or stopped, else ErrUnavailable naming the error.
func (s *Service) engineErr(ctx context.Context, verb, id string, err error) error {
	if row, gerr := s.Store.GetSandbox(ctx, id); errors.Is(gerr, store.ErrNotFound) || (gerr == nil && !row.DestroyingSince.IsZero()) {
		return fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotRunning) {
		return fmt.Errorf("%s %s: its container is not running: %w", verb, id, ErrConflict)
	}
	return fmt.Errorf("%s %s: the engine failed: %w: %w", verb, id, ErrUnavailable, err)
}

// lockTransition checks the service is ready, resolves a sandbox the
// caller may see, takes its transition lock and reads its row again under
// it (the state may have changed while the call waited). The caller runs
// unlock.
func (s *Service) lockTransition(ctx context.Context, c Caller, idOrName string) (store.Sandbox, func(), error) {
	if err := s.requireReady(); err != nil {
		return store.Sandbox{}, nil, err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	unlock, err := s.transitions.lock(ctx, row.ID)
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	row, err = s.Store.GetSandbox(ctx, row.ID)
	if err == nil && !row.DestroyingSince.IsZero() {
		err = store.ErrNotFound
	}
	if err != nil {
		unlock()
		return store.Sandbox{}, nil, s.mapStoreErr(err, idOrName)
	}
	return row, unlock, nil
}

// StopLongPaused stops every sandbox paused for longer than
// Config.PauseMax (none when it is zero), keeping its file system, and
// returns how many it stopped: a frozen sandbox's memory is not held
// forever. Each is re-checked under its transition lock, so a resume in
// between keeps it running. RunBackground calls it every reap tick.
func (s *Service) StopLongPaused(ctx context.Context) (int, error) {
	if s.cfg.PauseMax <= 0 {
		return 0, nil
	}
	cutoff := s.Clock().Add(-s.cfg.PauseMax)
	rows, err := s.Store.ListPausedBefore(ctx, cutoff)
	if err != nil {
		return 0, fmt.Errorf("stop long paused: %w", err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var n atomic.Int64
	errs := parallel(ctx, ids, func(ctx context.Context, id string) error {
		// Resumed (and maybe paused again), hibernated or destroyed
		// since the listing: left alone.
		still := func(row store.Sandbox) bool {
			return row.State == store.StatePaused && !row.PausedAt.After(cutoff) && row.HibernatedAt.IsZero()
		}
		return s.underLock(ctx, id, "stop long paused", still, func(row store.Sandbox) error {
			h, err := s.freePaused(ctx, row, keepLogs)
			if err != nil {
				return fmt.Errorf("free long paused %s: %w", id, err)
			}
			n.Add(1)
			s.Logger.Info("freed a sandbox paused for longer than the pause limit", "sandbox", id, "paused_at", row.PausedAt, "hibernated", !h.Stopped, "reason", h.Reason)
			s.Metrics.reconcileAction("pause_max")
			return nil
		})
	})
	return int(n.Load()), errors.Join(errs...)
}

// HostMemory reports the host's available and total memory, in MB.
type HostMemory func() (availableMB, totalMB int64, err error)

// StopPausedUnderPressure stops paused sandboxes, longest paused first,
// keeping their file systems, while the host's available memory is under
// Config.PausedMemoryFloor percent of its total (never without
// Deps.HostMemory or a floor), and returns how many it stopped: a frozen
// sandbox's memory is the first a host short of it gets back. Each stop
// is re-checked under the sandbox's transition lock, and the memory again
// before the next one. RunBackground calls it every reap tick.
func (s *Service) StopPausedUnderPressure(ctx context.Context) (int, error) {
	if s.HostMemory == nil || s.cfg.PausedMemoryFloor <= 0 {
		return 0, nil
	}
	short := func() (bool, error) {
		avail, total, err := s.HostMemory()
		if err != nil {
			return false, fmt.Errorf("host memory: %w", err)
		}
		return avail*100 < total*int64(s.cfg.PausedMemoryFloor), nil
	}
	if ok, err := short(); !ok || err != nil {
		return 0, err
	}
	rows, err := s.Store.ListPausedBefore(ctx, s.Clock())
	if err != nil {
		return 0, fmt.Errorf("stop paused under memory pressure: %w", err)
	}
	n := 0
	for _, r := range rows {
		if ok, err := short(); !ok || err != nil {
			return n, err
		}
		if !r.HibernatedAt.IsZero() {
			continue // it holds no memory
		}
		still := func(row store.Sandbox) bool { return row.State == store.StatePaused && row.HibernatedAt.IsZero() }
		err := s.underLock(ctx, r.ID, "stop paused under memory pressure", still, func(row store.Sandbox) error {
			// No snapshot of its logs: the host needs its memory now,
			// and each stop holds the next one up (an agent that does
			// not answer would cost stopLogsTimeout a sandbox). Nor a
			// hibernate: its save thaws the sandbox, writes its whole
			// memory and may take minutes, all while the host is
			// short; a stop is fast and frees it at once.
			if _, err := s.stopLocked(ctx, row, dropLogs); err != nil {
				return fmt.Errorf("stop paused %s under memory pressure: %w", row.ID, err)
			}
			n++
			s.Logger.Info("stopped a paused sandbox: the host is short of memory", "sandbox", row.ID, "paused_at", row.PausedAt)
			s.Metrics.reconcileAction("pause_memory")
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// freePaused frees the memory of a paused sandbox for the background
// loop (the pause limit, memory pressure), under its transition lock: it
// hibernates it where the runtime can, and stops it (keep: stopLocked's)
// where it cannot or where the checkpoint failed: the memory is freed
// either way.
func (s *Service) freePaused(ctx context.Context, row store.Sandbox, keep bool) (Hibernated, error) {
	// No caller: the image is held to the quota its create was
	// (imageQuota).
	h, err := s.hibernateLocked(ctx, row, keep, Quota{})
	if err == nil || errors.Is(err, ErrNotFound) {
		return h, err
	}
	// The checkpoint failed and left it paused: stopped as before.
	now, gerr := s.Store.GetSandbox(ctx, row.ID)
	if gerr != nil {
		return Hibernated{}, errors.Join(err, s.mapStoreErr(gerr, row.ID))
	}
	sb, serr := s.stopLocked(ctx, now, keep)
	if serr != nil {
		return Hibernated{}, errors.Join(err, serr)
	}
	return Hibernated{Sandbox: sb, Stopped: true, Reason: err.Error()}, nil
}

// underLock runs act on sandbox id's row under its transition lock, read
// again there, if the row still exists, is not being destroyed and still
// passes still (a transition in between may have settled it); otherwise
// it does nothing. action names the work in a failed read's error.
func (s *Service) underLock(ctx context.Context, id, action string, still func(store.Sandbox) bool, act func(store.Sandbox) error) error {
	unlock, err := s.transitions.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	row, err := s.Store.GetSandbox(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s %s: %w", action, id, err)
	case !row.DestroyingSince.IsZero() || !still(row):
		return nil
	}
	return act(row)
}

// pauseExpired is the reaper's pause of an expired sandbox made with
// PauseOnTimeout: the row moves to paused, its expiry cleared, only if it
// has still expired (store.PauseExpiredSandbox), then the engine freezes
// it; with Lifecycle.TimeoutPause PauseHibernate it is hibernated instead
// where the runtime can (a checkpoint that fails leaves it running, and
// it is frozen as before; no room for its image, or its owner's disk
// quota, stops it, as any hibernate), with PauseStop stopped keeping its
// file system. ok is false when it no longer qualified.
func (s *Service) pauseExpired(ctx context.Context, id string) (bool, error) {
	unlock, err := s.transitions.lock(ctx, id)
	if err != nil {
		return false, err
	}
	defer unlock()
	row, ok, err := s.Store.PauseExpiredSandbox(ctx, id, s.Clock())
	if err != nil || !ok {
		return false, err
	}
	switch spec := specOf(row); spec.TimeoutPause {
	case PauseStop:
		if _, err := s.stopLocked(ctx, row, keepLogs); err != nil {
			return true, fmt.Errorf("stop expired %s: %w", id, err)
		}
		return true, nil
	case PauseHibernate:
		if _, can := s.Runtime.(runtime.Checkpointer); !can || !s.HibernateSupport(spec.Runtime).OK {
			break // today's freeze: --pause-max frees it later
		}
		// No caller: its image is held to the quota its create was
		// (imageQuota), as pause-max's.
		h, err := s.hibernateLocked(ctx, row, keepLogs, Quota{})
		if err == nil || errors.Is(err, ErrNotFound) {
			if err == nil {
				s.Logger.Info("reaper: hibernated expired sandbox", "sandbox", id, "stopped", h.Stopped, "reason", h.Reason)
			}
			return true, nil
		}
		s.Logger.Warn("reaper: hibernate of an expired sandbox failed; freezing it", "sandbox", id, "err", err)
	}
	if err := s.Runtime.Pause(ctx, id); err != nil {
		// Left paused in the row: the reconciler freezes it again, or
		// marks it lost if its container is gone. It is never destroyed
		// for a timeout its owner asked to pause on.
		return true, fmt.Errorf("pause expired %s: %w", id, err)
	}
	return true, nil
}

// keyedLocks is one lock per key, taken with a context (so a caller never
// waits past its deadline) and dropped from the map when nobody holds or
// waits for it. The zero value is ready.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	ch   chan struct{} // holds a token while locked
	refs int           // holders and waiters, under keyedLocks.mu
}

// lock takes key's lock, or returns ctx's error.
func (k *keyedLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("%w: wait for another change of sandbox %s: %w", ErrUnavailable, key, ctx.Err())
	}
}
