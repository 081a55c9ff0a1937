package service

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// OnceKey names a create that happens at most once while its claim holds:
// the native API's (owner, Idempotency-Key), E2B's key or request body.
type OnceKey struct {
	Scope       string
	Fingerprint string
	// RequestHash identifies the request body; the same fingerprint with
	// another hash is ErrIdempotencyKeyReused. Empty skips the check (a
	// body fingerprint is itself the body).
	RequestHash string
	// PendingTTL bounds how long a claim stays locked without its holder
	// extending it; a claim whose holder died is retaken after it.
	PendingTTL time.Duration
	// ReplayWindow is how long a completed claim answers with its sandbox;
	// with Delivery, how long an undelivered create stays adoptable.
	ReplayWindow time.Duration
	// Delivery selects the rule for creates that carry no key of their own
	// (E2B's identical bodies): the create is never collapsed with
	// another. It is tracked until its answer is handed over
	// (Created.Delivery); only a create whose client went away first is
	// adopted, by one identical create (same Scope and Fingerprint) within
	// ReplayWindow, and destroyed after it if nobody does. The work
	// outlives the client, bounded by PendingTTL. DeriveID and RequestHash
	// are ignored.
	Delivery bool
}

// CreateOnceRequest is one call of CreateOnce.
type CreateOnceRequest struct {
	// Key makes the create idempotent; a zero Key (no Scope) creates
	// unconditionally.
	Key    OnceKey
	Create CreateRequest
	// DeriveID names the sandbox after its claim ("sb-" and 16 hex digits
	// of sha256(scope, fingerprint, the claim's first lock deadline)): every
	// caller sharing a claim derives the same id, so a duplicate that lands
	// on another node collides on the id, and a later claim of the same
	// fingerprint gets another.
	DeriveID bool
	// After, when set, finishes a fresh sandbox before the create counts as
	// done (E2B's code interpreter). If it fails the sandbox is destroyed
	// and the create fails.
	After func(ctx context.Context, sb Sandbox) error
}

