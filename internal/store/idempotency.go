package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ClaimRequest identifies a request for Claim and PeekClaim.
type ClaimRequest struct {
	Scope       string // the API operation, e.g. "e2b.create" or "v1.create"
	Fingerprint string // the idempotency key or the fingerprint of the normalized body
	// RequestHash identifies the request body. A live claim for the same key with another
	// hash is ErrIdempotencyKeyReused ("same Idempotency-Key, different body").
	RequestHash string
	// PendingTTL is how long an acquired claim stays locked before another caller may take
	// it over (Claim only; must be > 0).
	PendingTTL time.Duration
}

// ClaimOutcome says what the caller of Claim should do.
type ClaimOutcome int

const (
	// ClaimAcquired: do the work, then Complete (or DeleteClaim to roll back).
	ClaimAcquired ClaimOutcome = iota + 1
	// ClaimReady: the work was done; return Claim.TargetID and do nothing.
	ClaimReady
	// ClaimPending: another caller holds the claim until Claim.LockedUntil; poll
	// (PeekClaim is a cheap read) and Claim again when it is Ready or the lock expired.
	ClaimPending
	// ClaimAvailable (PeekClaim only): nothing live holds the key; Claim would acquire it.
	ClaimAvailable
)

func (o ClaimOutcome) String() string {
	switch o {
	case ClaimAcquired:
		return "acquired"
	case ClaimReady:
		return "ready"
	case ClaimPending:
		return "pending"
	case ClaimAvailable:
		return "available"
	}
	return "ClaimOutcome(" + strconv.Itoa(int(o)) + ")"
}

// Claim is the result of Claim or PeekClaim.
type Claim struct {
	Scope, Fingerprint string
	Outcome            ClaimOutcome
	// Reclaimed (with ClaimAcquired): the key was held by a stale claim (an expired lock,
	// or a ready result past its replay window) that this call took over. The previous
	// holder may have left partial work behind.
	Reclaimed bool
	// TargetID is, with ClaimReady, the answer; with ClaimPending (from
	// PeekClaim), what the holder has attached so far ("" if nothing).
	TargetID string
	// PreviousTarget (with Reclaimed): the target the stale claim's holder
	// had attached (AttachClaimTarget) before it died or timed out. Its work
	// may have finished without Complete; the new holder checks whether
	// that target exists before doing the work again.
	PreviousTarget string
	LockedUntil    time.Time // ClaimAcquired, ClaimPending
	ReplayUntil    time.Time // ClaimReady
	// token fences Complete and DeleteClaim: they act only while this claim holds the key.
	token int64
}

type claimRow struct {
	state       string
	token       int64
	requestHash string
	lockedUntil int64
	replayUntil int64
	targetID    string
}

const (
	claimPending = "pending"
	claimReady   = "ready"
)

// outcome classifies a stored claim row at time now (unix ms): a pending row is live while
// now < locked_until, a ready row while now < replay_until; anything else is stale.
func (r claimRow) outcome(now int64) ClaimOutcome {
	switch {
	case r.state == claimPending && now < r.lockedUntil:
		return ClaimPending
	case r.state == claimReady && now < r.replayUntil:
		return ClaimReady
	}
	return ClaimAvailable
}

func (r claimRow) claim(req ClaimRequest, outcome ClaimOutcome) Claim {
	c := Claim{Scope: req.Scope, Fingerprint: req.Fingerprint, Outcome: outcome, token: r.token}
	switch outcome {
	case ClaimPending:
		c.LockedUntil = time.UnixMilli(r.lockedUntil).UTC()
		c.TargetID = r.targetID
	case ClaimAcquired:
		c.LockedUntil = time.UnixMilli(r.lockedUntil).UTC()
	case ClaimReady:
		c.TargetID = r.targetID
		c.ReplayUntil = time.UnixMilli(r.replayUntil).UTC()
	}
	return c
}

func readClaimRow(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, scope, fingerprint string) (claimRow, error) {
	var r claimRow
	err := q.QueryRowContext(ctx, `SELECT state, token, request_hash, locked_until, replay_until, target_id
		FROM request_idempotency WHERE scope = ? AND fingerprint = ?`, scope, fingerprint).
		Scan(&r.state, &r.token, &r.requestHash, &r.lockedUntil, &r.replayUntil, &r.targetID)
	return r, err
}

