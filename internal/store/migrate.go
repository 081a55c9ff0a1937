package store

import (
	"context"
	"database/sql"
	"embed"
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
		if err := applyMigration(ctx, db, m, len(migs)); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db *sql.DB, m migration, latest int) error {
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
	// PRAGMA takes no bound parameters; m.version is an int we parsed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
		return fmt.Errorf("store: migration %s: set user_version: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migration %s: commit: %w", m.name, err)
	}
	return nil
}