// CreateOnce is the one entry for creates that must not happen twice: it
// claims the key, creates under the claim (the claim names the sandbox
// before the first side effect), and completes the claim. A duplicate
// while the first runs waits for it; one inside the replay window gets the
// same sandbox at once (Replayed set, no private key); one that finds the
// claim of a holder that died adopts that holder's sandbox if it is whole.
//
// Only a definite answer counts: a sandbox is gone when the store says it
// does not exist (or it is being destroyed, or is half-made); any other
// read error fails the call, retryable, and never leads to a second
// create. A holder that loses its claim while working reports success
// only if the key settled on its own sandbox; otherwise it destroys its
// sandbox and answers the key's.
func (s *Service) CreateOnce(ctx context.Context, c Caller, r CreateOnceRequest) (*Created, error) {
	r.Create.Quota = c.Quota // the caller's token bounds what its owner holds
	if r.Key.Scope == "" {
		return s.createThen(ctx, r, nil)
	}
	if r.Key.Delivery {
		return s.createDelivered(ctx, c, r)
	}
	key := r.Key
	r.Create.Once = &key
	req := store.ClaimRequest{Scope: r.Key.Scope, Fingerprint: r.Key.Fingerprint, RequestHash: r.Key.RequestHash, PendingTTL: r.Key.PendingTTL}
	// mine is a sandbox this call made under a claim it then lost: it is the
	// answer only if the key settles on it. A call that ends before it saw
	// the key settle destroys mine only if no holder can still adopt it.
	var mine *Created
	defer func() {
		if mine != nil && !s.mayAdopt(ctx, req, mine.ID) {
			s.destroyDetached(ctx, mine.ID, "made under a lost idempotency claim")
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		acquiredAt := time.Now() // monotonic: the lock lasts at least PendingTTL from here
		cl, err := s.Store.Claim(ctx, req)
		if err != nil {
			return nil, s.mapStoreErr(err, "")
		}
		switch cl.Outcome {
		case store.ClaimReady:
			if mine != nil && cl.TargetID == mine.ID {
				out := mine
				mine = nil
				return out, nil
			}
			sb, live, err := s.claimTarget(ctx, c, cl.TargetID)
			if err != nil {
				return nil, err
			}
			if live {
				return &Created{Sandbox: sb, Replayed: true}, nil
			}
			// Fenced by the claim's token: of several callers that find the
			// target gone, one deletes, and all claim again.
			if _, err := s.Store.DeleteClaim(ctx, cl); err != nil {
				return nil, fmt.Errorf("drop idempotency claim of a gone sandbox: %w", err)
			}
		case store.ClaimPending:
			if err := s.awaitClaim(ctx, req); err != nil {
				return nil, err
			}
		case store.ClaimAcquired:
			// The previous holder's target first: if it is whole it may
			// already be some caller's answer. Then our own sandbox (the
			// holder that took our claim over gave up).
			var candidates []string
			if cl.PreviousTarget != "" {
				candidates = append(candidates, cl.PreviousTarget)
			}
			if mine != nil && mine.ID != cl.PreviousTarget {
				candidates = append(candidates, mine.ID)
			}
			adopted, retry, err := s.adopt(ctx, c, r, cl, candidates)
			switch {
			case err != nil:
				return nil, err
			case retry:
				continue // taken over again: wait for that holder
			case adopted != nil && mine != nil && adopted.ID == mine.ID:
				out := mine
				mine = nil
				return out, nil
			case adopted != nil:
				return adopted, nil
			}
			out, lost, err := s.createClaimed(ctx, c, r, cl, acquiredAt)
			if !lost {
				return out, err
			}
			if out != nil {
				mine = out
			}
			// Lost: the key belongs to another holder now; wait for it.
		default:
			return nil, fmt.Errorf("idempotency claim: unknown outcome %v", cl.Outcome)
		}
	}
}

// adopt completes the acquired claim cl with the first candidate that is
// whole, once r.After has finished it (the holder that made it may have
// died before its After ran, or after it failed). It returns (nil, false,
// nil) when none is; retry when the claim was taken over meanwhile. A
// candidate that cannot be read fails the call and releases the claim,
// keeping its target, so a retry looks again at once.
func (s *Service) adopt(ctx context.Context, c Caller, r CreateOnceRequest, cl store.Claim, candidates []string) (_ *Created, retry bool, _ error) {
	for _, id := range candidates {
		sb, live, err := s.claimTarget(ctx, c, id)
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			return nil, false, errors.Join(err, s.Store.ReleaseClaim(rctx, cl))
		}
		if !live {
			continue
		}
		if r.After != nil {
			if err := r.After(ctx, sb); err != nil {
				lost, ferr := s.failClaimed(ctx, cl, id, err)
				return nil, lost, ferr
			}
		}
		err = s.Store.Complete(ctx, cl, id, r.Key.ReplayWindow)
		if errors.Is(err, store.ErrClaimLost) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("complete idempotency claim: %w", err)
		}
		return &Created{Sandbox: sb, Replayed: true}, false, nil
	}
	return nil, false, nil
}

