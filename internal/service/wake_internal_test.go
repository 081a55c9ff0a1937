package service

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestWakeFlight_BoundsAndMemo: one call per sandbox in flight, shared;
// at most maxWaking sandboxes at once (the next is ErrUnavailable); a
// remembered failure is the answer until wakeFailMemo passed, a refusal
// not remembered is not.
func TestWakeFlight_BoundsAndMemo(t *testing.T) {
	now := time.Unix(1000, 0)
	f := wakeFlight{now: func() time.Time { return now }}
	starts := 0
	start := func() *wakeCall { starts++; return &wakeCall{done: make(chan struct{})} }
	calls := map[string]*wakeCall{}
	for i := range maxWaking {
		id := fmt.Sprintf("sb-%d", i)
		c, err := f.join(id, start)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := f.join(id, start); err != nil || again != c {
			t.Fatalf("a second join of %s = %p, %v; want the call in flight %p", id, again, err, c)
		}
		calls[id] = c
	}
	if starts != maxWaking {
		t.Errorf("%d resumes started for %d sandboxes", starts, maxWaking)
	}
	if _, err := f.join("sb-over", start); !errors.Is(err, ErrUnavailable) {
		t.Errorf("join past maxWaking = %v, want ErrUnavailable", err)
	}

	failed := fmt.Errorf("restore: %w", ErrUnavailable)
	calls["sb-0"].err = failed
	f.finish("sb-0", calls["sb-0"], true)
	calls["sb-1"].err = ErrQuotaExceeded
	f.finish("sb-1", calls["sb-1"], false)
	if _, err := f.join("sb-0", start); err != failed {
		t.Errorf("join after a failure = %v, want the failure", err)
	}
	if c, err := f.join("sb-1", start); err != nil || c == nil {
		t.Errorf("join after a refusal not remembered = %v, %v; want a new call", c, err)
	}
	now = now.Add(wakeFailMemo)
	if c, err := f.join("sb-0", start); err != nil || c == nil {
		t.Errorf("join once the failure is forgotten = %v, %v; want a new call", c, err)
	}
}
