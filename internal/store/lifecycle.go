package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The lifecycle rules' questions and marks (Lifecycle). Each list is a
// read; each act on a listed row checks the rule again under the writer,
// so a sandbox touched, started or given new rules since the listing is
// left alone.

// TouchSandbox records activity of running sandbox id at at: its idle
// time starts again. A sandbox that is not running, or whose last
// activity is later, is left as it is; one that is gone is not an error.
func (s *Store) TouchSandbox(ctx context.Context, id string, at time.Time) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE sandboxes SET last_activity_at = ?1
			WHERE id = ?2 AND state = ?3 AND destroying_since IS NULL
				AND (last_activity_at IS NULL OR last_activity_at < ?1)`, millis(at), id, StateRunning)
		return err
	})
	if err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// ListIdle returns the running sandboxes whose auto-stop has come at now
// (idle for at least Lifecycle.AutoStop), longest idle first.
func (s *Store) ListIdle(ctx context.Context, now time.Time) ([]Sandbox, error) {
	items, err := queryAll(ctx, s.reader, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = ? AND auto_stop_ms > 0 AND coalesce(last_activity_at, updated_at) + auto_stop_ms <= ?
			AND destroying_since IS NULL AND owner <> ?
		ORDER BY last_activity_at, id`, StateRunning, millis(now), PoolOwner)
	if err != nil {
		return nil, fmt.Errorf("list idle sandboxes: %w", err)
	}
	return items, nil
}

// Idle reports whether row's auto-stop has come at now.
func (sb Sandbox) Idle(now time.Time) bool {
	if sb.State != StateRunning || sb.Lifecycle.AutoStop <= 0 {
		return false
	}
	last := sb.LastActivityAt
	if last.IsZero() {
		last = sb.UpdatedAt
	}
	return !now.Before(last.Add(sb.Lifecycle.AutoStop))
}

// ListAutoDeleteDue returns the stopped sandboxes whose auto-delete has
// come at now, longest stopped first.
func (s *Store) ListAutoDeleteDue(ctx context.Context, now time.Time) ([]Sandbox, error) {
	items, err := queryAll(ctx, s.reader, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = ? AND auto_delete_ms >= 0 AND stopped_at + auto_delete_ms <= ?
			AND destroying_since IS NULL
		ORDER BY stopped_at, id`, StateStopped, millis(now))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes due for auto-delete: %w", err)
	}
	return items, nil
}

// BeginAutoDelete is BeginDestroy for the auto-delete rule: it marks
// sandbox id only if, under the writer, it is still stopped and its
// auto-delete has come at now. ok is false, with nothing changed, when
// it no longer qualifies (started, new rules, gone or being destroyed).
func (s *Store) BeginAutoDelete(ctx context.Context, id string, now time.Time) (sb Sandbox, ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes SET destroying_since = ?
			WHERE id = ? AND state = ? AND auto_delete_ms >= 0 AND stopped_at + auto_delete_ms <= ?
				AND destroying_since IS NULL
			RETURNING `+sandboxColumns, s.nowMillis(), id, StateStopped, millis(now)))
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Sandbox{}, false, nil
	case err != nil:
		return Sandbox{}, false, fmt.Errorf("begin auto-delete of sandbox %s: %w", id, err)
	}
	return sb, true, nil
}

// ArchiveDue archives, in one write, every stopped sandbox whose
// auto-archive has come at now, and returns how many.
func (s *Store) ArchiveDue(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET archived_at = ?1
			WHERE state = ?2 AND archived_at IS NULL AND auto_archive_ms > 0
				AND stopped_at + auto_archive_ms <= ?1 AND destroying_since IS NULL`, millis(now), StateStopped)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("archive sandboxes due: %w", err)
	}
	return int(n), nil
}

// ArchiveSandbox marks sandbox id archived (a repeat keeps the first
// time), or with archived false clears the mark, and returns its row. A
// sandbox that is not stopped may be marked just before its stop (the stop
// keeps the mark, so its state change already shows it archived; a start
// clears it). A sandbox being created is a *StateConflictError;
// ErrNotFound if it is gone or its destroy began.
func (s *Store) ArchiveSandbox(ctx context.Context, id string, archived bool) (Sandbox, error) {
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var cur SandboxState
		if err := tx.QueryRowContext(ctx, `SELECT state FROM sandboxes
			WHERE id = ? AND destroying_since IS NULL`, id).Scan(&cur); err != nil {
			return notFound(err)
		}
		if want := []SandboxState{StateRunning, StatePaused, StateStopping, StateStopped, StateError}; !slices.Contains(want, cur) {
			return &StateConflictError{ID: id, Current: cur, Want: want}
		}
		var at any // NULL clears the mark
		if archived {
			at = s.nowMillis()
		}
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET archived_at = CASE WHEN ?1 IS NULL THEN NULL ELSE coalesce(archived_at, ?1) END, updated_at = ?2 WHERE id = ?3
			RETURNING `+sandboxColumns, at, s.nowMillis(), id))
		return err
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("archive sandbox %s: %w", id, err)
	}
	return sb, nil
}
