package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// ErrUndelivered is HandOver's answer when the create's client went away
// before the answer could be written: write nothing. The sandbox is offered
// to an identical create for the replay window, then destroyed.
var ErrUndelivered = errors.New("the client went away before the answer was written")

// Delivery tracks one create made under OnceKey.Delivery until its answer
// reaches its client. The rule:
//
//   - a create whose answer was handed over (HandOver succeeded, and the
//     write did not fail) is its client's: never replayed, adopted or
//     expired;
//   - a create whose client went away first (its request's context ended,
//     or the write failed) is undelivered: one identical create of the same
//     owner within the replay window adopts it, else it is destroyed;
//   - an adopter is a new holder: its own client going away makes the
//     sandbox undelivered again.
//
// The state is the create's claim row (store.BeginDelivery), so a daemon
// killed between the create and the hand-over leaves a row that the next
// start makes undelivered.
type Delivery struct {
	s      *Service
	cl     store.Claim
	window time.Duration
	// stop stops the watch on the request's context; false when the watch
	// has fired already (the client is gone).
	stop func() bool

	mu       sync.Mutex
	gone     bool // the watch fired: the client went away
	settled  bool // handed over, marked undelivered, or released
	handedTo bool // HandOver succeeded
}

// watch starts tracking cl: when ctx (the request's) ends before HandOver,
// the create is abandoned: undelivered, adoptable for window.
func (s *Service) watch(ctx context.Context, cl store.Claim, window time.Duration) *Delivery {
	d := &Delivery{s: s, cl: cl, window: window}
	d.stop = context.AfterFunc(ctx, func() { d.abandon(context.WithoutCancel(ctx)) })
	return d
}

// abandon makes the inflight row undelivered. The store refuses while the
// sandbox has no row yet (an adopter would take "no row" for a create that
// rolled back); createDelivered then asks again once its chain has made the
// row. A store that cannot say leaves it inflight: the sandbox then lives
// until its timeout, or until a restart makes it undelivered.
func (d *Delivery) abandon(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gone = true
	if d.settled {
		return
	}
	actx, cancel := context.WithTimeout(ctx, undoTimeout)
	defer cancel()
	ok, err := d.s.Store.Abandon(actx, d.cl)
	switch {
	case err != nil:
		d.settled = true
		d.s.Logger.Warn("create dedupe: could not mark an abandoned create undelivered; it lives until its timeout", "sandbox", d.cl.TargetID, "err", err)
	case ok:
		d.settled = true
		d.s.Metrics.createUndelivered()
		d.s.Logger.Debug("create dedupe: a client went away before its answer; offered to its retry", "sandbox", d.cl.TargetID)
	}
}

// abandonIfGone repeats an abandon the store refused because the sandbox
// had no row yet; its chain has made the row now.
func (d *Delivery) abandonIfGone(ctx context.Context) {
	d.mu.Lock()
	again := d.gone && !d.settled
	d.mu.Unlock()
	if again {
		d.abandon(context.WithoutCancel(ctx))
	}
}

// SandboxID is the sandbox the delivery is for.
func (d *Delivery) SandboxID() string { return d.cl.TargetID }

// HandOver is called right before the answer is written. nil: write it;
// the sandbox is the client's from now on (report a failed write with
// Failed). ErrUndelivered: the client went away, write nothing. Any other
// error (the store could not record the hand-over): answer it, retryable;
// the sandbox is left to an identical retry.
//
// A nil Delivery hands over at once.
func (d *Delivery) HandOver(ctx context.Context) error {
	if d == nil {
		return nil
	}
	if !d.stop() {
		return ErrUndelivered // the watch fired: the client is gone
	}
	if ctx.Err() != nil {
		// Gone, and the watch stopped before it could run: do its work.
		d.abandon(context.WithoutCancel(ctx))
		return ErrUndelivered
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return ErrUndelivered
	}
	d.settled = true
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	ok, err := d.s.Store.HandOver(hctx, d.cl)
	switch {
	case err != nil:
		// The row is still inflight (the write rolled back): offer it to the
		// client's retry rather than leave it to its timeout.
		if _, aerr := d.s.Store.Abandon(hctx, d.cl); aerr != nil {
			d.s.Logger.Warn("create dedupe: could not hand a create over nor mark it undelivered; it lives until its timeout", "sandbox", d.cl.TargetID, "err", aerr)
		}
		return fmt.Errorf("%w: record the hand-over of %s: %w", ErrUnavailable, d.cl.TargetID, err)
	case !ok:
		// Not ours any more (nothing in this process takes an inflight row
		// from its holder): never give it out; the client may retry.
		return fmt.Errorf("%w: the claim of %s changed under its create", ErrUnavailable, d.cl.TargetID)
	}
	d.handedTo = true
	return nil
}

