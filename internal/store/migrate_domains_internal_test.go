package store

import (
	"path/filepath"
	"regexp"
	"testing"
)

// Migration 11: bindings made before custom domains needed proof of
// control were never proven, so they come out pending, each with a
// challenge of its own, and nothing routes them until verified.
func TestMigrate_CustomDomainsBecomePending(t *testing.T) {
	ctx := t.Context()
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	const v = 11
	if len(migs) < v {
		t.Fatalf("no migration %d", v)
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
		`INSERT INTO sandbox_custom_domains (hostname, sandbox_id, port, created_at, token) VALUES ('a.example', 'sb-1', 80, 1, 7)`,
		`INSERT INTO sandbox_custom_domains (hostname, sandbox_id, port, created_at, token) VALUES ('b.example', 'sb-1', 81, 1, 8)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := migrate(ctx, db, migs); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, `SELECT hostname, port, token, challenge, verified_at FROM sandbox_custom_domains ORDER BY hostname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	n := 0
	for rows.Next() {
		var (
			host, challenge string
			port            int
			token, verified int64
		)
		if err := rows.Scan(&host, &port, &token, &challenge, &verified); err != nil {
			t.Fatal(err)
		}
		n++
		if verified != 0 || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(challenge) || seen[challenge] {
			t.Errorf("%s after the migration: verified_at %d, challenge %q; want pending with a challenge of its own", host, verified, challenge)
		}
		seen[challenge] = true
	}
	if n != 2 {
		t.Errorf("%d bindings after the migration, want 2", n)
	}
	// One verified binding per hostname, pending ones beside it.
	for _, q := range []string{
		`INSERT INTO sandboxes (id, image, state, created_at, updated_at, expires_at) VALUES ('sb-2', 'img', 'running', 1, 1, 99)`,
		`INSERT INTO sandbox_custom_domains (hostname, sandbox_id, port, created_at, challenge) VALUES ('a.example', 'sb-2', 80, 1, 'c')`,
		`UPDATE sandbox_custom_domains SET verified_at = 5 WHERE hostname = 'a.example' AND sandbox_id = 'sb-1'`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE sandbox_custom_domains SET verified_at = 6 WHERE hostname = 'A.EXAMPLE' AND sandbox_id = 'sb-2'`); !isUniqueViolation(err) {
		t.Errorf("a second verified binding of a.example: %v, want a unique violation", err)
	}
}
