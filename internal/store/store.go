package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// driverName is the database/sql driver registered by modernc.org/sqlite.
const driverName = "sqlite"

// busyTimeoutMillis bounds how long a connection waits for a lock held by another process
// (a second daemon on the same file, or the sqlite3 CLI). Within one process the writer pool
// of one connection already serialises writers, so this never fires in normal operation.
const busyTimeoutMillis = 5000

// Synchronous is the SQLite synchronous pragma for the writer.
type Synchronous string

const (
	// SynchronousNormal: in WAL mode a commit survives a process crash; an OS crash or
	// power loss can lose the last commits but never corrupts the file. The default.
	SynchronousNormal Synchronous = "NORMAL"
	// SynchronousFull: every commit is fsynced; also durable across power loss.
	SynchronousFull Synchronous = "FULL"
)

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Synchronous defaults to SynchronousNormal.
	Synchronous Synchronous
	// Clock supplies the current time for timestamps and idempotency locks.
	// Defaults to time.Now.
	Clock func() time.Time
	// ReadConns is the size of the read-only pool. Defaults to max(4, GOMAXPROCS).
	ReadConns int
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	writer *sql.DB // exactly one connection; every transaction is BEGIN IMMEDIATE
	reader *sql.DB // read-only pool
	now    func() time.Time
	// hot are the reads every API call makes, prepared once (per reader
	// connection, by database/sql) instead of parsed per call: see
	// prepareHot.
	hot hotReads
}

// hotReads are the statements prepared at Open: the token lookup of every
// authenticated request and the sandbox lookup of every call that names
// one. Parsing them was a fifth of the daemon's CPU in an exec loop
// (go run ./bench/poolbench -cpuprofile).
type hotReads struct {
	getSandbox, lookupToken *sql.Stmt
}

func prepareHot(ctx context.Context, reader *sql.DB) (hotReads, error) {
	var h hotReads
	var err error
	if h.getSandbox, err = reader.PrepareContext(ctx, getSandboxSQL); err != nil {
		return hotReads{}, fmt.Errorf("prepare get sandbox: %w", err)
	}
	if h.lookupToken, err = reader.PrepareContext(ctx, lookupTokenSQL); err != nil {
		h.getSandbox.Close()
		return hotReads{}, fmt.Errorf("prepare lookup token: %w", err)
	}
	return h, nil
}

func (h hotReads) close() error {
	return errors.Join(h.getSandbox.Close(), h.lookupToken.Close())
}

// Open opens (creating if needed) the database at path, applies pending migrations and
// returns a ready Store.
//
// If the file's schema version is newer than this binary knows, Open returns a
// *SchemaVersionError (errors.Is ErrSchemaTooNew) without having written to the file.
// Open is safe to call again after a failure; migrations are applied one transaction each,
// so a crash mid-migration leaves the file at the previous version.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: resolve %q: %w", path, err)
	}
	if err := privateFiles(abs); err != nil {
		return nil, err
	}
	if err := checkSchemaVersion(ctx, abs, len(migs)); err != nil {
		return nil, err
	}

	writer, err := openPool(ctx, writerDSN(abs, opts.Synchronous), 1)
	if err != nil {
		return nil, fmt.Errorf("store: open writer: %w", err)
	}
	if err := migrate(ctx, writer, migs); err != nil {
		writer.Close()
		return nil, err
	}
	reader, err := openPool(ctx, readerDSN(abs), opts.ReadConns)
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("store: open reader: %w", err)
	}
	hot, err := prepareHot(ctx, reader)
	if err != nil {
		reader.Close()
		writer.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	return &Store{writer: writer, reader: reader, now: opts.Clock, hot: hot}, nil
}

// Close closes both pools. The last connection to close checkpoints the WAL.
func (s *Store) Close() error {
	herr := s.hot.close()
	rerr := errors.Join(herr, s.reader.Close())
	werr := s.writer.Close()
	return errors.Join(rerr, werr)
}

