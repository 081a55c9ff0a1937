package admission_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/admission"
)

func owned(owner string, milliCPU, memoryMB int64) admission.Request {
	return admission.Request{MilliCPU: milliCPU, MemoryMB: memoryMB, Owner: owner}
}

// TestReserveWithin_ConcurrentOwnerNeverExceedsQuota: of many concurrent
// reservations by one owner exactly the quota's worth succeed, each other
// one is a *QuotaError, and another owner still gets capacity.
func TestReserveWithin_ConcurrentOwnerNeverExceedsQuota(t *testing.T) {
	const goroutines, quota = 64, 3
	c := admission.New(admission.Budget{MilliCPU: 1_000_000, MemoryMB: 1_000_000})
	q := admission.Quota{Sandboxes: quota}
	start := make(chan struct{})
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			<-start
			errs[i] = c.ReserveWithin(fmt.Sprintf("sb-%d", i), owned("alice", 100, 64), q)
		})
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, err := range errs {
		var qe *admission.QuotaError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &qe) && errors.Is(err, admission.ErrQuotaExceeded):
			if qe.Dimension != "sandboxes" || qe.Limit != quota || qe.Used != quota || qe.RetryAfter <= 0 {
				t.Errorf("sb-%d: %+v", i, qe)
			}
		default:
			t.Errorf("sb-%d: %v", i, err)
		}
	}
	if ok != quota {
		t.Fatalf("%d reservations admitted under a quota of %d", ok, quota)
	}
	if err := c.ReserveWithin("sb-bob", owned("bob", 100, 64), q); err != nil {
		t.Errorf("another owner refused: %v", err)
	}
}

func TestReserveWithin_QuotaDimensions(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 100_000, MemoryMB: 100_000})
	q := admission.Quota{MilliCPU: 2000, MemoryMB: 1024}
	if err := c.ReserveWithin("a", owned("alice", 1500, 512), q); err != nil {
		t.Fatal(err)
	}
	var qe *admission.QuotaError
	if err := c.ReserveWithin("b", owned("alice", 1000, 256), q); !errors.As(err, &qe) || qe.Dimension != "cpu" {
		t.Errorf("over the CPU quota: %v", err)
	}
	if err := c.ReserveWithin("b", owned("alice", 500, 1024), q); !errors.As(err, &qe) || qe.Dimension != "memory" {
		t.Errorf("over the memory quota: %v", err)
	}
	// Bigger than the whole quota: never admitted, not worth a retry.
	if err := c.ReserveWithin("b", owned("alice", 4000, 64), q); !errors.Is(err, admission.ErrExceedsQuota) {
		t.Errorf("larger than the quota: %v", err)
	}
	// A resize counts the id once; a retry is free even when full.
	if err := c.ReserveWithin("a", owned("alice", 2000, 1024), q); err != nil {
		t.Errorf("resize within the quota: %v", err)
	}
	if err := c.ReserveWithin("a", owned("alice", 2000, 1024), q); err != nil {
		t.Errorf("retry at a full quota: %v", err)
	}
	c.Release("a")
	if err := c.ReserveWithin("b", owned("alice", 2000, 1024), q); err != nil {
		t.Errorf("after a release: %v", err)
	}
}

// TestReset_RecomputesOwners: after a Reset the quotas count exactly the
// live sandboxes of each owner.
func TestReset_RecomputesOwners(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 100_000, MemoryMB: 100_000})
	q := admission.Quota{Sandboxes: 2}
	c.ReserveWithin("gone", owned("alice", 100, 64), q)
	c.Reset(map[string]admission.Request{"a": owned("alice", 100, 64), "b": owned("alice", 100, 64), "c": owned("bob", 100, 64)})
	if err := c.ReserveWithin("d", owned("alice", 100, 64), q); !errors.Is(err, admission.ErrQuotaExceeded) {
		t.Errorf("alice holds 2 live sandboxes of 2: %v", err)
	}
	if err := c.ReserveWithin("d", owned("bob", 100, 64), q); err != nil {
		t.Errorf("bob holds 1 of 2: %v", err)
	}
}
