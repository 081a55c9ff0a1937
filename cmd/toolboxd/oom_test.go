package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
)

// passWaiter runs start and waits for nothing.
type passWaiter struct{}

func (passWaiter) Start(start func() (int, error)) (<-chan reaper.Exit, error) {
	_, err := start()
	return nil, err
}

// TestOOMGuard_LowersItsGuardOnlyForTheFork: an agent at -1000 is at -999
// while a child forks (so the child is never born immune) and back at
// -1000 right after. The test machines cannot write negative scores, so
// the guard writes to a file here.
func TestOOMGuard_LowersItsGuardOnlyForTheFork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom_score_adj")
	self, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	g := &oomGuard{inner: passWaiter{}, log: slog.New(slog.DiscardHandler), self: self}
	var atFork string
	if _, err := g.Start(func() (int, error) {
		b, _ := os.ReadFile(path)
		atFork = string(b)
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if atFork != "-999" || string(after) != "-999-1000" {
		t.Errorf("score file at the fork %q, after %q; want -999, then -1000 written", atFork, after)
	}
}
