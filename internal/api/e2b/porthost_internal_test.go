package e2b

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestListening_RemembersYesOnlyAndBoundsProbes: a port that answered is
// not probed again within listenTTL; one that did not is probed again
// (it may have started since); past listenProbes probes at once the
// answer is no, without a probe.
func TestListening_RemembersYesOnlyAndBoundsProbes(t *testing.T) {
	var probes atomic.Int64
	open := map[int]bool{8080: true}
	release := make(chan struct{})
	var blocking atomic.Bool
	l := newListening(func(ctx context.Context, id string, port int) error {
		probes.Add(1)
		if blocking.Load() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		if open[port] {
			return nil
		}
		return errors.New("connection refused")
	})
	at := time.Now()
	l.now = func() time.Time { return at }
	ctx := t.Context()

	if !l.listens(ctx, "sb-a", 8080) || !l.listens(ctx, "sb-a", 8080) {
		t.Fatal("8080 listens: want yes")
	}
	if got := probes.Load(); got != 1 {
		t.Errorf("%d probes for two asks of a listening port, want 1 (the yes remembered)", got)
	}
	if l.listens(ctx, "sb-a", 9090) || l.listens(ctx, "sb-a", 9090) {
		t.Fatal("9090 is closed: want no")
	}
	if got := probes.Load(); got != 3 {
		t.Errorf("%d probes after two asks of a closed port, want 3 (a no is not remembered)", got)
	}
	at = at.Add(listenTTL)
	if !l.listens(ctx, "sb-a", 8080) || probes.Load() != 4 {
		t.Errorf("after listenTTL: %d probes, want a fresh one (4)", probes.Load())
	}

	// listenProbes probes hang; the next ask is no at once, without one.
	blocking.Store(true)
	var wg sync.WaitGroup
	for p := range listenProbes {
		wg.Add(1)
		go func() { defer wg.Done(); l.listens(ctx, "sb-b", 20000+p) }()
	}
	for deadline := time.Now().Add(30 * time.Second); probes.Load() < 4+listenProbes; {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes started, want %d", probes.Load()-4, listenProbes)
		}
		time.Sleep(time.Millisecond)
	}
	if l.listens(ctx, "sb-a", 8080+1) {
		t.Error("an ask past listenProbes probes at once: yes, want no")
	}
	if got := probes.Load(); got != 4+listenProbes {
		t.Errorf("%d probes, want %d: the ask past the bound probed", got, 4+listenProbes)
	}
	close(release)
	wg.Wait()
}
