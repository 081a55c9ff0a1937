package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Reconcile makes the host agree with the database: it takes a Snapshot,
// lets Decide make the Plan, and carries it out phase by phase. It runs at
// start (startup set: before serving, every creating row and every marked
// destroy is from a dead process) and periodically:
//
//   - containers marked ours with no row are destroyed;
//   - creates that will never finish are rolled back, destroys that were
//     cut short are finished;
//   - a running row whose container vanished or exited goes to error;
//   - stale idempotency claims nothing needs are pruned;
//   - at startup, admission is recomputed from the running rows, pending
//     claims are released to their callers' retries, and routes, exposed
//     ports and custom domains are restored for every live row.
//
// Each phase is idempotent and keeps going past individual failures; the
// next pass retries what failed. At startup the error is non-nil when the
// service could not be made ready (snapshot, admission, claims, routes);
// failures of the other phases are logged and left to the periodic pass.
// A successful startup pass marks the service ready (see Ready).
func (s *Service) Reconcile(ctx context.Context, startup bool) error {
	err := s.reconcile(ctx, startup)
	if startup && err != nil {
		if ok, _ := s.Ready(); !ok {
			s.setNotReady("startup repair failed: "+err.Error(), err)
		}
	}
	return err
}

func (s *Service) reconcile(ctx context.Context, startup bool) error {
	if startup {
		s.settleCheckpoints(ctx)
	}
	snap, err := s.snapshot(ctx, startup)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	p := Decide(snap)
	if startup && rolledBackUnseen(snap, p) {
		s.engineInFlight.Store(true)
	}

	cleanup := errors.Join(
		errors.Join(parallel(ctx, p.DestroyOrphans, s.destroyOrphan)...),
		errors.Join(parallel(ctx, p.RollBack, s.rollBack)...),
		errors.Join(parallel(ctx, p.FinishDestroy, s.finishInterrupted)...),
		s.pruneClaims(ctx, p.PruneClaims),
		s.expireUndeliveredErr(ctx, p.ExpireUndelivered),
	)
	cleanup = errors.Join(cleanup,
		errors.Join(parallel(ctx, p.Refreeze, s.refreeze)...),
		errors.Join(parallel(ctx, p.Thaw, s.thaw)...))
	lost, lostErr := s.markLost(ctx, p.CheckLost)
	if !startup {
		return errors.Join(cleanup, lostErr, s.sweepTemplates(ctx, false), s.sweepFirewall(ctx, snap.Rows))
	}
	if cleanup != nil {
		s.Logger.Warn("reconcile: startup cleanup incomplete; the periodic pass retries", "err", cleanup)
	}
	if lostErr != nil {
		return fmt.Errorf("startup reconcile: %w", lostErr)
	}
	s.sweepImages(snap.Rows)
	if err := s.sweepVolumes(snap.Rows); err != nil {
		s.Logger.Warn("reconcile: staged mounts of gone sandboxes left; the next start retries", "err", err)
	}
	for id := range lost {
		delete(p.Live, id)
	}
	if err := s.restore(ctx, p, lost); err != nil {
		return fmt.Errorf("startup reconcile: %w", err)
	}
	if err := s.finishClaims(ctx, snap.Rows, lost); err != nil {
		s.Logger.Warn("reconcile: some sandboxes claimed from the pool could not be configured", "err", err)
	}
	if err := s.restorePolicies(ctx, snap.Rows, lost); err != nil {
		s.Logger.Warn("reconcile: some network policies could not be applied again", "err", err)
	}
	if err := s.sweepFirewall(ctx, snap.Rows); err != nil {
		s.Logger.Warn("reconcile: network rules of gone sandboxes left; the periodic pass retries", "err", err)
	}
	if err := s.sweepTemplates(ctx, true); err != nil {
		s.Logger.Warn("reconcile: templates a dead process was making are not all settled; the periodic pass retries", "err", err)
	}
	s.setReady("")
	return nil
}

