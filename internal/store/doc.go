// Package store is sandboxd's SQLite store: every SQL statement the daemon runs, the
// embedded schema migrations, the allocators (host ports, TAP slots) and the request
// idempotency table.
//
// # One writer
//
// A Store holds two database/sql pools on one file:
//
//   - the writer: exactly one connection (SetMaxOpenConns(1)), every transaction opened
//     with BEGIN IMMEDIATE (the driver's _txlock=immediate), so a write transaction holds
//     SQLite's write lock from its first statement and cannot fail half-way on a lock
//     upgrade. Writers in this process queue for that connection in database/sql's pool;
//     the caller's context bounds the wait.
//   - the readers: a pool of read-only connections (mode=ro and query_only). In WAL mode
//     they read the last committed snapshot beside the writer, so a slow read never
//     queues a write and a long write never blocks a read.
//
// Every connection gets journal_mode=WAL, foreign_keys=ON, busy_timeout=5000 and
// synchronous=NORMAL (FULL for the writer on request) through the DSN, so a connection the
// pool opens later is configured the same way.
//
// # Duplicates are unrepresentable
//
// Every uniqueness rule lives in the schema: primary keys and partial unique indexes
// (sandbox names, host ports, one TAP slot per sandbox, one binding per hostname, one claim
// per idempotency key). Operations never "SELECT, then INSERT if absent": they propose the
// row (INSERT … ON CONFLICT DO NOTHING, or a plain INSERT whose constraint error is
// recognised by its SQLite extended result code, never by its text) and then observe the
// outcome inside the same transaction. So of N concurrent callers proposing one key,
// exactly one wins, and the others learn what they lost to.
//
// # Retries
//
// Every mutation is safe to retry. Allocations are keyed by their owner, so a retry finds
// the first call's row (TryReserveHostPort says Existing, AllocateTapSlot returns the same
// slot, AddCustomDomain and CreateAPIToken accept the identical row again). Rows a caller
// may need to undo carry a random per-insert token (ExposedPort.Reservation, the claim
// token), so an undo deletes only the row that call created, never one that another caller
// re-created in the meantime.
//
// # Time
//
// Times are stored as unix milliseconds and returned in UTC. The clock is injected
// (Options.Clock), so lock expiry and replay windows are tested without sleeping.
//
// # Migrations
//
// migrations/NNNN_name.sql are embedded and applied in order, each in one transaction that
// also bumps PRAGMA user_version. A file written by a newer binary is refused with
// ErrSchemaTooNew before anything opens it for writing. Never edit a shipped migration.
package store
