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

// What an owner holds elsewhere (a cluster's other nodes) counts against
// its quota here, in every dimension, and only against a quota: an owner
// without one, and the host's budget, are not touched by it. Holdings
// reports what each owner holds here, for the other nodes to count.
func TestReserveWithin_CountsWhatTheOwnerHoldsElsewhere(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 100_000, MemoryMB: 100_000})
	elsewhere := map[string]admission.Holding{
		"alice": {Sandboxes: 2, Request: admission.Request{MilliCPU: 1000, MemoryMB: 256}},
	}
	c.SetElsewhere(func(owner string) admission.Holding { return elsewhere[owner] })
	var qe *admission.QuotaError
	if err := c.ReserveWithin("a1", owned("alice", 100, 64), admission.Quota{Sandboxes: 2}); !errors.As(err, &qe) || qe.Dimension != "sandboxes" || qe.Used != 2 {
		t.Fatalf("alice runs 2 elsewhere under a quota of 2: %v", err)
	}
	if err := c.ReserveWithin("a1", owned("alice", 1500, 64), admission.Quota{MilliCPU: 2000}); !errors.As(err, &qe) || qe.Dimension != "cpu" || qe.Used != 1000 {
		t.Fatalf("alice holds 1 core elsewhere, asks 1.5 under 2: %v", err)
	}
	if err := c.ReserveWithin("a1", owned("alice", 100, 800), admission.Quota{MemoryMB: 1024}); !errors.As(err, &qe) || qe.Dimension != "memory" {
		t.Fatalf("alice holds 256 MB elsewhere, asks 800 under 1024: %v", err)
	}
	if err := c.ReserveWithin("a1", owned("alice", 100, 64), admission.Quota{Sandboxes: 3}); err != nil {
		t.Fatalf("a third sandbox under a quota of 3: %v", err)
	}
	if err := c.ReserveWithin("a2", owned("alice", 100, 64), admission.Quota{}); err != nil {
		t.Fatalf("no quota: %v", err)
	}
	if err := c.ReserveWithin("b1", owned("bob", 100, 64), admission.Quota{Sandboxes: 1}); err != nil {
		t.Fatalf("bob holds nothing elsewhere: %v", err)
	}
	got := c.Holdings()
	want := map[string]admission.Holding{
		"alice": {Sandboxes: 2, Request: admission.Request{MilliCPU: 200, MemoryMB: 128}},
		"bob":   {Sandboxes: 1, Request: admission.Request{MilliCPU: 100, MemoryMB: 64}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Holdings = %v, want %v (this controller's only)", got, want)
	}
}

// TestReserveWithin_DiskQuota: disk limits sum per owner against the
// quota's DiskMB (not against the host's budget, which has no disk), a
// release gives them back, and another owner is not counted.
func TestReserveWithin_DiskQuota(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 100_000, MemoryMB: 100_000})
	q := admission.Quota{DiskMB: 1000}
	disk := func(owner string, mb int64) admission.Request {
		return admission.Request{MilliCPU: 100, MemoryMB: 64, DiskMB: mb, Owner: owner}
	}
	if err := c.ReserveWithin("a", disk("alice", 600), q); err != nil {
		t.Fatal(err)
	}
	var qe *admission.QuotaError
	if err := c.ReserveWithin("b", disk("alice", 500), q); !errors.As(err, &qe) || qe.Dimension != "disk" || qe.Limit != 1000 || qe.Used != 600 {
		t.Fatalf("second reservation past the disk quota: %v, want a disk *QuotaError (limit 1000, used 600)", err)
	}
	if _, held := c.Held("b"); held {
		t.Fatal("a refused reservation is held")
	}
	if err := c.ReserveWithin("b", disk("bob", 900), q); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	if err := c.ReserveWithin("c", disk("alice", 2000), q); !errors.Is(err, admission.ErrExceedsQuota) {
		t.Fatalf("larger than the whole quota: %v, want ErrExceedsQuota", err)
	}
	c.Release("a")
	if err := c.ReserveWithin("d", disk("alice", 1000), q); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if got := c.Holdings()["alice"].DiskMB; got != 1000 {
		t.Errorf("Holdings: alice's disk %d, want 1000", got)
	}
}