// Claim claims the idempotency key (req.Scope, req.Fingerprint) at the store clock's now,
// in one write transaction: an INSERT … ON CONFLICT DO NOTHING, then a read of the row.
//
//   - no row: this call inserts a pending claim locked for PendingTTL → ClaimAcquired.
//   - ready and within its replay window → ClaimReady with the TargetID to return.
//   - pending and still locked → ClaimPending with LockedUntil.
//   - stale (pending past its lock, or ready past its replay window): the row is reset to
//     pending with a fresh lock → ClaimAcquired with Reclaimed set; a stale pending
//     row's target stays attached (PreviousTarget) until the new holder attaches its own.
//
// A live row (pending or ready) with another RequestHash is ErrIdempotencyKeyReused.
// Of concurrent callers exactly one acquires. Claim never waits for a lock.
func (s *Store) Claim(ctx context.Context, req ClaimRequest) (Claim, error) {
	if req.Scope == "" || req.Fingerprint == "" {
		return Claim{}, invalidf("claim: empty scope or fingerprint")
	}
	if req.PendingTTL <= 0 {
		return Claim{}, invalidf("claim: pending TTL %v", req.PendingTTL)
	}
	var c Claim
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		fresh := claimRow{
			state:       claimPending,
			token:       newToken(),
			requestHash: req.RequestHash,
			lockedUntil: now + req.PendingTTL.Milliseconds(),
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO request_idempotency
			(scope, fingerprint, state, token, request_hash, locked_until, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			req.Scope, req.Fingerprint, fresh.state, fresh.token, fresh.requestHash, fresh.lockedUntil, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			c = fresh.claim(req, ClaimAcquired)
			return err
		}
		cur, err := readClaimRow(ctx, tx, req.Scope, req.Fingerprint)
		if err != nil {
			return err
		}
		if out := cur.outcome(now); out != ClaimAvailable {
			if cur.requestHash != req.RequestHash {
				return ErrIdempotencyKeyReused
			}
			c = cur.claim(req, out)
			return nil
		}
		// A stale pending claim keeps its target: if this holder fails
		// before it settles what became of it, the next one still knows
		// which sandbox to look for. A stale ready claim's target was
		// answered already; a new claim starts without one.
		target := ""
		if cur.state == claimPending {
			target = cur.targetID
		}
		_, err = tx.ExecContext(ctx, `UPDATE request_idempotency
			SET state = ?, token = ?, request_hash = ?, locked_until = ?, replay_until = 0,
				target_id = ?, created_at = ?
			WHERE scope = ? AND fingerprint = ?`,
			fresh.state, fresh.token, fresh.requestHash, fresh.lockedUntil, target, now, req.Scope, req.Fingerprint)
		c = fresh.claim(req, ClaimAcquired)
		c.Reclaimed = true
		c.PreviousTarget = target
		return err
	})
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s/%s: %w", req.Scope, req.Fingerprint, err)
	}
	return c, nil
}

// PeekClaim reports, from the read pool and without writing, what Claim would answer now:
// ClaimReady, ClaimPending, or ClaimAvailable for a missing or stale key (req.PendingTTL
// is ignored). It is the cheap poll for a caller that got ClaimPending. The returned
// Claim cannot be completed or deleted.
func (s *Store) PeekClaim(ctx context.Context, req ClaimRequest) (Claim, error) {
	cur, err := readClaimRow(ctx, s.reader, req.Scope, req.Fingerprint)
	if errors.Is(err, sql.ErrNoRows) {
		return Claim{Scope: req.Scope, Fingerprint: req.Fingerprint, Outcome: ClaimAvailable}, nil
	}
	if err != nil {
		return Claim{}, fmt.Errorf("peek claim %s/%s: %w", req.Scope, req.Fingerprint, err)
	}
	out := cur.outcome(s.nowMillis())
	if out != ClaimAvailable && cur.requestHash != req.RequestHash {
		return Claim{}, fmt.Errorf("peek claim %s/%s: %w", req.Scope, req.Fingerprint, ErrIdempotencyKeyReused)
	}
	c := cur.claim(req, out)
	c.token = 0
	return c, nil
}

