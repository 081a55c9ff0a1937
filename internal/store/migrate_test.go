package store_test

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
)

// schemaOf returns the schema objects and user_version of the database at path.
func schemaOf(t *testing.T, path string) ([]string, int) {
	t.Helper()
	db := rawDB(t, path)
	rows, err := db.Query(`SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var objs []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return objs, v
}

func openClose(t *testing.T, path string) {
	t.Helper()
	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestMigrate_NewFileGetsSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	openClose(t, path)

	objs, v := schemaOf(t, path)
	latest, err := store.LatestSchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v != latest {
		t.Errorf("user_version = %d, want %d", v, latest)
	}
	for _, table := range []string{"sandboxes", "exposed_ports", "firecracker_tap_pool",
		"sandbox_custom_domains", "request_idempotency", "api_tokens", "sandbox_mounts"} {
		if !containsPrefix(objs, "table "+table+":") {
			t.Errorf("table %s missing from schema %q", table, objs)
		}
	}
	for _, index := range []string{"sandboxes_owner_name", "exposed_ports_host_port", "firecracker_tap_pool_sandbox"} {
		if !containsPrefix(objs, "index "+index+":") {
			t.Errorf("index %s missing from schema", index)
		}
	}
}

func containsPrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

func TestMigrate_ReopenChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	openClose(t, path)
	objs1, v1 := schemaOf(t, path)
	openClose(t, path)
	objs2, v2 := schemaOf(t, path)
	if v1 != v2 {
		t.Errorf("user_version changed on reopen: %d → %d", v1, v2)
	}
	if diff := cmp.Diff(objs1, objs2); diff != "" {
		t.Errorf("schema changed on reopen (-first +second):\n%s", diff)
	}
}

func TestMigrate_SchemaTooNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandboxd.db")
	openClose(t, path)
	latest, err := store.LatestSchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, dir)

	_, err = store.Open(t.Context(), path, store.Options{})
	var sve *store.SchemaVersionError
	if !errors.Is(err, store.ErrSchemaTooNew) || !errors.As(err, &sve) {
		t.Fatalf("Open(user_version=999) = %v, want ErrSchemaTooNew", err)
	}
	if sve.Found != 999 || sve.Supported != latest {
		t.Errorf("SchemaVersionError = %+v, want Found 999, Supported %d", sve, latest)
	}
	if diff := cmp.Diff(before, snapshotDir(t, dir)); diff != "" {
		t.Errorf("Open touched the directory (-before +after):\n%s", diff)
	}
}

// fileState is what a test compares to prove a file was not touched.
type fileState struct {
	Size    int64
	ModTime int64
	SHA     []byte
}

// snapshotDir records every file in dir with its size, mtime and content.
func snapshotDir(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]fileState)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fileState{Size: info.Size(), ModTime: info.ModTime().UnixNano(), SHA: bytes.Clone(b)}
	}
	return out
}

// TestMigrate_SchemaTooNewInWAL: a newer binary crashed with its user_version bump still in
// the WAL. The probe must read through the WAL, and still write neither file.
func TestMigrate_SchemaTooNewInWAL(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.db")
	openClose(t, src)
	db, err := sql.Open("sqlite", src+"?_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	// Copy the files while the writer is still open: what a crash leaves behind.
	dir := t.TempDir()
	path := filepath.Join(dir, "sandboxd.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshotDir(t, dir)

	if _, err := store.Open(t.Context(), path, store.Options{}); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
	}
	after := snapshotDir(t, dir)
	for _, name := range []string{"sandboxd.db", "sandboxd.db-wal"} {
		if diff := cmp.Diff(before[name], after[name]); diff != "" {
			t.Errorf("Open changed %s (-before +after):\n%s", name, diff)
		}
	}
}
