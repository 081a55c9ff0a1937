package warmpool_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service/warmpool"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is t0 plus s seconds.
func at(s ...float64) []time.Time {
	out := make([]time.Time, len(s))
	for i, x := range s {
		out[i] = t0.Add(time.Duration(x * float64(time.Second)))
	}
	return out
}

func TestDecide(t *testing.T) {
	a := warmpool.Adaptive{Min: 2, Max: 10, Window: 10 * time.Second}
	now := t0.Add(100 * time.Second)
	cases := []struct {
		name string
		a    warmpool.Adaptive
		d    warmpool.Demand
		want warmpool.Decision
	}{
		{
			name: "quiet at the minimum: nothing to do, nothing to wait for",
			d:    warmpool.Demand{Target: 2, Supply: 2, IdleSince: at(0, 1), Room: 64},
			want: warmpool.Decision{Target: 2},
		},
		{
			name: "misses in the window grow the target to the window's demand",
			d:    warmpool.Demand{Target: 2, Supply: 0, Claims: at(95, 95), Misses: at(96, 96, 97), Room: 64},
			want: warmpool.Decision{Target: 5, Next: t0.Add(107 * time.Second)},
		},
		{
			name: "never past Max",
			d:    warmpool.Demand{Target: 2, Claims: at(95, 95), Misses: at(96, 96, 96, 96, 96, 96, 96, 96, 96, 96, 96), Room: 64},
			want: warmpool.Decision{Target: 10, Next: t0.Add(106 * time.Second)},
		},
		{
			name: "never past what the host's budget has room for",
			d:    warmpool.Demand{Target: 2, Supply: 1, Claims: at(95), Misses: at(96, 96, 96, 96, 96, 96), Room: 3},
			want: warmpool.Decision{Target: 4, Next: t0.Add(106 * time.Second)},
		},
		{
			name: "no room never takes the target below where it is",
			d:    warmpool.Demand{Target: 6, Supply: 1, Misses: at(96, 96, 96, 96, 96, 96, 96, 96), Room: 0},
			want: warmpool.Decision{Target: 6, Next: t0.Add(106 * time.Second)},
		},
		{
			name: "misses older than the window count for nothing",
			d:    warmpool.Demand{Target: 2, Supply: 2, Misses: at(80, 85, 89.5), IdleSince: at(99, 99), Room: 64},
			want: warmpool.Decision{Target: 2},
		},
		{
			name: "a smaller demand than the target grows nothing and shrinks nothing while misses are recent",
			d:    warmpool.Demand{Target: 8, Supply: 8, Misses: at(95), IdleSince: at(80, 80, 80, 80, 96, 96, 96, 96), Room: 64},
			want: warmpool.Decision{Target: 8, Next: t0.Add(105 * time.Second)},
		},
		{
			name: "idle a whole window: given up, oldest first, the target drops with them",
			d:    warmpool.Demand{Target: 8, Supply: 8, Misses: at(50), IdleSince: at(80, 85, 90, 95, 96, 97, 98, 99), Room: 64},
			want: warmpool.Decision{Target: 5, Release: 3, Next: t0.Add(105 * time.Second)},
		},
		{
			name: "never below Min, however long they idle",
			d:    warmpool.Demand{Target: 4, Supply: 4, IdleSince: at(1, 2, 3, 4), Room: 64},
			want: warmpool.Decision{Target: 2, Release: 2},
		},
		{
			name: "the exact window's edge counts as idle a window",
			d:    warmpool.Demand{Target: 3, Supply: 3, IdleSince: at(90, 95, 99), Room: 64},
			want: warmpool.Decision{Target: 2, Release: 1},
		},
		{
			name: "claimed ones (not idle) are not given up; the target waits for the refill",
			d:    warmpool.Demand{Target: 6, Supply: 6, Claims: at(99), IdleSince: at(99.5), Room: 64},
			want: warmpool.Decision{Target: 6, Next: t0.Add(109500 * time.Millisecond)},
		},
		{
			name: "a target above a lowered Max comes down at once",
			a:    warmpool.Adaptive{Min: 1, Max: 3, Window: 10 * time.Second},
			d:    warmpool.Demand{Target: 9, Supply: 9, IdleSince: at(99), Room: 64},
			want: warmpool.Decision{Target: 3, Next: t0.Add(109 * time.Second)},
		},
		{
			name: "a target below a raised Min goes up at once",
			a:    warmpool.Adaptive{Min: 4, Max: 8, Window: 10 * time.Second},
			d:    warmpool.Demand{Target: 1, Supply: 1, Room: 0},
			want: warmpool.Decision{Target: 4},
		},
		{
			name: "from zero: a pool that keeps nothing until demand comes",
			a:    warmpool.Adaptive{Min: 0, Max: 8, Window: 10 * time.Second},
			d:    warmpool.Demand{Target: 0, Misses: at(99, 99, 99), Room: 64},
			want: warmpool.Decision{Target: 3, Next: t0.Add(109 * time.Second)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := a
			if tc.a != (warmpool.Adaptive{}) {
				cfg = tc.a
			}
			if got := warmpool.Decide(cfg, tc.d, now); got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The pool driven by an injected clock through a burst and the idleness
// after it: misses grow the target, refills fill it, idle sandboxes are
// given up a window later, and a second burst grows it again.
func TestPool_AdaptiveGrowsOnMissesAndShrinksWhenIdle(t *testing.T) {
	const window = 30 * time.Second
	p := warmpool.New(64)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1, Max: 6, Window: window}})
	roomy := warmpool.Free{MilliCPU: 1 << 40, MemoryMB: 1 << 40}
	now := t0
	fill(t, p, now)
	target := func() int {
		t.Helper()
		st := p.Status()
		if len(st) != 1 {
			t.Fatalf("status %+v, want one class", st)
		}
		return st[0].Target
	}

	// A burst of 5: one claim (whose create was then refused: the
	// sandbox goes back, the claim still counts as demand), four misses
	// served cold.
	e, ok := p.Take(small, now)
	if !ok || !p.GiveBack(small, e) {
		t.Fatal("nothing to take, or not taken back")
	}
	for range 4 {
		p.Missed(small, now)
	}
	if release, next := p.Adapt(now, roomy); len(release) != 0 || next != window {
		t.Fatalf("Adapt after the burst: release %v, next %v; want none, %v", release, next, window)
	}
	if got := target(); got != 5 {
		t.Fatalf("target after a burst of 5 = %d, want 5", got)
	}
	now = now.Add(time.Second)
	if made := fill(t, p, now); len(made) != 4 {
		t.Fatalf("refilled %d, want 4 (beside the one given back)", len(made))
	}

	// Idle past the window: all but the minimum given up.
	now = now.Add(window)
	release, next := p.Adapt(now, roomy)
	if len(release) != 4 || next != 0 || target() != 1 {
		t.Fatalf("after a window idle: released %d, next %v, target %d; want 4, 0, 1", len(release), next, target())
	}
	if st := p.Status(); st[0].Ready != 1 {
		t.Fatalf("ready %d after the shrink, want 1", st[0].Ready)
	}
	if made := fill(t, p, now); len(made) != 0 {
		t.Fatalf("refilled %d after the shrink, want none", len(made))
	}

	// A class that does not follow demand never grows.
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1}})
	for range 10 {
		p.Missed(small, now)
	}
	p.Adapt(now, roomy)
	if got := target(); got != 1 {
		t.Fatalf("a fixed class's target moved to %d", got)
	}
}

