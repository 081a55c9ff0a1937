package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RegistryCredential is an owner's credential for one registry host; the
// secret is sealed by the caller.
type RegistryCredential struct {
	Owner, Host, Username string
	SealedSecret          []byte
	CreatedAt             time.Time
}

// MaxRegistryCredentials bounds how many registry credentials one owner
// keeps.
const MaxRegistryCredentials = 64

// PutRegistryCredential stores c, replacing the owner's credential for
// the host if there is one (a retry stores the same). A new host past
// MaxRegistryCredentials of the owner's is ErrInvalidArgument.
func (s *Store) PutRegistryCredential(ctx context.Context, c RegistryCredential) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var n, have int
		if err := tx.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE host = ?) FROM registry_credentials WHERE owner = ?`,
			c.Host, c.Owner).Scan(&n, &have); err != nil {
			return err
		}
		if have == 0 && n >= MaxRegistryCredentials {
			return fmt.Errorf("%w: at most %d registry credentials per owner; delete one first", ErrInvalidArgument, MaxRegistryCredentials)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO registry_credentials (owner, host, username, sealed_secret, created_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (owner, host) DO UPDATE SET username = excluded.username,
				sealed_secret = excluded.sealed_secret, created_at = excluded.created_at`,
			c.Owner, c.Host, c.Username, c.SealedSecret, c.CreatedAt.UnixMilli())
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO registry_private_hosts (host, since) VALUES (?, ?) ON CONFLICT (host) DO NOTHING`,
			c.Host, c.CreatedAt.UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("put registry credential %s of %s: %w", c.Host, c.Owner, err)
	}
	return nil
}

// GetRegistryCredential returns owner's credential for host; ErrNotFound
// when there is none.
func (s *Store) GetRegistryCredential(ctx context.Context, owner, host string) (RegistryCredential, error) {
	c := RegistryCredential{Owner: owner, Host: host}
	var created int64
	err := s.reader.QueryRowContext(ctx, `SELECT username, sealed_secret, created_at FROM registry_credentials
		WHERE owner = ? AND host = ?`, owner, host).Scan(&c.Username, &c.SealedSecret, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return RegistryCredential{}, fmt.Errorf("registry credential %s: %w", host, ErrNotFound)
	}
	if err != nil {
		return RegistryCredential{}, fmt.Errorf("get registry credential %s of %s: %w", host, owner, err)
	}
	c.CreatedAt = time.UnixMilli(created).UTC()
	return c, nil
}

// ListRegistryCredentials returns owner's credentials by host.
func (s *Store) ListRegistryCredentials(ctx context.Context, owner string) ([]RegistryCredential, error) {
	out, err := queryAll(ctx, s.reader, func(r rowScanner) (RegistryCredential, error) {
		c := RegistryCredential{Owner: owner}
		var created int64
		err := r.Scan(&c.Host, &c.Username, &c.SealedSecret, &created)
		c.CreatedAt = time.UnixMilli(created).UTC()
		return c, err
	}, `SELECT host, username, sealed_secret, created_at FROM registry_credentials WHERE owner = ? ORDER BY host`, owner)
	if err != nil {
		return nil, fmt.Errorf("list registry credentials of %s: %w", owner, err)
	}
	return out, nil
}

// DeleteRegistryCredential removes owner's credential for host; ErrNotFound
// when there was none.
func (s *Store) DeleteRegistryCredential(ctx context.Context, owner, host string) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM registry_credentials WHERE owner = ? AND host = ?`, owner, host)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete registry credential %s of %s: %w", host, owner, err)
	}
	if n == 0 {
		return fmt.Errorf("registry credential %s: %w", host, ErrNotFound)
	}
	return nil
}

// RegistryHasCredentials reports whether any owner holds, or ever held, a
// credential for host: its images are private (registry_private_hosts).
func (s *Store) RegistryHasCredentials(ctx context.Context, host string) (bool, error) {
	var one int
	err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM registry_private_hosts WHERE host = ?`, host).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry credentials of %s: %w", host, err)
	}
	return true, nil
}
