// Package storetest opens real SQLite stores for tests and provides a settable clock.
package storetest

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// New opens a store on a fresh file in t.TempDir() and closes it when the test ends.
// opts.Clock defaults to a new Clock.
func New(tb testing.TB, opts store.Options) *store.Store {
	tb.Helper()
	if opts.Clock == nil {
		opts.Clock = NewClock().Now
	}
	s, err := store.Open(tb.Context(), filepath.Join(tb.TempDir(), "sandboxd.db"), opts)
	if err != nil {
		tb.Fatalf("store.Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("store.Close: %v", err)
		}
	})
	return s
}

// Epoch is where a new Clock starts: a fixed, millisecond-aligned instant.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a manual clock, safe for concurrent use. Pass its Now as store.Options.Clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// NewClockAt returns a Clock set to t (tests that mix the clock with
// wall-clock times, such as a container's start, start it at time.Now()).
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
