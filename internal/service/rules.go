package service

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Lifecycle rules.
//
// A sandbox's Lifecycle says what happens to it when nobody acts: a running
// sandbox idle for AutoStop is stopped; a stopped one is destroyed
// AutoDelete after its stop (at the stop itself with DeleteOnStop) and
// archived AutoArchive after it; with PauseOnTimeout its timeout pauses it
// instead of destroying it. The rules are kept on the sandbox's row
// (store.Lifecycle, the spec for PauseOnTimeout) with the times they count
// from (LastActivityAt, StoppedAt), and the background loop applies them
// every reap tick (ApplyLifecycle), so they hold across a daemon restart:
// nothing about them lives in memory. The facades only translate their
// wire's fields (Daytona's autoStopInterval, autoDeleteInterval,
// autoArchiveInterval; E2B's autoPause) to and from it.
//
// Activity is what restarts a running sandbox's idle time: its create,
// start or resume, a change of its rules, and Touch (a facade's call that
// its wire counts as activity, such as any Daytona toolbox call).

// Lifecycle is a sandbox's lifecycle rules. The zero value has none: the
// sandbox runs until stopped or destroyed (or its timeout passes).
type Lifecycle struct {
	// AutoStop stops a running sandbox idle this long (its file system
	// kept); 0: never.
	AutoStop time.Duration
	// AutoDelete destroys a stopped sandbox this long after its stop; 0:
	// never, unless DeleteOnStop.
	AutoDelete time.Duration
	// DeleteOnStop destroys the sandbox as soon as it stops, however it
	// stops (Daytona's autoDeleteInterval 0). AutoDelete is then 0.
	DeleteOnStop bool
	// AutoArchive marks a stopped sandbox archived this long after its
	// stop (Sandbox.ArchivedAt); 0: never.
	AutoArchive time.Duration
	// PauseOnTimeout pauses the sandbox when its timeout passes, clearing
	// the timeout, instead of destroying it (E2B's autoPause).
	PauseOnTimeout bool
	// TimeoutPause is how PauseOnTimeout pauses: PauseFreeze (the zero
	// value) freezes the processes in memory, PauseHibernate hibernates
	// them (Hibernate: where the runtime cannot, the sandbox stops),
	// PauseStop stops the sandbox keeping its file system (E2B's
	// autoPauseMemory true and false).
	TimeoutPause PauseKind
	// AutoResume: traffic to the paused sandbox (its E2B envd, or a port
	// through the ingress) resumes it (Wake), once the request passed the
	// checks its port wants, instead of being refused (E2B's autoResume).
	AutoResume bool
}

// PauseKind is how a pause keeps a sandbox's processes.
type PauseKind string

// The kinds of pause (Lifecycle.TimeoutPause).
const (
	// PauseFreeze freezes the processes in memory (Pause).
	PauseFreeze PauseKind = ""
	// PauseHibernate writes them to disk and frees their memory
	// (Hibernate).
	PauseHibernate PauseKind = "hibernate"
	// PauseStop ends them, keeping the file system (Stop).
	PauseStop PauseKind = "stop"
)

// Bounds of the rules: auto-stop and auto-delete as long as the longest
// timeout, auto-archive 30 days (Daytona's maximum).
const (
	maxAutoStop    = maxTimeout
	maxAutoDelete  = maxTimeout
	MaxAutoArchive = 30 * 24 * time.Hour
)

// Validate checks l's bounds; the fields are named as the native API
// names them.
func (l Lifecycle) Validate() error {
	switch {
	case l.AutoStop < 0 || l.AutoStop > maxAutoStop:
		return invalid("lifecycle.auto_stop_s", "must be between 0 and %d seconds", int(maxAutoStop.Seconds()))
	case l.AutoDelete < 0 || l.AutoDelete > maxAutoDelete:
		return invalid("lifecycle.auto_delete_s", "must be between 0 and %d seconds", int(maxAutoDelete.Seconds()))
	case l.DeleteOnStop && l.AutoDelete != 0:
		return invalid("lifecycle.auto_delete_s", "a sandbox deleted at its stop has no auto-delete delay")
	case l.AutoArchive < 0 || l.AutoArchive > MaxAutoArchive:
		return invalid("lifecycle.auto_archive_s", "must be between 0 and %d seconds", int(MaxAutoArchive.Seconds()))
	case l.TimeoutPause != PauseFreeze && l.TimeoutPause != PauseHibernate && l.TimeoutPause != PauseStop:
		return invalid("lifecycle.timeout_pause", "must be empty, %q or %q", PauseHibernate, PauseStop)
	case l.TimeoutPause != PauseFreeze && !l.PauseOnTimeout:
		return invalid("lifecycle.timeout_pause", "applies only to a sandbox paused on its timeout")
	}
	return nil
}