// createClaimed runs the create under the acquired claim cl and completes
// the claim. lost reports that the claim was taken over meanwhile: then out
// (if not nil) is a sandbox this call made, which is the answer only if the
// key settles on it, and err is nil or the create's own failure.
func (s *Service) createClaimed(ctx context.Context, c Caller, r CreateOnceRequest, cl store.Claim, acquiredAt time.Time) (out *Created, lost bool, err error) {
	hold := s.holdClaim(ctx, cl, r.Key.PendingTTL, acquiredAt)
	created, err := s.createWithID(ctx, r.Create, claimID(r, cl), &cl)
	var afterErr error
	if err == nil && r.After != nil && !created.Replayed {
		afterErr = r.After(ctx, created.Sandbox)
	}
	lost = hold.stop()
	detached := context.WithoutCancel(ctx)

	switch {
	case errors.Is(err, store.ErrClaimLost):
		return nil, true, nil // the claim went before the create's first side effect
	case err != nil:
		// The create rolled itself back. A retry starts fresh.
		dctx, cancel := context.WithTimeout(detached, undoTimeout)
		defer cancel()
		if _, derr := s.Store.DeleteClaim(dctx, cl); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete idempotency claim: %w", derr))
		}
		return nil, lost, err
	case afterErr != nil && lost:
		// Another holder may have adopted the sandbox already: it is
		// destroyed only once the key settles elsewhere.
		return created, true, nil
	case afterErr != nil:
		if lost, err = s.failClaimed(ctx, cl, created.ID, afterErr); lost {
			return created, true, nil
		}
		return nil, false, err
	}
	cctx, cancel := context.WithTimeout(detached, undoTimeout)
	defer cancel()
	switch err := s.Store.Complete(cctx, cl, created.ID, r.Key.ReplayWindow); {
	case errors.Is(err, store.ErrClaimLost):
		return created, true, nil
	case err != nil:
		// The claim still names this sandbox: a retry, once the lock has
		// run out, adopts it. The answer stands.
		s.Logger.Warn("idempotency: could not complete a claim; a retry adopts its sandbox", "sandbox", created.ID, "err", err)
	}
	return created, false, nil
}

// failClaimed gives up on sandbox id, made or adopted under the acquired
// claim cl, after r.After failed with afterErr. The claim goes first,
// fenced: only if it was still this call's is the sandbox destroyed (lost
// false, afterErr returned). If another holder took the claim over, it
// may have adopted the sandbox: lost is true and the sandbox is left to
// the key. If the store cannot say, the claim stays and names the
// sandbox, which the next holder adopts (running After again) or the
// reaper ends: afterErr is returned and nothing is destroyed.
func (s *Service) failClaimed(ctx context.Context, cl store.Claim, id string, afterErr error) (lost bool, _ error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	deleted, err := s.Store.DeleteClaim(dctx, cl)
	switch {
	case err != nil:
		return false, errors.Join(afterErr, fmt.Errorf("delete idempotency claim: %w", err))
	case !deleted:
		return true, nil
	}
	s.destroyDetached(ctx, id, "finishing its create failed")
	return false, afterErr
}

// mayAdopt reports whether the key of req may still settle on sandbox id:
// it already has, or its holder has not chosen another sandbox (a holder
// that took over a claim naming id adopts it if it is whole). When the
// store cannot say, it answers true: a sandbox left to its timeout is
// better than one destroyed under a caller it was given.
func (s *Service) mayAdopt(ctx context.Context, req store.ClaimRequest, id string) bool {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	c, err := s.Store.PeekClaim(pctx, req)
	if err != nil {
		s.Logger.Warn("idempotency: cannot tell whether a sandbox made under a lost claim is some caller's; keeping it until its timeout", "sandbox", id, "err", err)
		return true
	}
	return (c.Outcome == store.ClaimReady || c.Outcome == store.ClaimPending) && c.TargetID == id
}

// createThen creates (under cl when not nil) and runs r.After; a failed
// After destroys the sandbox.
func (s *Service) createThen(ctx context.Context, r CreateOnceRequest, cl *store.Claim) (*Created, error) {
	created, err := s.create(ctx, r.Create, "", cl)
	if err != nil {
		return nil, err
	}
	if r.After != nil {
		if err := r.After(ctx, created.Sandbox); err != nil {
			s.destroyDetached(ctx, created.ID, "finishing its create failed")
			return nil, err
		}
	}
	return created, nil
}

// destroyDetached destroys a sandbox this service made on behalf of a call
// that is failing; the call's context may be cancelled already.
func (s *Service) destroyDetached(ctx context.Context, id, why string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.destroy(dctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		s.Logger.Error("could not destroy a sandbox nobody will be given; the reconciler retries", "sandbox", id, "why", why, "err", err)
	}
}