// snapshot reads containers, then stale claims, then rows (see Snapshot
// for why in this order).
func (s *Service) snapshot(ctx context.Context, startup bool) (Snapshot, error) {
	instances, err := s.Runtime.ListOurs(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list containers: %w", err)
	}
	claims, err := s.Store.ListStaleClaims(ctx, pruneBatch)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list stale claims: %w", err)
	}
	undelivered, err := s.Store.ListExpiredUndelivered(ctx, pruneBatch)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list expired undelivered creates: %w", err)
	}
	rows, err := s.allRows(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list rows: %w", err)
	}
	return Snapshot{
		Containers: instances, StaleClaims: claims, ExpiredUndelivered: undelivered, Rows: rows,
		Now: s.Clock(), Startup: startup,
		StuckCreating: s.cfg.StuckCreating, DestroyGrace: destroyGrace,
	}, nil
}

// destroyGrace is how long a destroy in progress may take before a
// periodic pass finishes it (every step tolerates the two running at once;
// the grace only saves doing the work twice).
const destroyGrace = time.Minute

// pruneBatch bounds the stale claims one pass looks at.
const pruneBatch = 500

func (s *Service) destroyOrphan(ctx context.Context, id string) error {
	if err := s.Runtime.Destroy(ctx, id); err != nil {
		return fmt.Errorf("destroy orphan container %s: %w", id, err)
	}
	if err := s.Volumes.Release(ctx, id); err != nil {
		return fmt.Errorf("release mounts of orphan %s: %w", id, err)
	}
	s.Logger.Info("reconcile: destroyed orphan container", "sandbox", id)
	s.Metrics.reconcileAction("orphan_container")
	return nil
}

// rollBack undoes a create that never finished. The mark re-checks under
// the writer that the row is still creating (a create that committed since
// the snapshot keeps its sandbox); the row goes last (see destroy), so an
// interrupted rollback is finished by the next pass.
func (s *Service) rollBack(ctx context.Context, id string) error {
	_, ok, err := s.Store.BeginRollBack(ctx, id)
	if err != nil {
		return fmt.Errorf("roll back interrupted create %s: %w", id, err)
	}
	if !ok {
		return nil // committed, or gone, since the snapshot
	}
	if err := s.finishDestroy(ctx, id); err != nil {
		return fmt.Errorf("roll back interrupted create %s: %w", id, err)
	}
	s.Logger.Info("reconcile: rolled back interrupted create", "sandbox", id)
	s.Metrics.reconcileAction("stuck_creating")
	return nil
}

func (s *Service) finishInterrupted(ctx context.Context, id string) error {
	if err := s.finishDestroy(ctx, id); err != nil {
		return fmt.Errorf("finish interrupted destroy of %s: %w", id, err)
	}
	s.Logger.Info("reconcile: finished interrupted destroy", "sandbox", id)
	s.Metrics.reconcileAction("interrupted_destroy")
	return nil
}

// refreeze pauses again the container of a paused row that runs
// unfrozen, if under the transition lock the row is still paused.
func (s *Service) refreeze(ctx context.Context, id string) error {
	return s.converge(ctx, id, store.StatePaused, "refreeze", func(ctx context.Context, id string) error {
		if err := s.Runtime.Pause(ctx, id); err != nil {
			return err
		}
		// A hibernated row whose sandbox runs: a resume restored it and
		// died before its write. Paused in memory now, not hibernated.
		row, err := s.Store.GetSandbox(ctx, id)
		if err == nil && !row.HibernatedAt.IsZero() {
			if _, err := s.Store.ClearHibernated(ctx, id); err != nil {
				return err
			}
			s.dropImage(id)
		}
		return nil
	})
}

// thaw resumes the frozen container of a running row, if under the
// transition lock the row is still running.
func (s *Service) thaw(ctx context.Context, id string) error {
	return s.converge(ctx, id, store.StateRunning, "thaw", s.Runtime.Resume)
}

// converge runs the engine call fn for sandbox id if, under its transition
// lock, its row is still in state want (a transition in between settled it).
func (s *Service) converge(ctx context.Context, id string, want store.SandboxState, action string, fn func(context.Context, string) error) error {
	still := func(row store.Sandbox) bool { return row.State == want }
	return s.underLock(ctx, id, action, still, func(store.Sandbox) error {
		if err := fn(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) {
			return fmt.Errorf("%s %s: %w", action, id, err)
		}
		s.Logger.Warn("reconcile: the engine was behind its row", "sandbox", id, "action", action)
		s.Metrics.reconcileAction(action)
		return nil
	})
}

