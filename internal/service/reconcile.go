package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Reconcile makes the host agree with the database. It runs at start
// (before the API serves, with startup set: every creating row is then
// from a dead process) and periodically:
//
//   - a container marked ours with no row is destroyed;
//   - a row stuck in creating (any, at startup; older than StuckCreating
//     otherwise) is rolled back: container, route, mounts and row;
//   - a running row whose container vanished or exited goes to error;
//   - at startup, routes, exposed ports and custom domains are restored
//     for every live row (the ingress is in memory);
//   - at startup, admission is recomputed from the live rows.
//
// It keeps going past individual failures and returns them joined.
func (s *Service) Reconcile(ctx context.Context, startup bool) error {
	var errs []error
	// Containers first, rows second: a create inserts its row before its
	// container, so every container in this snapshot whose create is still
	// running already has a row in the next one and is not taken for an
	// orphan.
	instances, err := s.Runtime.ListOurs(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list containers: %w", err)
	}
	rows, err := s.allRows(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list rows: %w", err)
	}
	byID := make(map[string]store.Sandbox, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	containers := make(map[string]runtime.Instance, len(instances))
	for _, in := range instances {
		containers[in.SandboxID] = in
	}

	// Containers without a row: a create that died before its row, or a
	// destroy that died after deleting it (destroy deletes the row last, so
	// this is the crash-before-insert case). Destroys run a few at a time:
	// each is a Docker round trip of about a second.
	var orphans []string
	for id := range containers {
		if _, ok := byID[id]; !ok {
			orphans = append(orphans, id)
		}
	}
	errs = append(errs, parallel(ctx, orphans, func(ctx context.Context, id string) error {
		if err := s.Runtime.Destroy(ctx, id); err != nil {
			return fmt.Errorf("destroy orphan container %s: %w", id, err)
		}
		_ = s.Volumes.Release(ctx, id)
		s.Logger.Info("reconcile: destroyed orphan container", "sandbox", id)
		s.Metrics.reconcileAction("orphan_container")
		return nil
	})...)

	// Rows stuck in creating: every one at startup (its process is gone),
	// else those older than the bound.
	stuckBefore := s.Clock().Add(-s.cfg.StuckCreating)
	var stuck []string
	for _, r := range rows {
		if r.State == store.StateCreating && (startup || r.CreatedAt.Before(stuckBefore)) {
			stuck = append(stuck, r.ID)
		}
	}
	errs = append(errs, parallel(ctx, stuck, func(ctx context.Context, id string) error {
		if err := s.rollbackRow(ctx, id); err != nil {
			return err
		}
		s.Logger.Info("reconcile: rolled back interrupted create", "sandbox", id)
		s.Metrics.reconcileAction("stuck_creating")
		return nil
	})...)
	rolledBack := make(map[string]bool, len(stuck))
	for _, id := range stuck {
		rolledBack[id] = true
	}

	live := map[string]admission.Request{}
	for _, r := range rows {
		switch {
		case rolledBack[r.ID]:
			continue
		case r.State == store.StateRunning:
			in, ok := containers[r.ID]
			if !ok || in.State != runtime.StateRunning {
				// The snapshot may predate a create or start that finished
				// since; ask again about this one sandbox before judging.
				st, err := s.Runtime.Inspect(ctx, r.ID)
				if err != nil {
					errs = append(errs, fmt.Errorf("inspect %s: %w", r.ID, err))
					continue
				}
				if st.State == runtime.StateRunning {
					break
				}
				reason := "container vanished"
				if st.State != runtime.StateMissing {
					reason = "container is " + string(st.State)
				}
				if _, err := s.Store.UpdateSandboxState(ctx, r.ID, []store.SandboxState{store.StateRunning}, store.StateError, reason); err != nil && !errors.Is(err, store.ErrStateConflict) {
					errs = append(errs, fmt.Errorf("mark %s error: %w", r.ID, err))
				}
				s.Logger.Warn("reconcile: sandbox lost its container", "sandbox", r.ID, "reason", reason)
				s.Metrics.reconcileAction("lost_container")
				continue
			}
		}
		if r.State == store.StateRunning || r.State == store.StateCreating {
			live[r.ID] = admission.Request{MilliCPU: r.CPUMillis, MemoryMB: r.MemoryMB}
		}
		// Routes live in memory: only a fresh process needs them back. A
		// periodic pass must not re-install them: a destroy that finished
		// since this pass read the rows would get its routes (and host
		// ports) back with no row left to remove them.
		if startup && r.State != store.StateCreating {
			if err := s.Router.Install(ctx, r.ID); err != nil {
				errs = append(errs, fmt.Errorf("install route of %s: %w", r.ID, err))
			}
		}
	}
	if startup {
		// Recompute capacity from the live rows, before serving. A
		// periodic pass must not: creates and stops in flight between its
		// read of the rows and now would lose or regain reservations.
		s.Admission.Reset(live)
		// Every pending claim belongs to the process that died: let the
		// callers' retries take them over now, adopting what survived.
		if n, err := s.Store.ReleasePendingClaims(ctx); err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			s.Logger.Info("reconcile: released pending idempotency claims", "count", n)
		}
	}
	if startup {
		routable := map[string]bool{}
		for _, r := range rows {
			if r.State != store.StateCreating && !rolledBack[r.ID] {
				routable[r.ID] = true
			}
		}
		if err := s.restoreRoutes(ctx, routable); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rollbackRow undoes a create that never finished: everything but the row
// first, then the row, so an interrupted rollback is retried next pass.
func (s *Service) rollbackRow(ctx context.Context, id string) error {
	if err := s.destroy(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("roll back interrupted create %s: %w", id, err)
	}
	return nil
}

func (s *Service) allRows(ctx context.Context) ([]store.Sandbox, error) {
	var all []store.Sandbox
	token := ""
	for {
		rows, next, err := s.Store.ListSandboxes(ctx, store.ListFilter{Limit: 1000, PageToken: token})
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

// Reap destroys every sandbox whose expiry has passed. It returns the
// number destroyed; a sandbox destroyed concurrently is not an error.
func (s *Service) Reap(ctx context.Context) (int, error) {
	rows, err := s.Store.ListExpired(ctx, s.Clock())
	if err != nil {
		return 0, fmt.Errorf("reap: %w", err)
	}
	var (
		n    int
		errs []error
	)
	for _, r := range rows {
		if err := s.destroy(ctx, r.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		n++
		s.Logger.Info("reaper: destroyed expired sandbox", "sandbox", r.ID)
		s.Metrics.reconcileAction("expired")
	}
	return n, errors.Join(errs...)
}

// RunBackground runs the reaper (every reapEvery) and the reconciler
// (every reconcileEvery) until ctx ends. Errors are logged, never fatal.
func (s *Service) RunBackground(ctx context.Context, reapEvery, reconcileEvery time.Duration) {
	reap := time.NewTicker(reapEvery)
	defer reap.Stop()
	rec := time.NewTicker(reconcileEvery)
	defer rec.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reap.C:
			if _, err := s.Reap(ctx); err != nil && ctx.Err() == nil {
				s.Logger.Error("reaper", "err", err)
			}
		case <-rec.C:
			if err := s.Reconcile(ctx, false); err != nil && ctx.Err() == nil {
				s.Logger.Error("reconciler", "err", err)
			}
		}
	}
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
