package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// races is the number of goroutines each race test runs.
const races = 64

// newStore opens a store on a fresh file with a manual clock.
func newStore(t *testing.T) (*store.Store, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	return storetest.New(t, store.Options{Clock: clock.Now}), clock
}

// createSandbox inserts a running sandbox with id and name.
func createSandbox(t *testing.T, s *store.Store, id, name string) store.Sandbox {
	t.Helper()
	sb := store.Sandbox{ID: id, Name: name, Image: "debian", State: store.StateRunning, Owner: "alice"}
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
	return sb
}

// sandboxID returns a well-formed sandbox id for i.
func sandboxID(i int) string { return fmt.Sprintf("sb-%016x", i) }

// race runs fn(i) for i in [0, n) on n goroutines released together, and waits.
func race(n int, fn func(i int)) {
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// rawDB opens path with no pragmas, for inspecting and tampering in tests.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpen_CreatesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
	var mode string
	if err := rawDB(t, path).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
}

func TestOpen_InvalidSynchronous(t *testing.T) {
	_, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), store.Options{Synchronous: "OFF"})
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Open(synchronous=OFF) = %v, want ErrInvalidArgument", err)
	}
}

func TestOpen_ReadPoolIsReadOnly(t *testing.T) {
	s, _ := newStore(t)
	_, err := store.ReaderForTest(s).Exec(`INSERT INTO sandboxes (id, image, state, created_at, updated_at)
		VALUES ('sb-x', 'debian', 'running', 1, 1)`)
	if err == nil {
		t.Fatal("insert through the read pool succeeded; want a read-only error")
	}
}

func TestLongWriteDoesNotBlockReads(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "one")

	tx, err := store.BeginWriteForTest(t.Context(), s)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO sandboxes (id, image, state, created_at, updated_at)
		VALUES ('sb-uncommitted', 'debian', 'running', 1, 1)`); err != nil {
		t.Fatalf("insert in held tx: %v", err)
	}

	// Reads complete while the writer is held, and see only committed rows.
	if _, err := s.GetSandbox(t.Context(), sandboxID(1)); err != nil {
		t.Fatalf("GetSandbox while writer held: %v", err)
	}
	if _, err := s.GetSandbox(t.Context(), "sb-uncommitted"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSandbox(uncommitted) = %v, want ErrNotFound", err)
	}
	items, _, err := s.ListSandboxes(t.Context(), store.ListFilter{})
	if err != nil || len(items) != 1 {
		t.Fatalf("ListSandboxes while writer held = %d items, %v; want 1", len(items), err)
	}

	// A write queues behind the held transaction (one writer) and proceeds once it ends.
	done := make(chan error)
	go func() {
		sb := store.Sandbox{ID: sandboxID(2), Image: "debian", State: store.StateRunning}
		done <- s.CreateSandbox(context.WithoutCancel(t.Context()), &sb)
	}()
	for store.WriterWaitsForTest(s) == 0 {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		t.Fatalf("CreateSandbox finished while the writer was held: %v", err)
	default:
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("CreateSandbox after the writer was released: %v", err)
	}
}