// markLost asks about each running or paused row whose container the
// snapshot did not show running, and marks those really lost as error. It returns the
// ids it marked.
func (s *Service) markLost(ctx context.Context, ids []string) (map[string]bool, error) {
	lost := map[string]bool{}
	var errs []error
	for _, id := range ids {
		st, err := s.Runtime.Inspect(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("inspect %s: %w", id, err))
			continue
		}
		if st.State == runtime.StateRunning {
			continue
		}
		if row, err := s.Store.GetSandbox(ctx, id); err == nil && row.State == store.StatePaused {
			// A hibernate checkpoints under the transition lock: a
			// paused row is judged under it (hibernate.go).
			isLost, err := s.pausedLost(ctx, id)
			if err != nil {
				errs = append(errs, err)
			}
			if isLost {
				lost[id] = true
			}
			continue
		}
		reason := "container vanished"
		if st.State != runtime.StateMissing {
			reason = "container is " + string(st.State)
		}
		_, err = s.Store.UpdateSandboxState(ctx, id, []store.SandboxState{store.StateRunning, store.StatePaused}, store.StateError, reason)
		switch {
		case errors.Is(err, store.ErrStateConflict), errors.Is(err, store.ErrNotFound):
			continue // stopped, destroyed or restarted since the snapshot
		case err != nil:
			errs = append(errs, fmt.Errorf("mark %s error: %w", id, err))
			continue
		}
		lost[id] = true
		s.Logger.Warn("reconcile: sandbox lost its container", "sandbox", id, "reason", reason)
		s.Metrics.reconcileAction("lost_container")
	}
	return lost, errors.Join(errs...)
}

// pruneClaims deletes the stale claims Decide chose. Each delete is fenced:
// a claim retaken since the snapshot is left alone.
func (s *Service) pruneClaims(ctx context.Context, claims []store.StaleClaim) error {
	var errs []error
	n := 0
	for _, c := range claims {
		deleted, err := s.Store.DeleteStaleClaim(ctx, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			n++
		}
	}
	if n > 0 {
		s.Logger.Debug("reconcile: pruned stale idempotency claims", "count", n)
		s.Metrics.reconcileActions("pruned_claim", n)
	}
	return errors.Join(errs...)
}

// volumeHolds is what the volumes hold in their owners' disk quotas: each
// limited volume its size (volumeHold).
func (s *Service) volumeHolds(ctx context.Context) (map[string]admission.Request, error) {
	held := map[string]admission.Request{}
	vc, ok := s.Volumes.(VolumeCatalog)
	if !ok {
		return held, nil
	}
	vols, err := vc.AllVolumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		if v.SizeMB > 0 {
			held[volumeHold(v.Owner, v.Name)] = admission.Request{Owner: v.Owner, DiskMB: v.SizeMB}
		}
	}
	return held, nil
}

// restore is the startup phase: capacity from the running rows, pending
// claims released (their holders died with the last process: the callers'
// retries take them over at once, adopting what survived), and the
// in-memory ingress rebuilt. Routes are restored only here: a periodic
// pass that re-installed them could race a destroy and give a deleted
// sandbox its routes (and host ports) back.
func (s *Service) restore(ctx context.Context, p Plan, lost map[string]bool) error {
	held, err := s.volumeHolds(ctx)
	if err != nil {
		return err
	}
	maps.Copy(held, p.Live)
	s.Admission.Reset(held)
	n, err := s.Store.ReleasePendingClaims(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		s.Logger.Info("reconcile: released pending idempotency claims", "count", n)
	}
	// A create still inflight was cut short before its answer was handed
	// over: offered to its client's retry for its window, then destroyed.
	if n, err = s.Store.AbandonInflight(ctx); err != nil {
		return err
	}
	if n > 0 {
		s.Logger.Info("reconcile: creates of the last process that never answered are offered to their retries", "count", n)
	}
	routable := make(map[string]bool, len(p.Restore))
	var errs []error
	for _, id := range p.Restore {
		if lost[id] {
			continue
		}
		routable[id] = true
		if err := s.Router.Install(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("install route of %s: %w", id, err))
		}
	}
	errs = append(errs, s.restoreRoutes(ctx, routable))
	if err := errors.Join(errs...); err != nil {
		// One route or host port that cannot come back (another process
		// took the port) must not keep the whole daemon unready: it is
		// logged, and the sandbox's owner can expose it again.
		s.Logger.Error("reconcile: some routes could not be restored", "err", err)
	}
	return nil
}