// Failed reports that writing the handed-over answer failed: the sandbox
// is undelivered again, adoptable for the window. Without a hand-over it
// does nothing (the watch marks an abandoned create undelivered itself).
func (d *Delivery) Failed(ctx context.Context) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.handedTo {
		return
	}
	d.handedTo = false
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := d.s.Store.Reoffer(rctx, d.cl, d.window); err != nil {
		d.s.Logger.Warn("create dedupe: an answer was not delivered and could not be offered to a retry; the sandbox lives until its timeout", "sandbox", d.cl.TargetID, "err", err)
	}
}

// release ends the delivery of a create that failed or whose sandbox is
// not an answer: the watch stops and the row goes, fenced by its token. It
// reports whether the row was still this holder's (deleted); false means an
// adopter took it over, and the sandbox is the adopter's to settle.
func (d *Delivery) release(ctx context.Context) (bool, error) {
	d.stop()
	d.mu.Lock()
	d.settled = true
	d.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	return d.s.Store.DeleteClaim(rctx, d.cl)
}

// createDelivered is CreateOnce under OnceKey.Delivery: adopt an
// undelivered create of the same fingerprint if there is one inside its
// window, else create, tracked until the answer is handed over. It never
// waits on, nor adopts, a create whose client is still waiting.
func (s *Service) createDelivered(ctx context.Context, c Caller, r CreateOnceRequest) (*Created, error) {
	k := r.Key
	if k.ReplayWindow <= 0 || k.PendingTTL <= 0 {
		return nil, fmt.Errorf("create once: delivery needs a replay window and a pending TTL (got %v, %v)", k.ReplayWindow, k.PendingTTL)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The cheap read first: a create with nothing to adopt (the usual
		// case) costs one read, not a write.
		has, err := s.Store.HasUndelivered(ctx, k.Scope, k.Fingerprint)
		if err != nil {
			return nil, s.mapStoreErr(err, "")
		}
		if !has {
			break
		}
		cl, ok, err := s.Store.AdoptUndelivered(ctx, k.Scope, k.Fingerprint)
		if err != nil {
			return nil, s.mapStoreErr(err, "")
		}
		if !ok {
			break // another retry took it
		}
		out, err := s.adoptDelivered(ctx, c, r, s.watch(ctx, cl, k.ReplayWindow))
		if out != nil || err != nil {
			return out, err
		}
		// What it named was no answer; its row is gone. Look again.
	}

	// The work outlives the client: a create whose client goes away is
	// finished and offered to its retry instead of being thrown away.
	work, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.PendingTTL)
	defer cancel()
	// An idle sandbox of the pool is reserved first, to know the id the
	// delivery row is keyed by; the claim's store write writes that row.
	// A miss (the sandbox died) creates cold under a fresh id.
	if e, ok := s.reservePooled(r.Create); ok {
		dcl, err := store.NewDelivery(k.Scope, k.Fingerprint, e.ID)
		if err != nil {
			s.unreservePooled(r.Create, e)
			return nil, s.mapStoreErr(err, "")
		}
		created, err := s.createAs(work, r.Create, e.ID, &reservation{pooled: e, delivery: &dcl, window: k.ReplayWindow}, nil)
		if !errors.Is(err, errPoolMiss) {
			if err != nil {
				return nil, err // the claim deleted its delivery row
			}
			return s.delivered(ctx, r, work, s.watch(ctx, dcl, k.ReplayWindow), created)
		}
	}
	id := newSandboxID()
	cl, err := s.Store.BeginDelivery(ctx, k.Scope, k.Fingerprint, id, k.ReplayWindow)
	if err != nil {
		return nil, s.mapStoreErr(err, "")
	}
	d := s.watch(ctx, cl, k.ReplayWindow)
	created, err := s.create(work, r.Create, id, nil)
	if err == nil {
		s.poolMissed(r.Create) // served cold under the id the delivery row names
	}
	if err != nil {
		// The chain rolled itself back.
		if _, derr := d.release(ctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete delivery claim: %w", derr))
		}
		return nil, err
	}
	return s.delivered(ctx, r, work, d, created)
}

