package service

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestWakeFlight_BoundsAndMemo: one call per sandbox in flight, shared;
// at most maxWakingPerOwner of one owner's sandboxes at once, and at most
// maxWaking of all (the next is ErrUnavailable); a remembered failure is
// the answer until wakeFailMemo passed, a refusal not remembered is not.
func TestWakeFlight_BoundsAndMemo(t *testing.T) {
	now := time.Unix(1000, 0)
	f := wakeFlight{now: func() time.Time { return now }}
	starts := 0
	start := func() *wakeCall { starts++; return &wakeCall{done: make(chan struct{})} }
	calls := map[string]*wakeCall{}
	ownerOf := func(i int) string { return fmt.Sprintf("owner-%d", i/maxWakingPerOwner) }
	for i := range maxWaking {
		id := fmt.Sprintf("sb-%d", i)
		c, err := f.join(id, ownerOf(i), start)
		if err != nil {
			t.Fatal(err)
		}
		if i%maxWakingPerOwner == maxWakingPerOwner-1 {
			// The owner's share is taken: its next sandbox waits, another
			// owner's does not (below, while the total has room).
			if _, err := f.join("sb-more", ownerOf(i), start); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("join past %s's share = %v, want ErrUnavailable", ownerOf(i), err)
			}
		}
		if again, err := f.join(id, ownerOf(i), start); err != nil || again != c {
			t.Fatalf("a second join of %s = %p, %v; want the call in flight %p", id, again, err, c)
		}
		calls[id] = c
	}
	if starts != maxWaking {
		t.Errorf("%d resumes started for %d sandboxes", starts, maxWaking)
	}
	if _, err := f.join("sb-over", "owner-new", start); !errors.Is(err, ErrUnavailable) {
		t.Errorf("join past maxWaking = %v, want ErrUnavailable", err)
	}

	failed := fmt.Errorf("restore: %w", ErrUnavailable)
	calls["sb-0"].err = failed
	f.finish("sb-0", calls["sb-0"], true)
	calls["sb-1"].err = ErrQuotaExceeded
	f.finish("sb-1", calls["sb-1"], false)
	if _, err := f.join("sb-0", ownerOf(0), start); err != failed {
		t.Errorf("join after a failure = %v, want the failure", err)
	}
	if c, err := f.join("sb-1", ownerOf(1), start); err != nil || c == nil {
		t.Errorf("join after a refusal not remembered = %v, %v; want a new call", c, err)
	}
	now = now.Add(wakeFailMemo)
	if c, err := f.join("sb-0", ownerOf(0), start); err != nil || c == nil {
		t.Errorf("join once the failure is forgotten = %v, %v; want a new call", c, err)
	}
}
