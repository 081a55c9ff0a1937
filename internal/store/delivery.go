package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Deliveries: claims of the creates that have no Idempotency-Key.
//
// Such a create is never collapsed with another while its client waits, so
// its claim is not keyed by the request alone: each create has its own row,
// keyed (scope, fingerprint + "/" + target). The row is what lets a retry
// adopt the sandbox of a create whose client went away, and what lets the
// reconciler destroy it when nobody does:
//
//	BeginDelivery ─▶ inflight ──HandOver──▶ (row deleted: the answer is being written)
//	                    │  ▲                        │ the write failed
//	          Abandon   │  │ AdoptUndelivered       ▼
//	                    ▼  │                  Reoffer
//	               undelivered ◀────────────────────┘
//	                    │ replay_until passed
//	                    ▼
//	        ExpireUndelivered: row deleted, sandbox marked for destroy
//
// Every transition is one conditional statement under the writer, fenced by
// the row's token, so of racing adopters exactly one takes a row, and an
// adoption racing the expiry either adopts (the expiry then finds nothing)
// or finds the row gone.
const (
	claimInflight    = "inflight"
	claimUndelivered = "undelivered"
)

// deliveryKey is the fingerprint column of the delivery row of target.
// Fingerprints are hex, and '/' sorts just below '0', so the rows of one
// fingerprint are the range (fp + "/", fp + "0") of the primary key.
func deliveryKey(fingerprint, target string) string { return fingerprint + "/" + target }

func deliveryRange(fingerprint string) (lo, hi string) { return fingerprint + "/", fingerprint + "0" }

