package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// SeedTapSlots makes sure slots 0..n-1 exist in the TAP pool. It is idempotent and never
// removes slots (so never frees or orphans an allocation); call it at every start.
func (s *Store) SeedTapSlots(ctx context.Context, n int) error {
	if n < 0 {
		return invalidf("seed tap slots: n = %d", n)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `WITH RECURSIVE seq(slot) AS (
				SELECT 0 WHERE ? > 0
				UNION ALL SELECT slot + 1 FROM seq WHERE slot + 1 < ?
			)
			INSERT INTO firecracker_tap_pool (slot) SELECT slot FROM seq WHERE true
			ON CONFLICT (slot) DO NOTHING`, n, n)
		return err
	})
	if err != nil {
		return fmt.Errorf("seed %d tap slots: %w", n, err)
	}
	return nil
}

// AllocateTapSlot gives sandboxID the lowest free TAP slot, in one write transaction.
// It is idempotent: if sandboxID already holds a slot (the partial unique index allows one
// per sandbox), that slot is returned and nothing changes, so a retry never takes a second
// slot. Of concurrent callers, at most one per free slot succeeds. When no slot is free the
// error is a *PoolExhaustedError (errors.Is ErrPoolExhausted).
func (s *Store) AllocateTapSlot(ctx context.Context, sandboxID string) (int, error) {
	if sandboxID == "" {
		return 0, invalidf("allocate tap slot: empty sandbox id")
	}
	var slot int
	err := s.write(ctx, func(tx *sql.Tx) error {
		// UPDATE OR IGNORE: if sandboxID already holds a slot the unique index rejects the
		// update and no row changes; the read below then finds the held slot.
		err := tx.QueryRowContext(ctx, `UPDATE OR IGNORE firecracker_tap_pool
			SET sandbox_id = ?, allocated_at = ?
			WHERE slot = (SELECT slot FROM firecracker_tap_pool WHERE sandbox_id IS NULL ORDER BY slot LIMIT 1)
			RETURNING slot`, sandboxID, s.nowMillis()).Scan(&slot)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		err = tx.QueryRowContext(ctx, `SELECT slot FROM firecracker_tap_pool WHERE sandbox_id = ?`,
			sandboxID).Scan(&slot)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var total int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM firecracker_tap_pool`).Scan(&total); err != nil {
			return err
		}
		return &PoolExhaustedError{Pool: "tap-slot", Lo: 0, Hi: total - 1}
	})
	if err != nil {
		return 0, fmt.Errorf("allocate tap slot for %s: %w", sandboxID, err)
	}
	return slot, nil
}

// ReleaseTapSlot frees the slot held by sandboxID. It is idempotent.
func (s *Store) ReleaseTapSlot(ctx context.Context, sandboxID string) error {
	if err := s.write(ctx, func(tx *sql.Tx) error { return releaseTapSlot(ctx, tx, sandboxID) }); err != nil {
		return fmt.Errorf("release tap slot of %s: %w", sandboxID, err)
	}
	return nil
}

func releaseTapSlot(ctx context.Context, tx *sql.Tx, sandboxID string) error {
	_, err := tx.ExecContext(ctx, `UPDATE firecracker_tap_pool SET sandbox_id = NULL, allocated_at = NULL
		WHERE sandbox_id = ?`, sandboxID)
	return err
}

// ListTapSlots returns the allocated slots by sandbox id: the reconciler frees those whose
// sandbox has neither a row nor a VM.
func (s *Store) ListTapSlots(ctx context.Context) (map[string]int, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT sandbox_id, slot FROM firecracker_tap_pool
		WHERE sandbox_id IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("list tap slots: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var (
			id   string
			slot int
		)
		if err := rows.Scan(&id, &slot); err != nil {
			return nil, fmt.Errorf("list tap slots: %w", err)
		}
		out[id] = slot
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tap slots: %w", err)
	}
	return out, nil
}
