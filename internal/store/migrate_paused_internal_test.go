package store

import (
	"path/filepath"
	"testing"
)

// TestMigrate_PausedRebuildKeepsRowsAndReferences: migration 0008 rebuilds
// the sandboxes table (a new state in its CHECK) with foreign keys off; a
// database with a sandbox, its exposed port, custom domain and mount keeps
// all four, foreign keys are on again afterwards and still cascade, and the
// new CHECK ties paused to paused_at.
func TestMigrate_PausedRebuildKeepsRowsAndReferences(t *testing.T) {
	ctx := t.Context()
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	const v = 8
	if len(migs) < v || !migs[v-1].noForeignKeys() {
		t.Fatalf("migration %d is not the foreign-keys-off rebuild", v)
	}
	db, err := openPool(ctx, writerDSN(filepath.Join(t.TempDir(), "s.db"), SynchronousFull), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrate(ctx, db, migs[:v-1]); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, expires_at) VALUES ('sb-1', 'img', 'running', 1, 1, 99)`,
		`INSERT INTO exposed_ports (sandbox_id, port, protocol, reservation, created_at) VALUES ('sb-1', 80, 'http', 1, 1)`,
		`INSERT INTO sandbox_custom_domains (hostname, sandbox_id, port, created_at, token) VALUES ('a.example', 'sb-1', 80, 1, 1)`,
		`INSERT INTO sandbox_mounts (sandbox_id, idx, sealed_spec) VALUES ('sb-1', 0, x'00')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := migrate(ctx, db, migs); err != nil {
		t.Fatal(err)
	}
	count := func(table string) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, table := range []string{"sandboxes", "exposed_ports", "sandbox_custom_domains", "sandbox_mounts"} {
		if got := count(table); got != 1 {
			t.Errorf("%s has %d rows after the migration, want 1", table, got)
		}
	}
	var fk int
	if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign_keys = %d (%v) after the migration, want 1", fk, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE sandboxes SET state = 'paused' WHERE id = 'sb-1'`); err == nil {
		t.Errorf("a paused row without paused_at was accepted")
	}
	if _, err := db.ExecContext(ctx, `UPDATE sandboxes SET state = 'paused', paused_at = 5 WHERE id = 'sb-1'`); err != nil {
		t.Errorf("pause: %v", err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = 'sb-1'`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"exposed_ports", "sandbox_custom_domains", "sandbox_mounts"} {
		if got := count(table); got != 0 {
			t.Errorf("%s has %d rows after the sandbox's delete, want 0 (cascade)", table, got)
		}
	}
}
