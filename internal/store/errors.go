package store

import (
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Sentinel errors. Callers test for them with errors.Is; the API edges map them to wire codes.
// Their texts carry no "store:" prefix: the service passes them up with its own context, and
// a message a user reads names what failed, not the package that noticed.
var (
	// ErrNotFound: the row does not exist (or, for tokens, is revoked).
	ErrNotFound = errors.New("not found")
	// ErrIDConflict: a row with this id already exists (for API tokens: one that differs
	// from the token being created, or the secret hash is another token's).
	ErrIDConflict = errors.New("id already exists")
	// ErrNameConflict: another sandbox of the same owner already has this non-empty name.
	ErrNameConflict = errors.New("sandbox name already in use")
	// ErrHostnameConflict: the hostname is bound to another sandbox or another port.
	ErrHostnameConflict = errors.New("hostname already bound")
	// ErrPortProtocolConflict: the sandbox port is already exposed with another protocol.
	ErrPortProtocolConflict = errors.New("port already exposed with another protocol")
	// ErrPoolExhausted: every slot of an allocation pool is taken. The concrete error is a
	// *PoolExhaustedError.
	ErrPoolExhausted = errors.New("pool exhausted")
	// ErrStateConflict: a compare-and-set state change found another state. The concrete
	// error is a *StateConflictError.
	ErrStateConflict = errors.New("sandbox state conflict")
	// ErrIdempotencyKeyReused: the idempotency key is live for a request with another hash.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrClaimLost: the idempotency claim is no longer held by the caller (its lock expired
	// and another caller reclaimed it, or it was deleted).
	ErrClaimLost = errors.New("idempotency claim lost")
	// ErrHostPortUnavailable is returned by a ReserveHostPort bind callback to say "this
	// host port cannot be used (for example EADDRINUSE): release it and walk on".
	ErrHostPortUnavailable = errors.New("host port unavailable")
	// ErrSchemaTooNew: the database was written by a newer binary. The concrete error is a
	// *SchemaVersionError.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrInvalidArgument: the input is malformed; nothing was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrDiskFull: a write found the database's disk full (SQLITE_FULL);
	// nothing was changed. Retry once space is freed.
	ErrDiskFull = errors.New("database or disk is full")
	// ErrUnwritable: a write could not reach the database file: it, its
	// WAL or its filesystem is read-only (SQLITE_READONLY), or the disk
	// answered with an I/O error (SQLITE_IOERR, SQLITE_CANTOPEN). Nothing
	// was changed. Retry once the store is writable.
	ErrUnwritable = errors.New("database is read-only or failing")
)

// PoolExhaustedError reports that every candidate in [Lo, Hi] of Pool is taken.
type PoolExhaustedError struct {
	Pool   string // "host-port" or "tap-slot"
	Lo, Hi int
}

func (e *PoolExhaustedError) Error() string {
	return fmt.Sprintf("%s pool exhausted: every slot in [%d, %d] is taken", e.Pool, e.Lo, e.Hi)
}

// Is makes errors.Is(err, ErrPoolExhausted) hold.
func (e *PoolExhaustedError) Is(target error) bool { return target == ErrPoolExhausted }

// StateConflictError reports a failed compare-and-set on a sandbox's state.
type StateConflictError struct {
	ID      string
	Current SandboxState   // the state the sandbox is in
	Want    []SandboxState // the states the caller required
}

func (e *StateConflictError) Error() string {
	return fmt.Sprintf("sandbox %s is %s, want one of %v", e.ID, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrStateConflict) hold.
func (e *StateConflictError) Is(target error) bool { return target == ErrStateConflict }

// SchemaVersionError reports a database whose schema version is newer than this binary's.
type SchemaVersionError struct {
	Found     int // PRAGMA user_version of the file
	Supported int // newest version this binary knows
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("store: database schema version %d is newer than supported version %d; upgrade sandboxd",
		e.Found, e.Supported)
}

// Is makes errors.Is(err, ErrSchemaTooNew) hold.
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }

// invalidf returns an ErrInvalidArgument with a message.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// sqliteCode returns the extended SQLite result code carried by err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// isUniqueViolation reports whether err is a UNIQUE constraint violation (a unique index,
// partial or not; not the primary key).
func isUniqueViolation(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_UNIQUE }

// isPrimaryKeyViolation reports whether err is a PRIMARY KEY constraint violation.
func isPrimaryKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isForeignKeyViolation reports whether err is a FOREIGN KEY constraint violation.
func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// fault classifies err, from a write, onto ErrDiskFull or ErrUnwritable
// by its SQLite result code; other errors pass unchanged. The primary
// code is the extended code's low byte (SQLITE_IOERR_WRITE is an
// SQLITE_IOERR).
func fault(err error) error {
	switch sqliteCode(err) & 0xff {
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
		return fmt.Errorf("%w: %w", ErrUnwritable, err)
	}
	return err
}
