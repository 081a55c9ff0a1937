package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CustomDomain binds a hostname to a port of a sandbox. Hostnames compare
// case-insensitively (the column is COLLATE NOCASE); the stored spelling is the first one.
//
// A binding is pending (VerifiedAt zero) until its owner proves control of the hostname
// (a DNS TXT record holding Challenge) or an admin binds it; only a verified binding
// routes. Several sandboxes may hold pending claims on one hostname; at most one
// verified binding exists per hostname (a partial unique index).
type CustomDomain struct {
	Hostname  string
	SandboxID string
	Port      int
	CreatedAt time.Time
	// Challenge is the value the hostname's TXT record must hold.
	Challenge string
	// VerifiedAt is when the binding was verified; zero while pending.
	VerifiedAt time.Time
	// RetryUntil is how long the periodic check looks a pending claim up.
	RetryUntil time.Time
	// CheckedAt and LastError are the last failed check of a pending claim.
	CheckedAt time.Time
	LastError string
}

// Verified reports whether the binding routes.
func (d CustomDomain) Verified() bool { return !d.VerifiedAt.IsZero() }

const customDomainColumns = `hostname, sandbox_id, port, created_at, challenge, verified_at, retry_until, checked_at, last_error`

func scanCustomDomain(r rowScanner) (CustomDomain, error) {
	var (
		d                                 CustomDomain
		created, verified, retry, checked int64
	)
	if err := r.Scan(&d.Hostname, &d.SandboxID, &d.Port, &created, &d.Challenge, &verified, &retry, &checked, &d.LastError); err != nil {
		return CustomDomain{}, err
	}
	d.CreatedAt = time.UnixMilli(created).UTC()
	d.VerifiedAt = millisOrZero(verified)
	d.RetryUntil = millisOrZero(retry)
	d.CheckedAt = millisOrZero(checked)
	return d, nil
}

func millisOrZero(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// NewChallenge returns a fresh TXT challenge: 128 random bits in hex.
func NewChallenge() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return fmt.Sprintf("%x", b)
}

// DomainClaim is a request to bind a hostname to a sandbox port.
type DomainClaim struct {
	Hostname  string
	SandboxID string
	Port      int
	// Verified binds it verified at once (an admin's binding, a failover's
	// replay of a verified one); else it is a pending claim.
	Verified bool
	// Challenge is a new pending claim's; empty: NewChallenge.
	Challenge string
	// RetryUntil is a new pending claim's (see CustomDomain.RetryUntil).
	RetryUntil time.Time
	// MaxPending bounds the pending claims of the sandbox (0: no bound): a
	// new claim beyond it is ErrInvalidArgument and changes nothing.
	MaxPending int
}

// DomainOutcome is what ClaimCustomDomain changed, for its undo.
type DomainOutcome struct {
	// Created: this call inserted the row (undo: ReleaseCustomDomain).
	Created bool
	// Promoted: this call verified a pending claim it found (undo:
	// UnverifyCustomDomain).
	Promoted bool
	// Token is the fence this call wrote on the row.
	Token int64
}

// AddCustomDomain binds hostname to port of sandboxID, verified, and reports whether this
// call created the binding. It is PutCustomDomain without the token; see there.
func (s *Store) AddCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (created bool, err error) {
	created, _, err = s.PutCustomDomain(ctx, hostname, sandboxID, port)
	return created, err
}

// PutCustomDomain binds hostname to port of sandboxID, verified (ClaimCustomDomain with
// Verified), reports whether this call created the binding, and returns the token this
// call wrote on the row: the fence for its undo (ReleaseCustomDomain).
func (s *Store) PutCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (created bool, token int64, err error) {
	_, out, err := s.ClaimCustomDomain(ctx, DomainClaim{Hostname: hostname, SandboxID: sandboxID, Port: port, Verified: true})
	return out.Created, out.Token, err
}

