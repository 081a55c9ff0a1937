package oci

import (
	"sync"
	"testing"
)

// TestKeyedLocks: one id's callers exclude each other, other ids' callers
// do not wait, and no entry outlives its last caller.
func TestKeyedLocks(t *testing.T) {
	var l keyedLocks
	a := l.of("sb-a")
	a.Lock()
	b := l.of("sb-b")
	b.Lock() // would deadlock if it waited for sb-a
	b.Unlock()

	const n = 50
	var wg sync.WaitGroup
	counter := 0
	for range n {
		wg.Go(func() {
			k := l.of("sb-a")
			k.Lock()
			counter++ // the race detector flags it unless the lock excludes
			k.Unlock()
		})
	}
	a.Unlock()
	wg.Wait()
	if counter != n {
		t.Fatalf("counter = %d, want %d", counter, n)
	}
	if len(l.m) != 0 {
		t.Fatalf("%d entries left, want none", len(l.m))
	}
}