func (o Options) withDefaults() (Options, error) {
	switch o.Synchronous {
	case "":
		o.Synchronous = SynchronousNormal
	case SynchronousNormal, SynchronousFull:
	default:
		return o, invalidf("synchronous %q", o.Synchronous)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.ReadConns <= 0 {
		o.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	return o, nil
}

// openPool opens a database/sql pool of at most n connections and checks that a
// connection (and so every DSN pragma) works.
func openPool(ctx context.Context, dsn string, n int) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// commonPragmas are set on every connection, writer and readers alike.
var commonPragmas = []string{
	fmt.Sprintf("busy_timeout(%d)", busyTimeoutMillis),
	"foreign_keys(1)",
	"journal_mode(WAL)",
}

// writerDSN: read-write, BEGIN IMMEDIATE for every transaction, so a write transaction
// takes the write lock up front and never fails half-way with SQLITE_BUSY on upgrade.
func writerDSN(path string, sync Synchronous) string {
	q := url.Values{}
	q["_pragma"] = append(commonPragmas[:len(commonPragmas):len(commonPragmas)],
		fmt.Sprintf("synchronous(%s)", sync))
	q.Set("_txlock", "immediate")
	return fileURI(path, q)
}

// readerDSN: opened read-only by SQLite (mode=ro) and query_only on top, so a bug that
// routes a write to the read pool fails loudly instead of bypassing the one writer.
func readerDSN(path string) string {
	q := url.Values{}
	q["_pragma"] = append(commonPragmas[:len(commonPragmas):len(commonPragmas)],
		"synchronous(NORMAL)", "query_only(1)")
	q.Set("mode", "ro")
	return fileURI(path, q)
}

// fileURI builds a SQLite URI filename; the driver hands file: names to SQLite whole.
func fileURI(path string, q url.Values) string {
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: q.Encode()}
	return u.String()
}

// fileMode is the mode of the database and of its -wal and -shm files:
// they hold every sandbox's sealed secrets and the token hashes, and are
// the daemon's alone.
const fileMode = 0o600

// privateFiles makes the database at path 0600 before SQLite opens it:
// it creates a missing file (an empty file is an empty database) with
// that mode, which SQLite then gives the -wal and -shm files it creates
// beside it, and tightens an existing database, -wal or -shm that is
// looser (written by an older binary, or by SQLite's default 0644).
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	switch {
	case err == nil:
		if err := f.Close(); err != nil {
			return fmt.Errorf("store: create %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrExist):
		return fmt.Errorf("store: create %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if fi.Mode().Perm()&^fileMode != 0 {
			if err := os.Chmod(p, fileMode); err != nil {
				return fmt.Errorf("store: make %s private (0600): %w", p, err)
			}
		}
	}
	return nil
}

// checkSchemaVersion refuses a database written by a newer binary before anything opens
// it for writing (a writer would switch the journal mode and replay the WAL). A missing
// file is fine: it will be created.
//
// After a clean shutdown there is no WAL, and the probe opens the file immutable: no locks,
// no -shm, nothing written. If a non-empty -wal is left (the last writer crashed), the
// newest user_version may be in it, so the probe reads through the WAL read-only; SQLite
// may then create the -shm index beside it, but never writes the database or the WAL.
func checkSchemaVersion(ctx context.Context, path string, supported int) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	q := url.Values{}
	q.Set("mode", "ro")
	if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
		q.Set("immutable", "1")
	}
	db, err := sql.Open(driverName, fileURI(path, q))
	if err != nil {
		return fmt.Errorf("store: probe schema version: %w", err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("store: probe schema version: %w", err)
	}
	if v > supported {
		return &SchemaVersionError{Found: v, Supported: supported}
	}
	return nil
}

// write runs fn in a write transaction (BEGIN IMMEDIATE on the single writer connection)
// and commits if fn returns nil. Callers queue for the writer in database/sql's pool,
// so the context bounds the wait. A write the disk refuses is ErrDiskFull or
// ErrUnwritable (fault), for every write of the store at once.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", fault(err))
	}
	defer tx.Rollback() // a no-op after Commit
	if err := fn(tx); err != nil {
		return fault(err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", fault(err))
	}
	return nil
}

// nowMillis is the store clock in unix milliseconds.
func (s *Store) nowMillis() int64 { return s.now().UnixMilli() }

// fromMillis converts a stored unix-millisecond time; 0 for NULL becomes the zero Time.
func fromMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}

// millis converts t to unix milliseconds.
func millis(t time.Time) int64 { return t.UnixMilli() }

// nullMillis converts t to a nullable column value: the zero Time is NULL.
func nullMillis(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

// newToken returns a random non-zero fencing token: per-insert identities that let a caller
// act only on the row it created (a deleted and re-created row gets another token).
func newToken() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// rowScanner is the Scan method shared by *sql.Row and *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// queryAll runs q on db and scans every row with scan.
func queryAll[T any](ctx context.Context, db *sql.DB, scan func(rowScanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