// finishClaims finishes the pool claims a crash cut short. A claim writes
// the row and configures the agent at once (claimPooled), so a daemon
// killed between the two leaves a running row of its owner's whose agent
// still takes only the token it booted with: it is handed its env and its
// current token now, before the daemon is ready. One authenticated call
// per sandbox claimed from the pool, repairConcurrency at a time; an agent
// that already takes its current token costs nothing more.
func (s *Service) finishClaims(ctx context.Context, rows []store.Sandbox, lost map[string]bool) error {
	claimed := make(map[string]store.Sandbox)
	var ids []string
	for _, row := range rows {
		if row.BootTokenSealed == nil || row.Owner == store.PoolOwner || row.State != store.StateRunning ||
			!row.DestroyingSince.IsZero() || lost[row.ID] {
			continue
		}
		claimed[row.ID] = row
		ids = append(ids, row.ID)
	}
	return errors.Join(parallel(ctx, ids, func(ctx context.Context, id string) error {
		c, err := s.Agent(ctx, id)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, poolConfigureTimeout)
		defer cancel()
		if err := c.Check(cctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
			return nil // configured, or not answering: the health checks and the reconciler see to it
		}
		s.Logger.Info("reconcile: finishing a pool claim a crash cut short", "sandbox", id)
		if err := s.configureAgent(cctx, claimed[id]); err != nil {
			return fmt.Errorf("configure %s: %w", id, err)
		}
		return nil
	})...)
}

// VolumeSweeper is what a Volumes that keeps host state of its own per
// sandbox (the staged subpath mounts of internal/volume) offers the
// startup pass, to settle what a killed daemon left.
type VolumeSweeper interface {
	// Sweep removes what it holds for every sandbox live does not know,
	// and says how many it settled.
	Sweep(live func(sandboxID string) bool) (int, error)
}

// sweepVolumes settles, at startup, the staged mounts of sandboxes that
// have no row any more (a daemon killed between a destroy's teardown and
// the end of its undo). rows are the snapshot's, destroying ones included:
// the cleanup phases before it released those they settled, and no create
// runs before the startup pass (creates wait for readiness).
func (s *Service) sweepVolumes(rows []store.Sandbox) error {
	sw, ok := s.Volumes.(VolumeSweeper)
	if !ok {
		return nil
	}
	live := make(map[string]bool, len(rows))
	for _, r := range rows {
		live[r.ID] = true
	}
	n, err := sw.Sweep(func(id string) bool { return live[id] })
	if n > 0 {
		s.Logger.Info("reconcile: removed staged mounts of gone sandboxes", "count", n)
		s.Metrics.reconcileActions("stale_staged_mount", n)
	}
	return err
}

