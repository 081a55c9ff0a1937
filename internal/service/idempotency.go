package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Once describes one idempotent operation: the work that runs at most once
// per (Scope, Fingerprint) while a claim holds.
type Once struct {
	Scope       string
	Fingerprint string
	// RequestHash identifies the request body; a claim with the same
	// fingerprint and another hash is ErrIdempotencyKeyReused. Empty skips
	// the check (the E2B body fingerprint is itself the body).
	RequestHash string
	// PendingTTL bounds how long a claim stays locked while its work runs;
	// a claim whose holder died is retaken after it.
	PendingTTL time.Duration
	// ReplayWindow is how long a completed claim keeps answering with its
	// result.
	ReplayWindow time.Duration
	// Live is asked about a claim's target before it is replayed or
	// adopted (default: SandboxLive). A target that is gone (a sandbox
	// killed inside the replay window, or rolled back after a crash) is
	// not an answer to a create: the claim is dropped and the work runs
	// again.
	Live func(ctx context.Context, targetID string) bool
}

type claimKey struct{}

// ClaimFrom returns the claim the work of Idempotent runs under, from the
// context Idempotent passes to it: work that derives a resource id from
// its claim (the E2B facade) gets the same id for every caller that shares
// the claim, and a new one for a later claim.
func ClaimFrom(ctx context.Context) (store.Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(store.Claim)
	return c, ok
}

// holdClaim keeps extending c's lock while its work runs (every third of
// ttl), so work slower than the pending TTL is not mistaken for a dead
// holder and done twice. The returned func stops it and waits.
func (s *Service) holdClaim(ctx context.Context, c store.Claim, ttl time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(ttl/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Store.ExtendClaim(context.WithoutCancel(ctx), c, ttl); err != nil {
					s.Logger.Warn("idempotency: could not extend a claim's lock", "scope", c.Scope, "err", err)
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// attachTarget records the id a create under an idempotency claim is
// about to make (see store.AttachClaimTarget). Outside a claim it does
// nothing.
func (s *Service) attachTarget(ctx context.Context, id string) error {
	c, ok := ClaimFrom(ctx)
	if !ok {
		return nil
	}
	return s.Store.AttachClaimTarget(ctx, c, id)
}

// SandboxLive reports whether a sandbox exists and is not half-made: the
// Live check of create claims.
func (s *Service) SandboxLive(ctx context.Context, id string) bool {
	row, err := s.Store.GetSandbox(ctx, id)
	return err == nil && row.State != store.StateCreating
}

// pollInterval is how often a duplicate waits for the first call's work.
const pollInterval = 25 * time.Millisecond

// Idempotent runs work at most once for o's key while a claim holds: the
// first caller runs it; a concurrent duplicate waits for it and gets the
// same target id; a duplicate inside the replay window gets the same target
// id at once (replayed = true). When work fails the claim is deleted, so a
// retry starts fresh. The claim is fenced by a token: a caller whose lock
// expired cannot complete or delete a newer caller's claim.
func (s *Service) Idempotent(ctx context.Context, o Once, work func(ctx context.Context) (targetID string, err error)) (targetID string, replayed bool, err error) {
	req := store.ClaimRequest{Scope: o.Scope, Fingerprint: o.Fingerprint, RequestHash: o.RequestHash, PendingTTL: o.PendingTTL}
	live := o.Live
	if live == nil {
		live = s.SandboxLive
	}
	for {
		c, err := s.Store.Claim(ctx, req)
		if err != nil {
			return "", false, s.mapStoreErr(err, "")
		}
		switch c.Outcome {
		case store.ClaimAcquired:
			if c.Reclaimed && c.PreviousTarget != "" && live(ctx, c.PreviousTarget) {
				// The previous holder made the target and died (or timed
				// out) before completing: adopt it, don't make another.
				if err := s.Store.Complete(ctx, c, c.PreviousTarget, o.ReplayWindow); err != nil && !errors.Is(err, store.ErrClaimLost) {
					return "", false, fmt.Errorf("complete idempotency claim: %w", err)
				}
				return c.PreviousTarget, true, nil
			}
			stop := s.holdClaim(ctx, c, o.PendingTTL)
			id, werr := work(context.WithValue(ctx, claimKey{}, c))
			stop()
			if werr != nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
				derr := s.Store.DeleteClaim(dctx, c)
				cancel()
				if derr != nil && !errors.Is(derr, store.ErrClaimLost) {
					return "", false, errors.Join(werr, fmt.Errorf("delete idempotency claim: %w", derr))
				}
				return "", false, werr
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			if err := s.Store.Complete(cctx, c, id, o.ReplayWindow); err != nil && !errors.Is(err, store.ErrClaimLost) {
				return "", false, fmt.Errorf("complete idempotency claim: %w", err)
			}
			return id, false, nil
		case store.ClaimReady:
			if live(ctx, c.TargetID) {
				return c.TargetID, true, nil
			}
			// Fenced by the claim's token: of several callers that find
			// the target gone, one deletes, and all claim again.
			if err := s.Store.DeleteClaim(ctx, c); err != nil {
				return "", false, fmt.Errorf("drop idempotency claim of a gone target: %w", err)
			}
		case store.ClaimPending:
			// Wait for the holder: poll with cheap reads, and claim again
			// once its work is ready or its lock has expired.
			if err := s.awaitClaim(ctx, req); err != nil {
				return "", false, err
			}
		default:
			return "", false, fmt.Errorf("idempotency claim: unknown outcome %v", c.Outcome)
		}
	}
}

// awaitClaim polls a pending claim until it is no longer pending.
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