// ClaimCustomDomain binds c.Hostname to c.Port of c.SandboxID, pending or (c.Verified)
// verified, in one write transaction, and returns the binding as it now is and what this
// call changed.
//
// The same claim again creates nothing, so retries are safe, but it stamps a fresh token
// on the row: a call that finds the binding vouches for it, so the undo of the call that
// created it can no longer touch it. A verified claim of a binding this sandbox holds
// pending verifies it (Promoted). If this sandbox holds hostname on another port, or
// another sandbox holds it verified, the error is ErrHostnameConflict and nothing changes
// (a pending claim of another sandbox is no conflict: it holds nothing). ErrNotFound if
// the sandbox does not exist.
func (s *Store) ClaimCustomDomain(ctx context.Context, c DomainClaim) (d CustomDomain, out DomainOutcome, err error) {
	switch {
	case c.Hostname == "":
		return CustomDomain{}, DomainOutcome{}, invalidf("add custom domain: empty hostname")
	case c.Port < 1 || c.Port > 65535:
		return CustomDomain{}, DomainOutcome{}, invalidf("add custom domain %s: port %d out of range", c.Hostname, c.Port)
	}
	if c.Challenge == "" {
		c.Challenge = NewChallenge()
	}
	out.Token = newToken()
	err = s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		have, err := scanCustomDomain(tx.QueryRowContext(ctx, `SELECT `+customDomainColumns+
			` FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`, c.Hostname, c.SandboxID))
		switch {
		case err == nil:
			if have.Port != c.Port {
				return fmt.Errorf("%w: bound to %s:%d", ErrHostnameConflict, have.SandboxID, have.Port)
			}
			if c.Verified && !have.Verified() {
				out.Promoted = true
				_, err = tx.ExecContext(ctx, `UPDATE sandbox_custom_domains SET token = ?, verified_at = ?, last_error = ''
					WHERE hostname = ? AND sandbox_id = ?`, out.Token, now, c.Hostname, c.SandboxID)
			} else {
				_, err = tx.ExecContext(ctx, `UPDATE sandbox_custom_domains SET token = ? WHERE hostname = ? AND sandbox_id = ?`,
					out.Token, c.Hostname, c.SandboxID)
			}
		case errors.Is(err, sql.ErrNoRows):
			if err := claimable(ctx, tx, c); err != nil {
				return err
			}
			var verified, retry int64
			if c.Verified {
				verified = now
			} else if !c.RetryUntil.IsZero() {
				retry = c.RetryUntil.UnixMilli()
			}
			out.Created = true
			_, err = tx.ExecContext(ctx, `INSERT INTO sandbox_custom_domains
				(hostname, sandbox_id, port, created_at, token, challenge, verified_at, retry_until)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, c.Hostname, c.SandboxID, c.Port, now, out.Token, c.Challenge, verified, retry)
		}
		if err != nil {
			return err
		}
		d, err = scanCustomDomain(tx.QueryRowContext(ctx, `SELECT `+customDomainColumns+
			` FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`, c.Hostname, c.SandboxID))
		return err
	})
	switch {
	case isForeignKeyViolation(err):
		err = fmt.Errorf("sandbox: %w", ErrNotFound)
	case isUniqueViolation(err):
		err = fmt.Errorf("%w: verified for another sandbox", ErrHostnameConflict)
	}
	if err != nil {
		return CustomDomain{}, DomainOutcome{}, fmt.Errorf("add custom domain %s for %s:%d: %w", c.Hostname, c.SandboxID, c.Port, err)
	}
	return d, out, nil
}

// claimable checks, inside a claim's transaction, that no other sandbox holds c.Hostname
// verified (the unique index would refuse a verified claim anyway; a pending one is
// refused too, since it could never be verified) and that the sandbox is under
// c.MaxPending.
func claimable(ctx context.Context, tx *sql.Tx, c DomainClaim) error {
	var holder string
	err := tx.QueryRowContext(ctx, `SELECT sandbox_id FROM sandbox_custom_domains WHERE hostname = ? AND verified_at > 0`,
		c.Hostname).Scan(&holder)
	switch {
	case err == nil:
		return fmt.Errorf("%w: verified for %s", ErrHostnameConflict, holder)
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if c.Verified || c.MaxPending <= 0 {
		return nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandbox_custom_domains WHERE sandbox_id = ? AND verified_at = 0`,
		c.SandboxID).Scan(&n); err != nil {
		return err
	}
	if n >= c.MaxPending {
		return invalidf("sandbox %s has %d pending custom domains, the most it may have: verify or remove one first", c.SandboxID, n)
	}
	return nil
}

// VerifyCustomDomain marks sandboxID's pending claim of hostname verified and returns
// the token it wrote (the fence of UnverifyCustomDomain). promoted is false when the
// binding was verified already (nothing changes). ErrHostnameConflict when another
// sandbox holds hostname verified; ErrNotFound when the sandbox holds no such claim.
func (s *Store) VerifyCustomDomain(ctx context.Context, sandboxID, hostname string) (promoted bool, token int64, err error) {
	token = newToken()
	n, err := s.exec(ctx, `UPDATE sandbox_custom_domains SET verified_at = ?, token = ?, last_error = ''
		WHERE hostname = ? AND sandbox_id = ? AND verified_at = 0`, s.nowMillis(), token, hostname, sandboxID)
	switch {
	case isUniqueViolation(err):
		return false, 0, fmt.Errorf("verify custom domain %s of %s: %w: verified for another sandbox", hostname, sandboxID, ErrHostnameConflict)
	case err != nil:
		return false, 0, fmt.Errorf("verify custom domain %s of %s: %w", hostname, sandboxID, err)
	case n == 1:
		return true, token, nil
	}
	if _, err := s.GetSandboxCustomDomain(ctx, sandboxID, hostname); err != nil {
		return false, 0, err
	}
	return false, 0, nil
}

// UnverifyCustomDomain makes sandboxID's binding of hostname pending again only while it
// carries token: the undo of the VerifyCustomDomain or ClaimCustomDomain (Promoted) call
// that returned token. It reports whether it changed a row.
func (s *Store) UnverifyCustomDomain(ctx context.Context, sandboxID, hostname string, token int64) (bool, error) {
	n, err := s.exec(ctx, `UPDATE sandbox_custom_domains SET verified_at = 0 WHERE hostname = ? AND sandbox_id = ? AND token = ?`,
		hostname, sandboxID, token)
	if err != nil {
		return false, fmt.Errorf("unverify custom domain %s of %s: %w", hostname, sandboxID, err)
	}
	return n > 0, nil
}

// NoteCustomDomainCheck records a failed check of sandboxID's pending claim of hostname:
// when, and why (never a secret: the caller's own words about DNS). A non-zero
// retryUntil also sets how long the periodic check goes on. A verified or absent claim
// is left alone.
func (s *Store) NoteCustomDomainCheck(ctx context.Context, sandboxID, hostname, why string, retryUntil time.Time) error {
	q := `UPDATE sandbox_custom_domains SET checked_at = ?, last_error = ? WHERE hostname = ? AND sandbox_id = ? AND verified_at = 0`
	args := []any{s.nowMillis(), why, hostname, sandboxID}
	if !retryUntil.IsZero() {
		q = `UPDATE sandbox_custom_domains SET checked_at = ?, last_error = ?, retry_until = ? WHERE hostname = ? AND sandbox_id = ? AND verified_at = 0`
		args = []any{s.nowMillis(), why, retryUntil.UnixMilli(), hostname, sandboxID}
	}
	if _, err := s.exec(ctx, q, args...); err != nil {
		return fmt.Errorf("note custom domain check %s of %s: %w", hostname, sandboxID, err)
	}
	return nil
}

// ListPendingCustomDomains returns at most limit pending claims whose periodic check has
// not run out (RetryUntil after now), those checked longest ago first.
func (s *Store) ListPendingCustomDomains(ctx context.Context, limit int) ([]CustomDomain, error) {
	ds, err := queryAll(ctx, s.reader, scanCustomDomain, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE verified_at = 0 AND retry_until > ? ORDER BY checked_at, hostname LIMIT ?`,
		s.nowMillis(), limit)
	if err != nil {
		return nil, fmt.Errorf("list pending custom domains: %w", err)
	}
	return ds, nil
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

// RemoveCustomDomain deletes the binding of hostname if it belongs to sandboxID, pending
// or verified, and reports whether it did. It is idempotent and never removes another
// sandbox's binding.
func (s *Store) RemoveCustomDomain(ctx context.Context, sandboxID, hostname string) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`,
		hostname, sandboxID)
	if err != nil {
		return false, fmt.Errorf("remove custom domain %s of %s: %w", hostname, sandboxID, err)
	}
	return n > 0, nil
}

// GetCustomDomain returns the verified binding of hostname (the one that routes), or
// ErrNotFound.
func (s *Store) GetCustomDomain(ctx context.Context, hostname string) (CustomDomain, error) {
	d, err := scanCustomDomain(s.reader.QueryRowContext(ctx, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE hostname = ? AND verified_at > 0`, hostname))
	if err != nil {
		return CustomDomain{}, fmt.Errorf("get custom domain %s: %w", hostname, notFound(err))
	}
	return d, nil
}

// GetSandboxCustomDomain returns sandboxID's binding of hostname, pending or verified, or
// ErrNotFound.
func (s *Store) GetSandboxCustomDomain(ctx context.Context, sandboxID, hostname string) (CustomDomain, error) {
	d, err := scanCustomDomain(s.reader.QueryRowContext(ctx, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE hostname = ? AND sandbox_id = ?`, hostname, sandboxID))
	if err != nil {
		return CustomDomain{}, fmt.Errorf("get custom domain %s of %s: %w", hostname, sandboxID, notFound(err))
	}
	return d, nil
}

// ListCustomDomains returns the bindings of sandboxID, pending and verified, ordered by
// hostname.
func (s *Store) ListCustomDomains(ctx context.Context, sandboxID string) ([]CustomDomain, error) {
	ds, err := queryAll(ctx, s.reader, scanCustomDomain, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE sandbox_id = ? ORDER BY hostname`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list custom domains of %s: %w", sandboxID, err)
	}
	return ds, nil
}

// ListAllCustomDomains returns every verified binding ordered by hostname: the router's
// state at start.
func (s *Store) ListAllCustomDomains(ctx context.Context) ([]CustomDomain, error) {
	ds, err := queryAll(ctx, s.reader, scanCustomDomain, `SELECT `+customDomainColumns+
		` FROM sandbox_custom_domains WHERE verified_at > 0 ORDER BY hostname`)
	if err != nil {
		return nil, fmt.Errorf("list custom domains: %w", err)
	}
	return ds, nil
}
