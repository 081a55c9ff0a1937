package warmpool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service/warmpool"
)

var (
	small = warmpool.Class{Image: "busybox", MilliCPU: 500, MemoryMB: 256}
	big   = warmpool.Class{Image: "busybox", MilliCPU: 1000, MemoryMB: 1024}
)

// fill runs refills until Next has nothing to start, each succeeding.
func fill(t *testing.T, p *warmpool.Pool, now time.Time) []warmpool.Idle {
	t.Helper()
	var made []warmpool.Idle
	for i := 0; ; i++ {
		c, ok, _ := p.Next(now)
		if !ok {
			return made
		}
		e := warmpool.Idle{ID: c.String() + "/" + string(rune('a'+i))}
		if !p.Filled(c, e, nil, now) {
			t.Fatalf("a wanted refill of %s was not kept", c)
		}
		made = append(made, e)
	}
}

func TestPool_RefillsToTargetThenServesOldestFirst(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 2}, big: {}})
	made := fill(t, p, time.Now())
	if len(made) != 2 {
		t.Fatalf("refilled %d, want 2 (the target)", len(made))
	}
	if _, ok := p.Take(big, time.Now()); ok {
		t.Fatal("took a sandbox of a class without a target")
	}
	e, ok := p.Take(small, time.Now())
	if !ok || e.ID != made[0].ID {
		t.Fatalf("took %v %v, want the oldest %s", e, ok, made[0].ID)
	}
	// Being claimed, it still counts: nothing to refill.
	if c, ok, _ := p.Next(time.Now()); ok {
		t.Fatalf("refill of %s started while a claim holds the class's sandbox", c)
	}
	// Given back, it is first again.
	if !p.GiveBack(small, e) {
		t.Fatal("the class no longer wants a sandbox it still has a target for")
	}
	if st := p.Status(); len(st) != 1 || st[0].Ready != 2 || st[0].IDs[0] != e.ID {
		t.Fatalf("status %+v, want 2 ready, %s first", st, e.ID)
	}
}

func TestPool_GiveBackAfterTheTargetShrankKeepsNothing(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1}})
	fill(t, p, time.Now())
	e, _ := p.Take(small, time.Now())
	p.SetTargets(nil)
	if p.GiveBack(small, e) {
		t.Fatal("a drained class took its sandbox back")
	}
}

func TestPool_FailedRefillBacksOff(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1}})
	now := time.Now()
	c, ok, _ := p.Next(now)
	if !ok {
		t.Fatal("nothing to refill")
	}
	p.Filled(c, warmpool.Idle{}, errors.New("engine down"), now)
	if _, ok, wait := p.Next(now); ok || wait <= 0 {
		t.Fatalf("after a failure: ok %v wait %v, want a backoff", ok, wait)
	}
	if _, ok, _ := p.Next(now.Add(2 * time.Second)); !ok {
		t.Fatal("no refill after the backoff")
	}
}

func TestPool_EvictsTheLargestFirst(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1}, big: {Size: 1}})
	fill(t, p, time.Now())
	for _, want := range []warmpool.Class{big, small} {
		e, ok := p.EvictLargest()
		if !ok || e.ID[:len(want.String())] != want.String() {
			t.Fatalf("evicted %v %v, want one of %s", e, ok, want)
		}
	}
	if _, ok := p.EvictLargest(); ok {
		t.Fatal("evicted from an empty pool")
	}
}

func TestPool_ColdCreatesHoldTheRefill(t *testing.T) {
	p := warmpool.New(8)
	done := p.ColdCreate()
	if !p.Busy() {
		t.Fatal("not busy during a cold create")
	}
	done()
	if p.Busy() {
		t.Fatal("busy after the cold create ended")
	}
	select {
	case <-p.Wake():
	default:
		t.Fatal("the last cold create did not poke the refill loop")
	}
}

func TestPool_AdoptHonoursTheTarget(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1}})
	if !p.Adopt(small, warmpool.Idle{ID: "sb-1"}, time.Now()) {
		t.Fatal("no room for the first")
	}
	if p.Adopt(small, warmpool.Idle{ID: "sb-2"}, time.Now()) {
		t.Fatal("adopted past the target")
	}
	if got := p.Drain(); len(got) != 1 || got[0].ID != "sb-1" {
		t.Fatalf("drained %v", got)
	}
}