// Complete marks the acquired claim c ready with targetID, replayable for replayWindow from
// now. It succeeds only while c still holds the key (even past its lock, if nobody took it
// over); otherwise it returns ErrClaimLost and the caller should undo its work. Completing
// twice is fine (the second call refreshes the replay window).
func (s *Store) Complete(ctx context.Context, c Claim, targetID string, replayWindow time.Duration) error {
	if targetID == "" || replayWindow <= 0 {
		return invalidf("complete claim: target %q, replay window %v", targetID, replayWindow)
	}
	n, err := s.exec(ctx, `UPDATE request_idempotency
		SET state = ?, target_id = ?, replay_until = ?, locked_until = 0
		WHERE scope = ? AND fingerprint = ? AND token = ?`,
		claimReady, targetID, s.nowMillis()+replayWindow.Milliseconds(), c.Scope, c.Fingerprint, c.token)
	if err == nil && n == 0 {
		err = ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("complete claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return nil
}

// AttachClaimTarget records, on the acquired claim c while it is pending,
// the id of the resource its work is making, before the work has a side
// effect. A holder that dies mid-work then leaves a claim that names its
// target: the next holder (see Claim.PreviousTarget) adopts the target if
// it exists instead of making a second one. ErrClaimLost if c no longer
// holds the key.
func (s *Store) AttachClaimTarget(ctx context.Context, c Claim, targetID string) error {
	if targetID == "" {
		return invalidf("attach claim target: empty target")
	}
	n, err := s.exec(ctx, `UPDATE request_idempotency SET target_id = ?
		WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?`,
		targetID, c.Scope, c.Fingerprint, c.token, claimPending)
	if err == nil && n == 0 {
		err = ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("attach target to claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return nil
}

// ExtendClaim pushes the lock of the acquired claim c to ttl from now,
// while its holder is still working: a retry then keeps waiting instead of
// taking the claim over and doing the work a second time. ErrClaimLost if c
// no longer holds the key or is no longer pending.
func (s *Store) ExtendClaim(ctx context.Context, c Claim, ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("extend claim: ttl %v", ttl)
	}
	n, err := s.exec(ctx, `UPDATE request_idempotency SET locked_until = ?
		WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?`,
		s.nowMillis()+ttl.Milliseconds(), c.Scope, c.Fingerprint, c.token, claimPending)
	if err == nil && n == 0 {
		err = ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("extend claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return nil
}

// ReleasePendingClaims ends the lock of every pending claim at the store
// clock's now and returns how many. Call it only at startup, before
// serving: every pending claim then belongs to a process that is gone, and
// its callers' retries should take it over at once (adopting an attached
// target that survived) instead of waiting out the lock.
func (s *Store) ReleasePendingClaims(ctx context.Context) (int64, error) {
	n, err := s.exec(ctx, `UPDATE request_idempotency SET locked_until = ?
		WHERE state = ? AND locked_until > ?`, s.nowMillis(), claimPending, s.nowMillis())
	if err != nil {
		return 0, fmt.Errorf("release pending claims: %w", err)
	}
	return n, nil
}

// DeleteClaim removes the claim c when its work rolled back, so a retry starts fresh, and
// reports whether it deleted. It only deletes while c still holds the key: it never
// removes a claim another caller took over (false), and a repeat finds nothing (false).
func (s *Store) DeleteClaim(ctx context.Context, c Claim) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM request_idempotency WHERE scope = ? AND fingerprint = ? AND token = ?`,
		c.Scope, c.Fingerprint, c.token)
	if err != nil {
		return false, fmt.Errorf("delete claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return n == 1, nil
}

// ReleaseClaim ends the lock of the acquired claim c now, keeping its attached target:
// for a holder that has to give up before it could settle whether its target exists (a
// failed read), so that a retry takes the claim over at once and looks again instead of
// waiting out the lock. It is fenced like Complete; a claim c no longer holds is left
// alone (nil error).
func (s *Store) ReleaseClaim(ctx context.Context, c Claim) error {
	_, err := s.exec(ctx, `UPDATE request_idempotency SET locked_until = ?
		WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?`,
		s.nowMillis(), c.Scope, c.Fingerprint, c.token, claimPending)
	if err != nil {
		return fmt.Errorf("release claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return nil
}

// StaleClaim is a claim that is stale at the store clock's now: a pending claim whose lock
// expired (its holder died or lost it), or a ready claim past its replay window.
type StaleClaim struct {
	Claim
	// Pending: the claim's work never completed; TargetID is what its holder
	// attached ("" if it attached nothing), which a retry would adopt.
	Pending  bool
	TargetID string
}

// ListStaleClaims returns up to limit claims that are stale now, oldest first, for the
// pruner to decide on. Each can be deleted with DeleteStaleClaim. A pending claim whose
// target has a row is left out: a retry needs it to adopt that sandbox, and however many
// there are they never crowd the prunable ones out of a page (they are listed again once
// their row is gone).
func (s *Store) ListStaleClaims(ctx context.Context, limit int) ([]StaleClaim, error) {
	if limit <= 0 {
		limit = MaxListLimit
	}
	now := s.nowMillis()
	rows, err := s.reader.QueryContext(ctx, `SELECT scope, fingerprint, state, token, target_id
		FROM request_idempotency AS c
		WHERE ((state = ? AND locked_until <= ?) OR (state = ? AND replay_until <= ?))
			AND NOT (state = ? AND EXISTS (SELECT 1 FROM sandboxes WHERE id = c.target_id))
		ORDER BY created_at LIMIT ?`, claimPending, now, claimReady, now, claimPending, limit)
	if err != nil {
		return nil, fmt.Errorf("list stale claims: %w", err)
	}
	defer rows.Close()
	var out []StaleClaim
	for rows.Next() {
		var (
			sc    StaleClaim
			state string
		)
		if err := rows.Scan(&sc.Scope, &sc.Fingerprint, &state, &sc.token, &sc.TargetID); err != nil {
			return nil, fmt.Errorf("list stale claims: %w", err)
		}
		sc.Pending = state == claimPending
		sc.Outcome = ClaimAvailable
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list stale claims: %w", err)
	}
	return out, nil
}

// DeleteStaleClaim deletes c if it is still the same claim (nobody took it over since it
// was listed) and still stale now. It reports whether it deleted.
func (s *Store) DeleteStaleClaim(ctx context.Context, c StaleClaim) (bool, error) {
	now := s.nowMillis()
	n, err := s.exec(ctx, `DELETE FROM request_idempotency
		WHERE scope = ? AND fingerprint = ? AND token = ?
			AND ((state = ? AND locked_until <= ?) OR (state = ? AND replay_until <= ?))`,
		c.Scope, c.Fingerprint, c.token, claimPending, now, claimReady, now)
	if err != nil {
		return false, fmt.Errorf("delete stale claim %s/%s: %w", c.Scope, c.Fingerprint, err)
	}
	return n == 1, nil
}