// TestReserveWithin_DiskAloneIsNoSandbox: a hold of disk alone (a
// volume's size) counts in the disk quota only: not against the owner's
// sandboxes, and it needs no room on a host that is full (or overcommitted
// after a Reset).
func TestReserveWithin_DiskAloneIsNoSandbox(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 1000, MemoryMB: 1000})
	q := admission.Quota{Sandboxes: 1, DiskMB: 1000}
	if err := c.ReserveWithin("sb", admission.Request{MilliCPU: 1000, MemoryMB: 1000, DiskMB: 100, Owner: "alice"}, q); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"volume:alice/a", "volume:alice/b"} {
		if err := c.ReserveWithin(id, admission.Request{DiskMB: 300, Owner: "alice"}, q); err != nil {
			t.Fatalf("%s beside the owner's one sandbox on a full host: %v", id, err)
		}
	}
	var qe *admission.QuotaError
	if err := c.ReserveWithin("volume:alice/c", admission.Request{DiskMB: 400, Owner: "alice"}, q); !errors.As(err, &qe) || qe.Dimension != "disk" {
		t.Fatalf("a volume past the disk quota: %v, want a disk *QuotaError", err)
	}
	if got := c.Holdings()["alice"]; got.Sandboxes != 1 || got.DiskMB != 700 {
		t.Errorf("Holdings: %+v, want 1 sandbox and 700 MB of disk", got)
	}
}

// TestPark_StoppedSandboxKeepsItsDisk: a stopped sandbox (Park) gives its
// CPU, memory and place among the owner's running sandboxes back, but its
// container keeps what it wrote, so its disk counts in the owner's quota
// until it is destroyed: stop-and-create cycles cannot pass the quota.
func TestPark_StoppedSandboxKeepsItsDisk(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 4000, MemoryMB: 4096})
	q := admission.Quota{Sandboxes: 1, DiskMB: 100}
	sized := func(disk int64) admission.Request {
		return admission.Request{MilliCPU: 1000, MemoryMB: 512, DiskMB: disk, Owner: "alice"}
	}
	if err := c.ReserveWithin("a", sized(64), q); err != nil {
		t.Fatalf("first: %v", err)
	}
	c.Park("a")
	if got, _ := c.Held("a"); got != (admission.Request{DiskMB: 64, Owner: "alice"}) {
		t.Fatalf("parked holds %v, want only its 64 MB of disk", got)
	}
	if used, _ := c.Usage(); used.MilliCPU != 0 || used.MemoryMB != 0 {
		t.Errorf("the host still holds %v for a stopped sandbox", used)
	}
	// Its running slot is free (quota of 1 sandbox), its disk is not.
	var qe *admission.QuotaError
	if err := c.ReserveWithin("b", sized(64), q); !errors.As(err, &qe) || qe.Dimension != "disk" {
		t.Fatalf("a create past the disk a stopped sandbox holds: %v, want the disk quota", err)
	}
	if err := c.ReserveWithin("b", sized(32), q); err != nil {
		t.Fatalf("a create within what is left: %v", err)
	}
	// Starting a again is a resize of its parked reservation: the running
	// slot is b's now.
	if err := c.ReserveWithin("a", sized(64), q); !errors.As(err, &qe) || qe.Dimension != "sandboxes" {
		t.Fatalf("start past the sandboxes quota: %v, want it refused on sandboxes", err)
	}
	if got, _ := c.Held("a"); got.DiskMB != 64 || got.MilliCPU != 0 {
		t.Errorf("a refused start changed the parked reservation: %v", got)
	}
	if h := c.Holdings()["alice"]; h.Sandboxes != 1 || h.DiskMB != 96 {
		t.Errorf("alice holds %+v, want 1 running sandbox and 96 MB of disk", h)
	}
	// Destroy frees the disk.
	c.Release("a")
	if h := c.Holdings()["alice"]; h.DiskMB != 32 {
		t.Errorf("after the destroy alice holds %+v, want 32 MB of disk", h)
	}
	c.Park("missing") // a no-op
	c.Release("b")
	if _, ok := c.Holdings()["alice"]; ok {
		t.Error("alice still listed after all is released")
	}
}
