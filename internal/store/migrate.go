package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded SQL file; applying it sets PRAGMA user_version to version.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/NNNN_name.sql in order and checks that the versions
// are exactly 1..N, so a gap or a duplicate is caught by the first test run.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var migs []migration
	for _, e := range entries { // ReadDir sorts by name
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("store: migration %q: name must be NNNN_description.sql", e.Name())
		}
		if want := len(migs) + 1; v != want {
			return nil, fmt.Errorf("store: migration %q has version %d, want %d", e.Name(), v, want)
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("store: read migration %q: %w", e.Name(), err)
		}
		migs = append(migs, migration{version: v, name: e.Name(), sql: string(b)})
	}
	return migs, nil
}

// migrate applies every migration newer than the database's user_version, each in its own
// IMMEDIATE transaction together with the user_version bump. Two processes migrating the
// same file serialise on the write lock; the second finds the work done.
func migrate(ctx context.Context, db *sql.DB, migs []migration) error {
	for _, m := range migs {
		var err error
		if m.noForeignKeys() {
			err = applyWithoutForeignKeys(ctx, db, m, len(migs))
		} else {
			err = applyMigration(ctx, db, m, len(migs))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// foreignKeysOff, as a migration's first line, runs it with foreign keys
// off: a migration that rebuilds a table other tables reference (SQLite's
// documented procedure to change a CHECK) would otherwise cascade the
// DROP of the old table into them. The pragma cannot change inside a
// transaction, so it is set on the connection before, and the migration
// commits only if foreign_key_check finds nothing.
const foreignKeysOff = "-- sandboxd:foreign_keys=off"

func (m migration) noForeignKeys() bool { return strings.HasPrefix(m.sql, foreignKeysOff+"\n") }

// applyWithoutForeignKeys applies m on one connection with foreign keys
// off, and turns them on again on that connection whatever happens.
func applyWithoutForeignKeys(ctx context.Context, db *sql.DB, m migration, latest int) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: migration %s: %w", m.name, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return fmt.Errorf("store: migration %s: foreign keys off: %w", m.name, err)
	}
	err = applyMigration(ctx, conn, m, latest)
	if _, ferr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); ferr != nil {
		// The connection must not go back to the pool without them.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("store: migration %s: foreign keys on: %w", m.name, ferr)
		}
	}
	return err
}

// beginner is a *sql.DB or a *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func applyMigration(ctx context.Context, db beginner, m migration, latest int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migration %s: begin: %w", m.name, err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("store: migration %s: read user_version: %w", m.name, err)
	}
	switch {
	case v > latest:
		return &SchemaVersionError{Found: v, Supported: latest}
	case v >= m.version:
		return nil // already applied
	case v != m.version-1:
		return fmt.Errorf("store: migration %s: database is at version %d", m.name, v)
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("store: migration %s: %w", m.name, err)
	}
	if m.noForeignKeys() {
		var table, parent string
		var rowid, fkid sql.NullInt64
		err := tx.QueryRowContext(ctx, "PRAGMA foreign_key_check").Scan(&table, &rowid, &parent, &fkid)
		switch {
		case err == nil:
			return fmt.Errorf("store: migration %s: a row of %s references a missing %s row", m.name, table, parent)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("store: migration %s: foreign_key_check: %w", m.name, err)
		}
	}
	// PRAGMA takes no bound parameters; m.version is an int we parsed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return fmt.Errorf("store: migration %s: set user_version: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migration %s: commit: %w", m.name, err)
	}
	return nil
}
