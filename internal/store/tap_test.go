package store_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
)

func TestTapSlots_AllocateIdempotentRelease(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	for range 2 { // seeding is idempotent
		if err := s.SeedTapSlots(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.AllocateTapSlot(ctx, "sb-a")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.AllocateTapSlot(ctx, "sb-a"); err != nil || again != a {
		t.Fatalf("second allocation for sb-a = %d, %v; want %d", again, err, a)
	}
	b, err := s.AllocateTapSlot(ctx, "sb-b")
	if err != nil || b == a {
		t.Fatalf("allocation for sb-b = %d, %v; want a slot other than %d", b, err, a)
	}
	_, err = s.AllocateTapSlot(ctx, "sb-c")
	var pe *store.PoolExhaustedError
	if !errors.Is(err, store.ErrPoolExhausted) || !errors.As(err, &pe) || pe.Hi != 1 {
		t.Fatalf("third allocation = %v, want PoolExhaustedError{Hi: 1}", err)
	}
	// The holder of a slot still gets it back when the pool is full.
	if again, err := s.AllocateTapSlot(ctx, "sb-b"); err != nil || again != b {
		t.Fatalf("retry for sb-b on a full pool = %d, %v; want %d", again, err, b)
	}
	for range 2 { // release is idempotent
		if err := s.ReleaseTapSlot(ctx, "sb-a"); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := s.AllocateTapSlot(ctx, "sb-c"); err != nil || c != a {
		t.Fatalf("allocation after release = %d, %v; want %d", c, err, a)
	}
	got, err := s.ListTapSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"sb-b": b, "sb-c": a}, got); diff != "" {
		t.Errorf("ListTapSlots (-want +got):\n%s", diff)
	}
}

func TestTapSlots_EmptyPool(t *testing.T) {
	s, _ := newStore(t)
	if _, err := s.AllocateTapSlot(t.Context(), "sb-a"); !errors.Is(err, store.ErrPoolExhausted) {
		t.Fatalf("allocation from an unseeded pool = %v, want ErrPoolExhausted", err)
	}
}

// TestTapSlots_RacePoolExhaustion: 32 sandboxes, two callers each, race for 16 slots.
func TestTapSlots_RacePoolExhaustion(t *testing.T) {
	const sandboxes, slots = 32, 16
	s, _ := newStore(t)
	if err := s.SeedTapSlots(t.Context(), slots); err != nil {
		t.Fatal(err)
	}
	got := make([]int, races)
	errs := make([]error, races)
	race(races, func(i int) {
		got[i], errs[i] = s.AllocateTapSlot(t.Context(), sandboxID(i%sandboxes))
	})
	holder := map[int]string{}
	exhausted := map[string]bool{}
	for i, err := range errs {
		sb := sandboxID(i % sandboxes)
		switch {
		case err == nil:
			if prev, ok := holder[got[i]]; ok && prev != sb {
				t.Errorf("slot %d given to %s and %s", got[i], prev, sb)
			}
			holder[got[i]] = sb
		case errors.Is(err, store.ErrPoolExhausted):
			exhausted[sb] = true
		default:
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if len(holder) != slots || len(exhausted) != sandboxes-slots {
		t.Errorf("%d slots held, %d sandboxes exhausted; want %d and %d", len(holder), len(exhausted), slots, sandboxes-slots)
	}
	for _, sb := range holder {
		if exhausted[sb] {
			t.Errorf("%s both got a slot and was told the pool is exhausted", sb)
		}
	}
	rows, err := s.ListTapSlots(t.Context())
	if err != nil || len(rows) != slots {
		t.Errorf("ListTapSlots = %d rows, %v; want %d", len(rows), err, slots)
	}
}