func (s *Service) allRows(ctx context.Context) ([]store.Sandbox, error) {
	var all []store.Sandbox
	token := ""
	for {
		rows, next, err := s.Store.ListSandboxes(ctx, store.ListFilter{Limit: 1000, PageToken: token, IncludeDestroying: true, IncludePool: true})
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// Reap destroys every sandbox whose expiry has passed and returns how many
// it destroyed; one made with PauseOnTimeout is paused instead (and not
// counted). Expiry is checked again under the writer as each row is
// marked (store.BeginReap): a timeout extended or cleared since the
// listing keeps its sandbox. The teardowns run a few at a time.
func (s *Service) Reap(ctx context.Context) (int, error) {
	rows, err := s.Store.ListExpired(ctx, s.Clock())
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	ids := make([]string, len(rows))
	pauseOnTimeout := map[string]bool{}
	for i, r := range rows {
		ids[i] = r.ID
		if fromRow(r).PauseOnTimeout {
			pauseOnTimeout[r.ID] = true
		}
	}
	var n atomic.Int64
	errs := parallel(ctx, ids, func(ctx context.Context, id string) error {
		if pauseOnTimeout[id] {
			ok, err := s.pauseExpired(ctx, id)
			if ok {
				s.Logger.Info("reaper: paused expired sandbox", "sandbox", id)
				s.Metrics.reconcileAction("expired_paused")
			}
			return err
		}
		_, ok, err := s.Store.BeginReap(ctx, id, s.Clock())
		if err != nil {
			return fmt.Errorf("reap %s: %w", id, err)
		}
		if !ok {
			return nil // extended, paused, or destroyed since the listing
		}
		if err := s.finishDestroy(ctx, id); err != nil {
			return fmt.Errorf("reap %s: %w", id, err)
		}
		n.Add(1)
		s.Logger.Info("reaper: destroyed expired sandbox", "sandbox", id)
		s.Metrics.reconcileAction("expired")
		return nil
	})
	return int(n.Load()), errors.Join(errs...)
}

// RunBackground makes the service ready, finishes the pool claims a crash
// cut short, then runs the reaper and the lifecycle rules (ApplyLifecycle)
// (every reapEvery), the reconciler (every
// reconcileEvery), the check of pending custom domains (every
// Config.DomainCheckEvery) and the warm pool (pool.go) until ctx ends.
// While the startup repair fails it is retried with backoff (Ready reports
// why it is not ready) and neither the reaper nor the periodic pass runs:
// both would act on a host the service has not yet caught up with. Errors
// are logged, never fatal.
func (s *Service) RunBackground(ctx context.Context, reapEvery, reconcileEvery time.Duration) {
	if !s.repairUntilReady(ctx) {
		return
	}
	// The pool starts at once: the late-orphan sweeps below may take a
	// minute, and its creates make rows before containers, so they never
	// look like orphans to the sweeps.
	poolDone := make(chan struct{})
	go func() {
		defer close(poolDone)
		s.runPool(ctx)
	}()
	defer func() { <-poolDone }()
	if s.engineInFlight.Load() {
		s.sweepLateOrphans(ctx)
	}
	reap := time.NewTicker(reapEvery)
	defer reap.Stop()
	rec := time.NewTicker(reconcileEvery)
	defer rec.Stop()
	// Domain checks wait on DNS servers a tenant may choose: they run on
	// their own, never holding up the reaper or the reconciler.
	domainsDone := make(chan struct{})
	go func() {
		defer close(domainsDone)
		s.runDomainChecks(ctx)
	}()
	defer func() { <-domainsDone }()
	// Templates the cluster could not take when they were made are
	// published as soon as it can (shared.go).
	publishDone := make(chan struct{})
	go func() {
		defer close(publishDone)
		s.runPublish(ctx)
	}()
	defer func() { <-publishDone }()
	// Unpacked images nothing uses any more (imagegc.go): a first pass
	// now, then one after each image removed.
	imageGCDone := make(chan struct{})
	go func() {
		defer close(imageGCDone)
		s.runImageGC(ctx)
	}()
	defer func() { <-imageGCDone }()
	var (
		pauseMax     sync.WaitGroup
		pauseMaxBusy atomic.Bool
	)
	// A hibernate under way ends first (it no longer heeds ctx); one
	// the process is killed in is the next start's (settleCheckpoints).
	defer pauseMax.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reap.C:
			if _, err := s.Reap(ctx); err != nil && ctx.Err() == nil {
				s.Logger.Error("reaper", "err", err)
			}
			if _, err := s.ExpireUndelivered(ctx); err != nil && ctx.Err() == nil {
				s.Logger.Error("expire undelivered creates", "err", err)
			}
			// Hibernates of sandboxes paused too long run on their own
			// goroutine, one pass at a time: each may take minutes (or a
			// park timeout), and the reaper, the lifecycle rules and the
			// reconciler go on meanwhile.
			if pauseMaxBusy.CompareAndSwap(false, true) {
				pauseMax.Add(1)
				go func() {
					defer pauseMax.Done()
					defer pauseMaxBusy.Store(false)
					if _, err := s.StopLongPaused(ctx); err != nil && ctx.Err() == nil {
						s.Logger.Error("stop long paused sandboxes", "err", err)
					}
				}()
			}
			if _, err := s.StopPausedUnderPressure(ctx); err != nil && ctx.Err() == nil {
				s.Logger.Error("stop paused sandboxes under memory pressure", "err", err)
			}
			if _, err := s.ApplyLifecycle(ctx); err != nil && ctx.Err() == nil {
				s.Logger.Error("lifecycle rules", "err", err)
			}
		case <-rec.C:
			if err := s.Reconcile(ctx, false); err != nil && ctx.Err() == nil {
				s.Logger.Error("reconciler", "err", err)
			}
		}
	}
}

