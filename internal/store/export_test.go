package store

import (
	"context"
	"database/sql"
)

// BeginWriteForTest opens a write transaction on the single writer connection, exactly as
// every mutation does, and hands it to the test to hold.
func BeginWriteForTest(ctx context.Context, s *Store) (*sql.Tx, error) {
	return s.writer.BeginTx(ctx, nil)
}

// LatestSchemaVersion is the newest migration version embedded in this binary.
func LatestSchemaVersion() (int, error) {
	migs, err := loadMigrations()
	return len(migs), err
}

// ReaderForTest is the read-only pool.
func ReaderForTest(s *Store) *sql.DB { return s.reader }

// WriterWaitsForTest is how many times a caller had to queue for the writer connection.
func WriterWaitsForTest(s *Store) int64 { return s.writer.Stats().WaitCount }
