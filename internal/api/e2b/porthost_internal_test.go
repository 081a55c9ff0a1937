package e2b

import (
	"context"
	"errors"
	"fmt"
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

	// listenProbes probes hang (listenProbesPerSandbox per sandbox); the
	// next ask is no at once, without one.
	blocking.Store(true)
	var wg sync.WaitGroup
	for p := range listenProbes {
		wg.Add(1)
		go func() { defer wg.Done(); l.listens(ctx, fmt.Sprintf("sb-b%d", p/listenProbesPerSandbox), 20000+p) }()
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

// TestListening_OneSandboxHoldsAtMostItsShareOfProbes: a sandbox whose
// ports accept slowly holds listenProbesPerSandbox probes at once; more
// asks for it are no without a probe, and another sandbox still gets one.
func TestListening_OneSandboxHoldsAtMostItsShareOfProbes(t *testing.T) {
	release := make(chan struct{})
	var slow atomic.Int64
	l := newListening(func(ctx context.Context, id string, port int) error {
		if id == "sb-slow" {
			slow.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	for p := range listenProbesPerSandbox {
		wg.Add(1)
		go func() { defer wg.Done(); l.listens(t.Context(), "sb-slow", 1+p) }()
	}
	for deadline := time.Now().Add(30 * time.Second); slow.Load() < listenProbesPerSandbox; {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes of the slow sandbox started, want %d", slow.Load(), listenProbesPerSandbox)
		}
		time.Sleep(time.Millisecond)
	}
	for p := range 20 {
		if l.listens(t.Context(), "sb-slow", 100+p) {
			t.Fatal("an ask past the sandbox's probes at once: yes, want no")
		}
	}
	if got := slow.Load(); got != listenProbesPerSandbox {
		t.Errorf("%d probes of the slow sandbox, want %d", got, listenProbesPerSandbox)
	}
	if !l.listens(t.Context(), "sb-other", 8080) {
		t.Error("another sandbox's port: no, want a probe and yes")
	}
}