// Growth takes at most half of what the host's budget has free.
func TestPool_AdaptiveGrowthIsBoundedByTheBudget(t *testing.T) {
	p := warmpool.New(64)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 0, Max: 64, Window: time.Minute}})
	for range 40 {
		p.Missed(small, t0)
	}
	// small is 500m, 256 MB: 4 cores and 2 GiB free leave room for 4.
	p.Adapt(t0, warmpool.Free{MilliCPU: 4000, MemoryMB: 2048})
	if st := p.Status(); st[0].Target != 4 {
		t.Fatalf("target %d with room for 4 (half of 8)", st[0].Target)
	}
	// Setting the same configuration again keeps the target.
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 0, Max: 64, Window: time.Minute}})
	if st := p.Status(); st[0].Target != 4 {
		t.Fatalf("target %d after the same configuration again, want 4", st[0].Target)
	}
	// A full host: no growth at all.
	p.Adapt(t0, warmpool.Free{})
	if st := p.Status(); st[0].Target != 4 {
		t.Fatalf("target %d on a full host, want it left at 4", st[0].Target)
	}
}

// What a create adds to the chain for an adaptive class: a claim's
// timestamp under the pool's mutex (Take, served), or a miss's (Missed,
// after a cold create), both bounded by the class's max.
func BenchmarkPool_AdaptiveDemand(b *testing.B) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1, Max: 64, Window: time.Minute}})
	now := t0
	b.Run("missed", func(b *testing.B) {
		for range b.N {
			now = now.Add(time.Millisecond)
			p.Missed(small, now)
			select {
			case <-p.Wake():
			default:
			}
		}
	})
	b.Run("take", func(b *testing.B) {
		for range b.N {
			now = now.Add(time.Millisecond)
			p.Take(small, now) // an empty pool: a miss costs only the lookup
		}
	})
}

// A class that was fixed and becomes adaptive starts at its minimum;
// setting an adaptive class again keeps its target.
func TestPool_AdaptiveStartsAtItsMinimum(t *testing.T) {
	p := warmpool.New(8)
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 5}})
	p.SetTargets(map[warmpool.Class]warmpool.Config{small: {Size: 1, Max: 8, Window: time.Minute}})
	if st := p.Status(); st[0].Target != 1 {
		t.Fatalf("target %d, want the minimum 1", st[0].Target)
	}
}
