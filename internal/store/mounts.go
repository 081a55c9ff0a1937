package store

import (
	"context"
	"database/sql"
	"fmt"
)

// PutSandboxMounts replaces the sealed mount specs of sandboxID with sealed, in order, in
// one transaction. It is idempotent; an empty sealed removes them all. ErrNotFound if the
// sandbox does not exist.
func (s *Store) PutSandboxMounts(ctx context.Context, sandboxID string, sealed [][]byte) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_mounts WHERE sandbox_id = ?`, sandboxID); err != nil {
			return err
		}
		for i, spec := range sealed {
			if spec == nil {
				spec = []byte{} // the column is NOT NULL; an empty spec is still a mount slot
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_mounts (sandbox_id, idx, sealed_spec)
				VALUES (?, ?, ?)`, sandboxID, i, spec); err != nil {
				return err
			}
		}
		return nil
	})
	if isForeignKeyViolation(err) {
		err = fmt.Errorf("sandbox: %w", ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("put mounts of %s: %w", sandboxID, err)
	}
	return nil
}

// ListSandboxMounts returns the sealed mount specs of sandboxID in order (none if it has
// none or does not exist).
func (s *Store) ListSandboxMounts(ctx context.Context, sandboxID string) ([][]byte, error) {
	specs, err := queryAll(ctx, s.reader, func(r rowScanner) ([]byte, error) {
		var b []byte
		err := r.Scan(&b)
		return b, err
	}, `SELECT sealed_spec FROM sandbox_mounts WHERE sandbox_id = ? ORDER BY idx`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list mounts of %s: %w", sandboxID, err)
	}
	return specs, nil
}