// delivered finishes a create made under the delivery d: it is offered to
// retries at once if its client already went away, and runs r.After.
func (s *Service) delivered(ctx context.Context, r CreateOnceRequest, work context.Context, d *Delivery, created *Created) (*Created, error) {
	d.abandonIfGone(ctx)
	if r.After != nil {
		if aerr := r.After(work, created.Sandbox); aerr != nil {
			s.giveUp(ctx, d, aerr)
			return nil, aerr
		}
	}
	created.Delivery = d
	return created, nil
}

// giveUp destroys the sandbox of d after finishing it failed, unless an
// adopter took it over meanwhile (then it is the adopter's to finish).
func (s *Service) giveUp(ctx context.Context, d *Delivery, why error) {
	deleted, err := d.release(ctx)
	switch {
	case err != nil:
		s.Logger.Warn("create dedupe: could not drop the claim of a sandbox that failed to finish; it lives until its timeout", "sandbox", d.cl.TargetID, "err", err, "why", why)
	case deleted:
		s.destroyDetached(ctx, d.cl.TargetID, "finishing its create failed")
	}
}

// adoptDelivered finishes the adoption of the undelivered create d names.
// A create abandoned mid-way is still being made: it waits (cheap reads)
// until the row is settled. nil, nil: the sandbox is no answer (gone, being
// destroyed, or not running); its row is dropped (and a sandbox nobody has
// destroyed). An unreadable row fails the call and leaves the create
// undelivered for the next retry.
func (s *Service) adoptDelivered(ctx context.Context, c Caller, r CreateOnceRequest, d *Delivery) (*Created, error) {
	id := d.cl.TargetID
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		row, err := s.Store.GetSandbox(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			_, derr := d.release(ctx)
			return nil, derr
		case err != nil:
			if ctx.Err() == nil {
				d.abandon(context.WithoutCancel(ctx))
			}
			return nil, fmt.Errorf("%w: read the sandbox of an undelivered create: %w", ErrUnavailable, err)
		}
		if !row.DestroyingSince.IsZero() || !c.canSee(row.Owner) {
			_, derr := d.release(ctx)
			return nil, derr
		}
		if row.State == store.StateRunning {
			sb := fromRow(row)
			if r.After != nil {
				work, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Key.PendingTTL)
				aerr := r.After(work, sb)
				cancel()
				if aerr != nil {
					s.giveUp(ctx, d, aerr)
					return nil, aerr
				}
			}
			return &Created{Sandbox: sb, Replayed: true, Delivery: d}, nil
		}
		if row.State != store.StateCreating {
			// Stopped or failed while nobody had it: nobody will.
			if deleted, derr := d.release(ctx); derr != nil || !deleted {
				return nil, derr
			}
			s.destroyDetached(ctx, id, "an undelivered create that is not running")
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err() // the watch makes it undelivered again
		case <-t.C:
		}
	}
}

// ExpireUndelivered destroys every undelivered create past its window: the
// client went away and no identical create adopted it. Each is re-checked
// under the writer (an adoption in between keeps it); one still being made
// is left for a later pass. RunBackground calls it with every reap; the
// periodic reconcile too.
func (s *Service) ExpireUndelivered(ctx context.Context) (int, error) {
	claims, err := s.Store.ListExpiredUndelivered(ctx, pruneBatch)
	if err != nil {
		return 0, err
	}
	return s.expireUndelivered(ctx, claims)
}

func (s *Service) expireUndelivered(ctx context.Context, claims []store.Claim) (int, error) {
	var errs []error
	n := 0
	for _, cl := range claims {
		out, err := s.Store.ExpireUndelivered(ctx, cl)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if out != store.ExpireDestroy {
			continue
		}
		// Marked: a teardown cut short here is finished by the reconciler.
		if err := s.finishDestroy(ctx, cl.TargetID); err != nil {
			errs = append(errs, fmt.Errorf("destroy undelivered %s: %w", cl.TargetID, err))
			continue
		}
		n++
		s.Logger.Info("create dedupe: destroyed a create nobody received", "sandbox", cl.TargetID)
		s.Metrics.reconcileAction("expired_undelivered")
	}
	return n, errors.Join(errs...)
}

func (s *Service) expireUndeliveredErr(ctx context.Context, claims []store.Claim) error {
	_, err := s.expireUndelivered(ctx, claims)
	return err
}