// claimID is the id a create under cl makes: derived from the claim when
// r asks for it, else "" (a fresh random id).
func claimID(r CreateOnceRequest, cl store.Claim) string {
	if !r.DeriveID {
		return ""
	}
	var nonce [8]byte
	binary.BigEndian.PutUint64(nonce[:], uint64(cl.LockedUntil.UnixNano()))
	h := sha256.New()
	h.Write([]byte(cl.Scope + "\x00" + cl.Fingerprint + "\x00"))
	h.Write(nonce[:])
	return "sb-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// claimTarget reads the sandbox a claim names. live is false only when the
// sandbox is definitely not an answer: it does not exist, its destroy
// began, it is still being created (a half-made sandbox the reconciler may
// roll back), or the caller may not see it. Any other failure to read is
// an error (ErrUnavailable): it says nothing about the sandbox, and taking
// it for "gone" would make a second one.
func (s *Service) claimTarget(ctx context.Context, c Caller, id string) (Sandbox, bool, error) {
	row, err := s.Store.GetSandbox(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Sandbox{}, false, nil
	case err != nil:
		return Sandbox{}, false, fmt.Errorf("%w: read the sandbox an idempotency claim names: %w", ErrUnavailable, err)
	}
	if !row.DestroyingSince.IsZero() || row.State == store.StateCreating || !c.canSee(row.Owner) {
		return Sandbox{}, false, nil
	}
	return fromRow(row), true, nil
}

// claimHold keeps a claim's lock extended while its work runs.
type claimHold struct {
	done chan struct{}
	wg   sync.WaitGroup
	lost atomic.Bool
}

// holdClaim extends cl's lock every third of ttl until stop, whatever
// happens to the caller's context (the work decides when it is done, and a
// lock that lapses under live work lets a retry do it a second time). A
// failed extension is retried; the claim counts as lost when the store
// says another holder took it, or when no extension has succeeded for ttl
// by the monotonic clock (heldUntil starts at acquiredAt + ttl, taken
// before the claim was written, so it never runs past the store's lock).
func (s *Service) holdClaim(ctx context.Context, cl store.Claim, ttl time.Duration, acquiredAt time.Time) *claimHold {
	h := &claimHold{done: make(chan struct{})}
	every := max(ttl/3, 10*time.Millisecond)
	retry := max(ttl/20, 5*time.Millisecond)
	heldUntil := acquiredAt.Add(ttl)
	detached := context.WithoutCancel(ctx)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
			}
			before := time.Now()
			ectx, cancel := context.WithTimeout(detached, every)
			err := s.Store.ExtendClaim(ectx, cl, ttl)
			cancel()
			switch {
			case err == nil:
				heldUntil = before.Add(ttl)
				t.Reset(every)
			case errors.Is(err, store.ErrClaimLost):
				h.lost.Store(true)
				return
			case time.Now().After(heldUntil):
				s.Logger.Warn("idempotency: a claim's lock ran out while its extensions failed", "scope", cl.Scope, "err", err)
				h.lost.Store(true)
				return
			default:
				s.Logger.Warn("idempotency: could not extend a claim's lock; retrying", "scope", cl.Scope, "err", err)
				t.Reset(retry)
			}
		}
	}()
	return h
}

// stop ends the hold and reports whether the claim was lost.
func (h *claimHold) stop() (lost bool) {
	close(h.done)
	h.wg.Wait()
	return h.lost.Load()
}

// pollInterval is how often a duplicate waits for the first call's work.
const pollInterval = 25 * time.Millisecond

// awaitClaim polls a pending claim with cheap reads until it is no longer
// pending.
func (s *Service) awaitClaim(ctx context.Context, req store.ClaimRequest) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		c, err := s.Store.PeekClaim(ctx, req)
		if err != nil {
			return s.mapStoreErr(err, "")
		}
		if c.Outcome != store.ClaimPending {
			return nil
		}
	}
}