// storeLifecycle is the part of l the row's columns keep.
func storeLifecycle(l Lifecycle) store.Lifecycle {
	return store.Lifecycle{AutoStop: l.AutoStop, AutoDelete: l.AutoDelete, DeleteOnStop: l.DeleteOnStop, AutoArchive: l.AutoArchive}
}

// lifecycleOf is a row's rules.
func lifecycleOf(row store.Sandbox, spec sandboxSpec) Lifecycle {
	l := row.Lifecycle
	return Lifecycle{
		AutoStop: l.AutoStop, AutoDelete: l.AutoDelete, DeleteOnStop: l.DeleteOnStop, AutoArchive: l.AutoArchive,
		PauseOnTimeout: spec.PauseOnTimeout,
		TimeoutPause:   spec.TimeoutPause,
		AutoResume:     spec.Wake != nil,
	}
}

// touchSlack is how stale a sandbox's last activity may get before Touch
// writes it again (at most a tenth of its auto-stop): a busy sandbox costs
// one write a minute, not one per call.
const touchSlack = time.Minute

// Touch records activity of sb (as the caller read it): its idle time
// starts again. It writes only for a running sandbox with an auto-stop
// whose recorded activity is older than the slack, so calling it on every
// request is cheap. A sandbox stopped or destroyed meanwhile is left as it
// is.
func (s *Service) Touch(ctx context.Context, sb Sandbox) error {
	if sb.State != StateRunning || sb.Lifecycle.AutoStop <= 0 {
		return nil
	}
	now := s.Clock()
	if now.Sub(sb.LastActivityAt) < min(touchSlack, sb.Lifecycle.AutoStop/10) {
		return nil
	}
	if err := s.Store.TouchSandbox(ctx, sb.ID, now); err != nil {
		return s.mapStoreErr(err, sb.ID)
	}
	return nil
}

// Archive stops a sandbox (if it runs) and marks it archived; a start
// clears the mark. Its file system is the stopped container's, kept as it
// is. Where the runtime can checkpoint it, a running or paused sandbox
// without auto-delete rules is hibernated instead (archiveHibernates):
// its processes are kept on disk beside its files, it holds no memory,
// and the start that clears the mark resumes them. Archiving an archived
// (or hibernated) sandbox returns it marked and otherwise unchanged. A
// sandbox with DeleteOnStop is destroyed by the stop, and the answer is
// its last view.
func (s *Service) Archive(ctx context.Context, c Caller, idOrName string) (Sandbox, error) {
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	defer unlock()
	if row.State == store.StateCreating {
		return Sandbox{}, fmt.Errorf("sandbox %s is still being created: %w", row.ID, ErrConflict)
	}
	// Marked first, so the stop's state change already shows it archived.
	marked, err := s.Store.ArchiveSandbox(ctx, row.ID, true)
	if err != nil {
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	if row.State == store.StateStopped || row.State == store.StatePaused && !row.HibernatedAt.IsZero() {
		return fromRow(marked), nil
	}
	if s.archiveHibernates(marked) {
		h, err := s.hibernateLocked(ctx, marked, keepLogs, c.Quota)
		if err == nil || errors.Is(err, ErrNotFound) {
			if err == nil && h.Stopped {
				s.Logger.Info("archive: stopped, not hibernated", "sandbox", row.ID, "reason", h.Reason)
			}
			return h.Sandbox, err
		}
		// The checkpoint failed and the sandbox runs on: stopped, as
		// where it cannot hibernate.
		s.Logger.Warn("archive: hibernate failed; stopping", "sandbox", row.ID, "err", err)
		if marked, err = s.Store.GetSandbox(ctx, row.ID); err != nil {
			return Sandbox{}, s.mapStoreErr(err, row.ID)
		}
	}
	sb, err := s.stopLocked(ctx, marked, keepLogs)
	if err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		if _, uerr := s.Store.ArchiveSandbox(uctx, row.ID, false); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
			s.Logger.Warn("archive: clear the mark after a failed stop", "sandbox", row.ID, "err", uerr)
		}
		cancel()
		return Sandbox{}, err
	}
	if sb.Lifecycle.DeleteOnStop {
		return sb, s.deleteOnStop(ctx, sb.ID)
	}
	return sb, nil
}

