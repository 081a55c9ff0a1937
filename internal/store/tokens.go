package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Role is an API token's role.
type Role string

// The token roles; the schema's CHECK constraint admits exactly these.
const (
	RoleAdmin Role = "admin" // every tenant, and token management
	RoleUser  Role = "user"  // its own Owner's sandboxes only
)

// APIToken is an API token's metadata. The secret itself is never stored: only its SHA-256.
type APIToken struct {
	ID        string
	Name      string
	Role      Role
	Owner     string
	Quota     Quota
	CreatedAt time.Time
	RevokedAt time.Time // zero: active
}

// Quota is what a token's owner may hold at once; a zero field is
// unlimited. Negative values are refused (the schema checks too).
type Quota struct {
	Sandboxes int64
	MilliCPU  int64
	MemoryMB  int64
	DiskMB    int64
}

const apiTokenColumns = `id, name, role, owner, quota_sandboxes, quota_milli_cpu, quota_memory_mb, quota_disk_mb, created_at, revoked_at`

func scanAPIToken(r rowScanner) (APIToken, error) {
	var (
		t       APIToken
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Role, &t.Owner, &t.Quota.Sandboxes, &t.Quota.MilliCPU, &t.Quota.MemoryMB, &t.Quota.DiskMB, &created, &revoked); err != nil {
		return APIToken{}, err
	}
	t.CreatedAt = time.UnixMilli(created).UTC()
	t.RevokedAt = fromMillis(revoked)
	return t, nil
}

// CreateAPIToken stores t with the SHA-256 of its secret; CreatedAt is set from the store
// clock and written back to t. Creating the identical token again (same id, hash, name,
// role, owner, quota) is a no-op, so retries are safe. ErrIDConflict if t.ID or the secret hash is
// already registered otherwise.
func (s *Store) CreateAPIToken(ctx context.Context, t *APIToken, secretSHA256 [32]byte) error {
	if t.ID == "" || (t.Role != RoleAdmin && t.Role != RoleUser) {
		return invalidf("create api token: id %q, role %q", t.ID, t.Role)
	}
	if q := t.Quota; q.Sandboxes < 0 || q.MilliCPU < 0 || q.MemoryMB < 0 || q.DiskMB < 0 {
		return invalidf("create api token: negative quota %+v", q)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		res, err := tx.ExecContext(ctx, `INSERT INTO api_tokens (id, secret_sha256, name, role, owner,
			quota_sandboxes, quota_milli_cpu, quota_memory_mb, quota_disk_mb, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			t.ID, secretSHA256[:], t.Name, t.Role, t.Owner, t.Quota.Sandboxes, t.Quota.MilliCPU, t.Quota.MemoryMB, t.Quota.DiskMB, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			t.CreatedAt = time.UnixMilli(now).UTC()
			return err
		}
		// A uniqueness rule said no: a retry of this very call, or a real conflict.
		cur, err := scanAPIToken(tx.QueryRowContext(ctx, `SELECT `+apiTokenColumns+
			` FROM api_tokens WHERE id = ? AND secret_sha256 = ?`, t.ID, secretSHA256[:]))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrIDConflict // the id, or the secret hash, belongs to another token
		}
		if err != nil {
			return err
		}
		if cur.Name != t.Name || cur.Role != t.Role || cur.Owner != t.Owner || cur.Quota != t.Quota || !cur.RevokedAt.IsZero() {
			return ErrIDConflict
		}
		t.CreatedAt = cur.CreatedAt
		return nil
	})
	if err != nil {
		return fmt.Errorf("create api token %s: %w", t.ID, err)
	}
	return nil
}

// lookupTokenSQL is prepared at Open (hotReads).
const lookupTokenSQL = `SELECT ` + apiTokenColumns + ` FROM api_tokens WHERE secret_sha256 = ? AND revoked_at IS NULL`

// LookupAPITokenByHash returns the active token whose secret hashes to secretSHA256, or
// ErrNotFound (also for a revoked token).
func (s *Store) LookupAPITokenByHash(ctx context.Context, secretSHA256 [32]byte) (APIToken, error) {
	t, err := scanAPIToken(s.hot.lookupToken.QueryRowContext(ctx, secretSHA256[:]))
	if err != nil {
		return APIToken{}, fmt.Errorf("lookup api token: %w", notFound(err))
	}
	return t, nil
}

// ListAPITokens returns every token, revoked ones included, ordered by (CreatedAt, ID).
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	ts, err := queryAll(ctx, s.reader, scanAPIToken, `SELECT `+apiTokenColumns+
		` FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	return ts, nil
}

// RevokeAPIToken revokes token id at the store clock's now. It is idempotent: revoking a
// revoked token keeps the first revocation time. ErrNotFound if id never existed.
func (s *Store) RevokeAPIToken(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var revoked sql.NullInt64
		err := tx.QueryRowContext(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ?)
			WHERE id = ? RETURNING revoked_at`, s.nowMillis(), id).Scan(&revoked)
		return notFound(err)
	})
	if err != nil {
		return fmt.Errorf("revoke api token %s: %w", id, err)
	}
	return nil
}