// BeginDelivery records, before a create's first side effect, that target
// is being made for a client that is still waiting (inflight). While it is
// inflight nobody else waits on it or adopts it; a process that dies leaves
// it inflight, and the next start turns it undelivered (AbandonInflight).
// window is how long the row stays adoptable once undelivered.
func (s *Store) BeginDelivery(ctx context.Context, scope, fingerprint, target string, window time.Duration) (Claim, error) {
	c, err := NewDelivery(scope, fingerprint, target)
	if err != nil {
		return Claim{}, err
	}
	if err := s.write(ctx, func(tx *sql.Tx) error { return insertDelivery(ctx, tx, c, window, s.nowMillis()) }); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// NewDelivery is the inflight delivery claim of target that BeginDelivery
// would write, not yet written: ClaimPooled writes it with its claim.
func NewDelivery(scope, fingerprint, target string) (Claim, error) {
	if scope == "" || fingerprint == "" || target == "" {
		return Claim{}, invalidf("begin delivery: scope %q, fingerprint %q, target %q", scope, fingerprint, target)
	}
	return Claim{Scope: scope, Fingerprint: deliveryKey(fingerprint, target), Outcome: ClaimAcquired, TargetID: target, token: newToken()}, nil
}

func insertDelivery(ctx context.Context, tx *sql.Tx, c Claim, window time.Duration, now int64) error {
	if window <= 0 {
		return invalidf("begin delivery of %s: window %v", c.TargetID, window)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO request_idempotency
		(scope, fingerprint, state, token, target_id, window_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.Scope, c.Fingerprint, claimInflight, c.token, c.TargetID, window.Milliseconds(), now); err != nil {
		return fmt.Errorf("begin delivery of %s: %w", c.TargetID, err)
	}
	return nil
}

// HasUndelivered reports, from the read pool, whether fingerprint has an
// undelivered create inside its window now: the cheap check every create
// makes before it tries AdoptUndelivered (a write).
func (s *Store) HasUndelivered(ctx context.Context, scope, fingerprint string) (bool, error) {
	lo, hi := deliveryRange(fingerprint)
	var one int
	err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM request_idempotency
		WHERE scope = ? AND fingerprint > ? AND fingerprint < ? AND state = ? AND replay_until > ? LIMIT 1`,
		scope, lo, hi, claimUndelivered, s.nowMillis()).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for undelivered creates: %w", err)
	}
	return true, nil
}

// AdoptUndelivered takes one undelivered create of fingerprint that is
// still inside its window (the one closest to expiry), making it inflight
// for the caller under a fresh token: ok is false when there is none. Of
// concurrent callers each row goes to exactly one.
func (s *Store) AdoptUndelivered(ctx context.Context, scope, fingerprint string) (c Claim, ok bool, err error) {
	lo, hi := deliveryRange(fingerprint)
	token := newToken()
	err = s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		return tx.QueryRowContext(ctx, `UPDATE request_idempotency
			SET state = ?, token = ?, replay_until = 0
			WHERE scope = ? AND fingerprint = (
				SELECT fingerprint FROM request_idempotency
				WHERE scope = ? AND fingerprint > ? AND fingerprint < ? AND state = ? AND replay_until > ?
				ORDER BY replay_until LIMIT 1)
			RETURNING fingerprint, target_id`,
			claimInflight, token, scope, scope, lo, hi, claimUndelivered, now).Scan(&c.Fingerprint, &c.TargetID)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Claim{}, false, nil
	case err != nil:
		return Claim{}, false, fmt.Errorf("adopt an undelivered create: %w", err)
	}
	c.Scope, c.Outcome, c.token = scope, ClaimAcquired, token
	return c, true, nil
}

// Abandon marks the inflight create c undelivered: its client went away
// before the answer reached it. It stays adoptable for its window from now.
// ok is false, with nothing changed, when c is no longer this holder's
// inflight row (handed over, abandoned already, adopted, or gone), or when
// its sandbox has no row yet: an adopter must be able to take "no row" for
// "rolled back", so a create is offered only once its row exists.
func (s *Store) Abandon(ctx context.Context, c Claim) (ok bool, err error) {
	n, err := s.exec(ctx, `UPDATE request_idempotency SET state = ?, replay_until = ? + window_ms
		WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?
			AND EXISTS (SELECT 1 FROM sandboxes WHERE id = request_idempotency.target_id)`,
		claimUndelivered, s.nowMillis(), c.Scope, c.Fingerprint, c.token, claimInflight)
	if err != nil {
		return false, fmt.Errorf("abandon create of %s: %w", c.TargetID, err)
	}
	return n == 1, nil
}

// HandOver deletes the inflight row c just before its answer is written:
// from then on the sandbox is the client's, never adopted nor expired. ok
// is false, with nothing changed, when c is no longer this holder's
// inflight row (abandoned meanwhile: the answer must not be written).
func (s *Store) HandOver(ctx context.Context, c Claim) (ok bool, err error) {
	n, err := s.exec(ctx, `DELETE FROM request_idempotency
		WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?`,
		c.Scope, c.Fingerprint, c.token, claimInflight)
	if err != nil {
		return false, fmt.Errorf("hand over create of %s: %w", c.TargetID, err)
	}
	return n == 1, nil
}

// Reoffer records that the answer for c, handed over, never reached its
// client (the write failed): the sandbox is undelivered again, adoptable
// for window from now.
func (s *Store) Reoffer(ctx context.Context, c Claim, window time.Duration) error {
	if window <= 0 || c.TargetID == "" {
		return invalidf("reoffer: target %q, window %v", c.TargetID, window)
	}
	now := s.nowMillis()
	_, err := s.exec(ctx, `INSERT INTO request_idempotency
		(scope, fingerprint, state, token, target_id, window_ms, replay_until, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Scope, c.Fingerprint, claimUndelivered, newToken(), c.TargetID, window.Milliseconds(), now+window.Milliseconds(), now)
	if err != nil {
		return fmt.Errorf("reoffer create of %s: %w", c.TargetID, err)
	}
	return nil
}

// AbandonInflight turns every inflight row undelivered, adoptable for its
// window from now, and returns how many. Call it only at startup, before
// serving: every inflight row then belongs to a process that died before
// it handed the answer over.
func (s *Store) AbandonInflight(ctx context.Context) (int64, error) {
	n, err := s.exec(ctx, `UPDATE request_idempotency SET state = ?, replay_until = ? + window_ms WHERE state = ?`,
		claimUndelivered, s.nowMillis(), claimInflight)
	if err != nil {
		return 0, fmt.Errorf("abandon inflight creates: %w", err)
	}
	return n, nil
}

// ExpireOutcome says what ExpireUndelivered did.
type ExpireOutcome int

const (
	// ExpireNothing: the row is not (or no longer) an undelivered create past
	// its window: adopted, not yet expired, or gone. Nothing changed.
	ExpireNothing ExpireOutcome = iota
	// ExpireDestroy: the row is gone and its sandbox is marked for destroy
	// (destroying_since): the caller finishes the destroy, and if it cannot,
	// the reconciler does.
	ExpireDestroy
	// ExpireGone: the row is gone; its sandbox did not exist, or was being
	// destroyed already.
	ExpireGone
	// ExpireBusy: the sandbox is still being created; nothing changed, try
	// again later.
	ExpireBusy
)

// ExpireUndelivered ends the undelivered create c once its window has
// passed at the store clock's now, in one write: the row is deleted and its
// sandbox marked for destroy. The row is re-checked under the writer (same
// token, still undelivered, still past its window), so a create adopted in
// between is left alone; a sandbox still being created is left for later.
func (s *Store) ExpireUndelivered(ctx context.Context, c Claim) (ExpireOutcome, error) {
	out := ExpireNothing
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		var target string
		err := tx.QueryRowContext(ctx, `SELECT target_id FROM request_idempotency
			WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ? AND replay_until <= ?`,
			c.Scope, c.Fingerprint, c.token, claimUndelivered, now).Scan(&target)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		var state, owner string
		var destroying sql.NullInt64
		err = tx.QueryRowContext(ctx, `SELECT state, owner, destroying_since FROM sandboxes WHERE id = ?`, target).Scan(&state, &owner, &destroying)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out = ExpireGone
		case err != nil:
			return err
		case destroying.Valid:
			out = ExpireGone
		case owner == PoolOwner:
			// Never this create's: a claim writes its delivery row with
			// the claim, so this row is no answer (the row goes, the idle
			// sandbox stays the pool's).
			out = ExpireGone
		case state == string(StateCreating):
			out = ExpireBusy
			return nil
		default:
			if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET destroying_since = ? WHERE id = ?`, now, target); err != nil {
				return err
			}
			out = ExpireDestroy
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM request_idempotency WHERE scope = ? AND fingerprint = ? AND token = ?`,
			c.Scope, c.Fingerprint, c.token)
		return err
	})
	if err != nil {
		return ExpireNothing, fmt.Errorf("expire undelivered create of %s: %w", c.TargetID, err)
	}
	return out, nil
}

// ListExpiredUndelivered returns up to limit undelivered creates past their
// window at the store clock's now, for ExpireUndelivered.
func (s *Store) ListExpiredUndelivered(ctx context.Context, limit int) ([]Claim, error) {
	if limit <= 0 {
		limit = MaxListLimit
	}
	// The state is a literal so that the partial index applies (SQLite
	// cannot prove a bound parameter implies the index's WHERE).
	rows, err := s.reader.QueryContext(ctx, `SELECT scope, fingerprint, token, target_id FROM request_idempotency
		WHERE state = '`+claimUndelivered+`' AND replay_until <= ? ORDER BY replay_until LIMIT ?`, s.nowMillis(), limit)
	if err != nil {
		return nil, fmt.Errorf("list expired undelivered creates: %w", err)
	}
	defer rows.Close()
	var out []Claim
	for rows.Next() {
		c := Claim{Outcome: ClaimAvailable}
		if err := rows.Scan(&c.Scope, &c.Fingerprint, &c.token, &c.TargetID); err != nil {
			return nil, fmt.Errorf("list expired undelivered creates: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list expired undelivered creates: %w", err)
	}
	return out, nil
}
