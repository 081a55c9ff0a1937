package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// CustomDomain binds a hostname to a port of a sandbox. Hostnames compare
// case-insensitively (the column is COLLATE NOCASE); the stored spelling is the first one.
type CustomDomain struct {
	Hostname  string
	SandboxID string
	Port      int
	CreatedAt time.Time
}

const customDomainColumns = `hostname, sandbox_id, port, created_at`

func scanCustomDomain(r rowScanner) (CustomDomain, error) {
	var (
		d       CustomDomain
		created int64
	)
	if err := r.Scan(&d.Hostname, &d.SandboxID, &d.Port, &created); err != nil {
		return CustomDomain{}, err
	}
	d.CreatedAt = time.UnixMilli(created).UTC()
	return d, nil
}

// AddCustomDomain binds hostname to port of sandboxID and reports whether this call
// created the binding. It is PutCustomDomain without the token; see there.
func (s *Store) AddCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (created bool, err error) {
	created, _, err = s.PutCustomDomain(ctx, hostname, sandboxID, port)
	return created, err
}

// PutCustomDomain binds hostname to port of sandboxID, reports whether this call created
// the binding, and returns the token this call wrote on the row: the fence for its undo
// (ReleaseCustomDomain).
//
// The identical binding again creates nothing (created=false), so retries are safe, but
// it stamps a fresh token on the row: a call that finds the binding vouches for it, so the
// undo of the call that created it can no longer delete it. If another sandbox, or another
// port of this sandbox, holds hostname the error is ErrHostnameConflict and nothing
// changes; of concurrent callers for one hostname exactly one creates it. ErrNotFound if
// the sandbox does not exist.
func (s *Store) PutCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (created bool, token int64, err error) {
	switch {
	case hostname == "":
		return false, 0, invalidf("add custom domain: empty hostname")
	case port < 1 || port > 65535:
		return false, 0, invalidf("add custom domain %s: port %d out of range", hostname, port)
	}
	token = newToken()
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO sandbox_custom_domains (`+customDomainColumns+`, token)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (hostname) DO NOTHING`, hostname, sandboxID, port, s.nowMillis(), token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			created = n == 1
			return err
		}
		d, err := scanCustomDomain(tx.QueryRowContext(ctx, `SELECT `+customDomainColumns+
			` FROM sandbox_custom_domains WHERE hostname = ?`, hostname))
		if err != nil {
			return err
		}
		if d.SandboxID != sandboxID || d.Port != port {
			return fmt.Errorf("%w: bound to %s:%d", ErrHostnameConflict, d.SandboxID, d.Port)
		}
		_, err = tx.ExecContext(ctx, `UPDATE sandbox_custom_domains SET token = ? WHERE hostname = ?`, token, hostname)
		return err
	})
	if isForeignKeyViolation(err) {
		err = fmt.Errorf("sandbox: %w", ErrNotFound)
	}
	if err != nil {
		return false, 0, fmt.Errorf("add custom domain %s for %s:%d: %w", hostname, sandboxID, port, err)
	}
	return created, token, nil
}

// ReleaseCustomDomain deletes the binding of hostname to sandboxID only while it carries
// token: the undo of the PutCustomDomain call that returned token. It reports whether it
// deleted a row; releasing twice, or after another call put the same binding (or removed
// it and bound it again), deletes nothing.
func (s *Store) ReleaseCustomDomain(ctx context.Context, sandboxID, hostname string, token int64) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ? AND token = ?`,
		hostname, sandboxID, token)
	if err != nil {
		return false, fmt.Errorf("release custom domain %s of %s: %w", hostname, sandboxID, err)
	}
	return n > 0, nil
}

// RemoveCustomDomain deletes the binding of hostname if it belongs to sandboxID, and
// reports whether it did. It is idempotent and never removes another sandbox's binding.
func (s *Store) RemoveCustomDomain(ctx context.Context, sandboxID, hostname string) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`,
		hostname, sandboxID)
	if err != nil {
		return false, fmt.Errorf("remove custom domain %s of %s: %w", hostname, sandboxID, err)
	}
	return n > 0, nil
}

// GetCustomDomain returns the binding of hostname, or ErrNotFound.
func (s *Store) GetCustomDomain(ctx context.Context, hostname string) (CustomDomain, error) {
	d, err := scanCustomDomain(s.reader.QueryRowContext(ctx, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE hostname = ?`, hostname))
	if err != nil {
		return CustomDomain{}, fmt.Errorf("get custom domain %s: %w", hostname, notFound(err))
	}
	return d, nil
}

// ListCustomDomains returns the bindings of sandboxID ordered by hostname.
func (s *Store) ListCustomDomains(ctx context.Context, sandboxID string) ([]CustomDomain, error) {
	ds, err := queryAll(ctx, s.reader, scanCustomDomain, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE sandbox_id = ? ORDER BY hostname`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list custom domains of %s: %w", sandboxID, err)
	}
	return ds, nil
}

// ListAllCustomDomains returns every binding ordered by hostname: the router's state at start.
func (s *Store) ListAllCustomDomains(ctx context.Context) ([]CustomDomain, error) {
	ds, err := queryAll(ctx, s.reader, scanCustomDomain, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains ORDER BY hostname`)
	if err != nil {
		return nil, fmt.Errorf("list custom domains: %w", err)
	}
	return ds, nil
}
