package ingress

import (
	"context"
	"sync"
)

// Table is the set of sandboxes that accept traffic. It is safe for
// concurrent use; Install and Remove are idempotent.
type Table struct {
	mu     sync.RWMutex
	routes map[string]struct{}
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{routes: map[string]struct{}{}} }

// Install makes a sandbox routable. Installing it again is a no-op.
func (t *Table) Install(_ context.Context, sandboxID string) error {
	t.mu.Lock()
	t.routes[sandboxID] = struct{}{}
	t.mu.Unlock()
	return nil
}

// Remove stops routing to a sandbox. Removing an absent route is a no-op.
func (t *Table) Remove(_ context.Context, sandboxID string) error {
	t.mu.Lock()
	delete(t.routes, sandboxID)
	t.mu.Unlock()
	return nil
}

// Has reports whether a sandbox is routable.
func (t *Table) Has(sandboxID string) bool {
	t.mu.RLock()
	_, ok := t.routes[sandboxID]
	t.mu.RUnlock()
	return ok
}

// Len is the number of routable sandboxes.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.routes)
}
