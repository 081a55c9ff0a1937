package service

import (
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Snapshot is what one reconcile pass saw, in the order it looked:
// containers first, then claims, then rows. A create inserts its row before
// its container and attaches its claim's target before its row, so a
// container or a target whose create is still running already has its row
// in a later read and is never taken for an orphan.
type Snapshot struct {
	Containers  []runtime.Instance
	StaleClaims []store.StaleClaim
	// ExpiredUndelivered are creates whose client went away and that nobody
	// adopted within the window (store.ListExpiredUndelivered).
	ExpiredUndelivered []store.Claim
	Rows               []store.Sandbox // every row of this node, those being destroyed included
	Now                time.Time
	// Startup: the pass of a fresh process, before it serves. Every
	// creating row and every marked destroy is then from a dead process.
	Startup bool
	// StuckCreating is how old a creating row may get before a periodic
	// pass rolls it back; DestroyGrace the same for a destroy in progress.
	StuckCreating, DestroyGrace time.Duration
}

// Plan is what a reconcile pass does, decided from a Snapshot alone.
type Plan struct {
	// DestroyOrphans are containers marked ours with no row: a create that
	// died before its row, or a row deleted under a live container.
	DestroyOrphans []string
	// RollBack are creates that will never finish: destroyed like any
	// sandbox (their claims then let a retry start over).
	RollBack []string
	// FinishDestroy are destroys that began and were cut short.
	FinishDestroy []string
	// CheckLost are running rows whose container the snapshot shows
	// missing or not running: asked about again, one by one, before
	// being marked error (the snapshot may predate a start).
	CheckLost []string
	// Refreeze are paused rows whose container runs unfrozen (a
	// hibernated row's too: it is then paused in memory), and Thaw
	// running rows whose container is frozen: a pause or resume cut short
	// between its write and its engine call (the row is the truth; see
	// pause.go). Each is checked again under the sandbox's transition lock.
	Refreeze, Thaw []string
	// Restore (startup) are the rows whose routes, ports and domains the
	// fresh ingress gets back.
	Restore []string
	// Live (startup) is the capacity the running sandboxes hold.
	Live map[string]admission.Request
	// PruneClaims are stale claims nothing needs: completed ones past their
	// window, and pending ones whose holder attached no target or a target
	// that has no row. A pending claim whose target still has a row is
	// kept: a retry needs it to adopt that sandbox instead of making
	// another.
	PruneClaims []store.StaleClaim
	// ExpireUndelivered are undelivered creates past their window: each is
	// destroyed unless, re-checked under the writer, it was adopted or is
	// still being made.
	ExpireUndelivered []store.Claim
}

// Decide turns a snapshot into a plan. It is pure: every rule of the
// reconciler is here and table-tested (decide_test.go); the effects that
// carry a plan out are in reconcile.go.
func Decide(s Snapshot) Plan {
	p := Plan{}
	rows := make(map[string]store.Sandbox, len(s.Rows))
	for _, r := range s.Rows {
		rows[r.ID] = r
	}
	containers := make(map[string]runtime.Instance, len(s.Containers))
	for _, c := range s.Containers {
		containers[c.SandboxID] = c
		if _, ok := rows[c.SandboxID]; !ok {
			p.DestroyOrphans = append(p.DestroyOrphans, c.SandboxID)
		}
	}
	if s.Startup {
		p.Live = map[string]admission.Request{}
	}
	stuckBefore := s.Now.Add(-s.StuckCreating)
	destroyBefore := s.Now.Add(-s.DestroyGrace)
	for _, r := range s.Rows {
		switch {
		case !r.DestroyingSince.IsZero():
			if s.Startup || r.DestroyingSince.Before(destroyBefore) {
				p.FinishDestroy = append(p.FinishDestroy, r.ID)
			}
			// Never restored, never counted: it is gone to every caller.
		case r.State == store.StateCreating:
			if s.Startup || r.CreatedAt.Before(stuckBefore) {
				p.RollBack = append(p.RollBack, r.ID)
			}
		default:
			hibernated := r.State == store.StatePaused && !r.HibernatedAt.IsZero()
			if r.State == store.StateRunning || r.State == store.StatePaused {
				c, ok := containers[r.ID]
				switch {
				case hibernated && ok && c.State != runtime.StateRunning:
					// Checkpointed, as its row says (hibernate.go).
				case hibernated && ok && !c.Paused:
					// A resume cut short between its restore and its
					// write: frozen, and no longer hibernated (refreeze).
					p.Refreeze = append(p.Refreeze, r.ID)
				case !ok || c.State != runtime.StateRunning:
					p.CheckLost = append(p.CheckLost, r.ID)
				case r.State == store.StatePaused && !c.Paused:
					p.Refreeze = append(p.Refreeze, r.ID)
				case r.State == store.StateRunning && c.Paused:
					p.Thaw = append(p.Thaw, r.ID)
				}
			}
			if s.Startup {
				p.Restore = append(p.Restore, r.ID)
				if (r.State == store.StateRunning || r.State == store.StatePaused) && !hibernated {
					p.Live[r.ID] = holding(r)
				} else if h := holding(r); hibernated {
					// Its memory image counts beside its files
					// (hibernate.go).
					p.Live[r.ID] = admission.Request{DiskMB: h.DiskMB + r.MemoryMB, Owner: h.Owner}
				} else if h.DiskMB > 0 {
					// Stopped, hibernated (or in error) with its container: its files
					// still count in its owner's disk quota (Admission.Park).
					p.Live[r.ID] = admission.Request{DiskMB: h.DiskMB, Owner: h.Owner}
				}
			}
		}
	}
	for _, c := range s.StaleClaims {
		if _, hasRow := rows[c.TargetID]; !c.Pending || c.TargetID == "" || !hasRow {
			p.PruneClaims = append(p.PruneClaims, c)
		}
	}
	p.ExpireUndelivered = s.ExpiredUndelivered
	slices.Sort(p.DestroyOrphans)
	return p
}