// archiveHibernates reports whether Archive hibernates row (running, or
// paused and frozen) rather than stop it: the runtime can checkpoint it,
// and it has no auto-delete rule, whose time counts from a stop (a
// hibernated sandbox is paused, and would never be deleted).
func (s *Service) archiveHibernates(row store.Sandbox) bool {
	if _, ok := s.Runtime.(runtime.Checkpointer); !ok {
		return false
	}
	l := row.Lifecycle
	return (row.State == store.StateRunning || row.State == store.StatePaused) && l.AutoDelete == 0 && !l.DeleteOnStop &&
		s.HibernateSupport(specOf(row).Runtime).OK
}

// deleteOnStop destroys a sandbox that DeleteOnStop says goes with its
// stop. Once its destroy is marked the rest is the reconciler's if it
// fails; a destroy that began elsewhere is done already.
func (s *Service) deleteOnStop(ctx context.Context, id string) error {
	if _, err := s.Store.BeginDestroy(ctx, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return s.mapStoreErr(err, id)
	}
	if err := s.finishDestroy(ctx, id); err != nil {
		s.Logger.Warn("delete on stop: committed, but a step failed; the reconciler finishes it", "sandbox", id, "err", err)
	}
	s.Logger.Info("destroyed a sandbox at its stop (its auto-delete is 0)", "sandbox", id)
	s.Metrics.reconcileAction("auto_delete")
	return nil
}

// LifecycleApplied counts what one ApplyLifecycle pass did.
type LifecycleApplied struct {
	Stopped, Deleted, Archived int
}

// ApplyLifecycle applies every sandbox's lifecycle rules at the service's
// clock: idle running sandboxes are stopped (AutoStop), stopped ones due
// are destroyed (AutoDelete, DeleteOnStop) and archived (AutoArchive), in
// that order, so a sandbox stopped for idling with DeleteOnStop goes in
// the same pass. Each act checks its rule again under the sandbox's
// transition lock or the writer: a sandbox touched, started or given new
// rules since the listing is left alone. RunBackground calls it every reap
// tick; errors of one sandbox do not stop the others.
func (s *Service) ApplyLifecycle(ctx context.Context) (LifecycleApplied, error) {
	var (
		out  LifecycleApplied
		errs []error
	)
	now := s.Clock()
	idle, err := s.Store.ListIdle(ctx, now)
	if err != nil {
		return out, fmt.Errorf("auto-stop: %w", err)
	}
	var stopped atomic.Int64
	errs = append(errs, parallel(ctx, rowIDs(idle), func(ctx context.Context, id string) error {
		still := func(row store.Sandbox) bool { return row.Idle(s.Clock()) }
		return s.underLock(ctx, id, "auto-stop", still, func(row store.Sandbox) error {
			if _, err := s.stopLocked(ctx, row, keepLogs); err != nil {
				return fmt.Errorf("auto-stop %s: %w", id, err)
			}
			stopped.Add(1)
			s.Logger.Info("stopped an idle sandbox (auto-stop)", "sandbox", id, "last_activity", row.LastActivityAt, "auto_stop", row.Lifecycle.AutoStop)
			s.Metrics.reconcileAction("auto_stop")
			return nil
		})
	})...)
	out.Stopped = int(stopped.Load())

	now = s.Clock()
	due, err := s.Store.ListAutoDeleteDue(ctx, now)
	if err != nil {
		return out, errors.Join(append(errs, fmt.Errorf("auto-delete: %w", err))...)
	}
	var deleted atomic.Int64
	errs = append(errs, parallel(ctx, rowIDs(due), func(ctx context.Context, id string) error {
		unlock, err := s.transitions.lock(ctx, id)
		if err != nil {
			return err
		}
		defer unlock()
		_, ok, err := s.Store.BeginAutoDelete(ctx, id, now)
		if err != nil || !ok {
			return err // started, given new rules, or destroyed since the listing
		}
		if err := s.finishDestroy(ctx, id); err != nil {
			return fmt.Errorf("auto-delete %s: %w", id, err)
		}
		deleted.Add(1)
		s.Logger.Info("destroyed a stopped sandbox (auto-delete)", "sandbox", id)
		s.Metrics.reconcileAction("auto_delete")
		return nil
	})...)
	out.Deleted = int(deleted.Load())

	n, err := s.Store.ArchiveDue(ctx, s.Clock())
	if err != nil {
		errs = append(errs, fmt.Errorf("auto-archive: %w", err))
	}
	if n > 0 {
		s.Logger.Info("archived stopped sandboxes (auto-archive)", "count", n)
		s.Metrics.reconcileActions("auto_archive", n)
	}
	out.Archived = n
	return out, errors.Join(errs...)
}

func rowIDs(rows []store.Sandbox) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