// rolledBackUnseen reports whether p rolls back a create whose container
// the snapshot does not show: its container may yet appear.
func rolledBackUnseen(snap Snapshot, p Plan) bool {
	seen := make(map[string]bool, len(snap.Containers))
	for _, c := range snap.Containers {
		seen[c.SandboxID] = true
	}
	for _, id := range p.RollBack {
		if !seen[id] {
			return true
		}
	}
	return false
}

// lateOrphanSweeps are the delays between the passes that follow a startup
// which rolled back creates the engine may still be carrying out: a
// container create the engine accepted before the old process died can
// complete after the startup pass looked, and then has no row. The engine
// gives no way to wait for its requests in flight, so the passes back off
// over about a minute (an engine slower than that is caught by the
// periodic pass). Each pass is a listing of containers and rows; an orphan
// is destroyed (Decide: a container with no row).
var lateOrphanSweeps = []time.Duration{
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
}

func (s *Service) sweepLateOrphans(ctx context.Context) {
	for _, d := range lateOrphanSweeps {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.Reconcile(ctx, false); err != nil && ctx.Err() == nil {
			s.Logger.Warn("reconciler: sweep for late orphans", "err", err)
		}
	}
}

// Backoff of the startup repair.
const (
	repairBackoffMin = 100 * time.Millisecond
	repairBackoffMax = 10 * time.Second
)

// repairUntilReady runs the startup pass until it succeeds (returning
// true) or ctx ends (false). A service that is ready already returns at
// once.
func (s *Service) repairUntilReady(ctx context.Context) bool {
	wait := repairBackoffMin
	for attempt := 1; ; attempt++ {
		if ok, _ := s.Ready(); ok {
			return true
		}
		err := s.Reconcile(ctx, true)
		if err == nil {
			s.Logger.Info("startup repair done; ready", "attempts", attempt)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.setNotReady(fmt.Sprintf("startup repair failed (attempt %d, next in %v): %v", attempt, wait, err), err)
		s.Logger.Warn("startup repair failed; retrying", "attempt", attempt, "in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, repairBackoffMax)
	}
}

// Ready reports whether the startup repair has succeeded, and if not, why.
// Until then creates are refused (ErrUnavailable): admission has not been
// recomputed and would overcommit the host.
func (s *Service) Ready() (bool, string) {
	r := s.readiness.Load()
	return r.ready, r.reason
}

type readiness struct {
	ready  bool
	reason string
	// cause is the fault that failed the startup repair (Fault), if any.
	cause string
}

// setReady marks the service ready (reason "") or not ready with reason.
func (s *Service) setReady(reason string) {
	s.readiness.Store(&readiness{ready: reason == "", reason: reason})
}

// setNotReady marks the service not ready with reason, err having failed
// the startup repair: a fault's cause is kept for the refusals.
func (s *Service) setNotReady(reason string, err error) {
	cause, _ := Fault(err)
	s.readiness.Store(&readiness{reason: reason, cause: cause})
}

// requireReady is the first check of every call that changes what a
// sandbox has on the host (create, start, stop, destroy, ports, domains):
// until the startup repair is done, a pass in progress could restore a
// route or listener from a snapshot older than the change.
func (s *Service) requireReady() error {
	r := s.readiness.Load()
	switch {
	case r.ready:
		return nil
	case r.cause != "":
		// The repair waits for a dependency: the refusal names it.
		return &FaultError{Cause: r.cause, Err: fmt.Errorf("the daemon is starting: %s", r.reason)}
	}
	return fmt.Errorf("%w: the daemon is starting: %s", ErrUnavailable, r.reason)
}

// repairConcurrency bounds the Docker calls one reconcile pass makes at once.
const repairConcurrency = 4

// parallel runs fn for every id, repairConcurrency at a time, and returns
// the errors.
func parallel(ctx context.Context, ids []string, fn func(context.Context, string) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, repairConcurrency)
	)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}
