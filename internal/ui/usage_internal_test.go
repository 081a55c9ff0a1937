package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallingMetrics is an API whose metrics never answer for token stall
// (a tenant whose sandboxes' size walks outlast every deadline) and answer
// at once for the others, counting calls by token.
type stallingMetrics struct {
	stall string

	mu       sync.Mutex
	inFlight map[string]int
	calls    map[string]int
}

func (f *stallingMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	f.inFlight[tok]++
	f.calls[tok]++
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFlight[tok]--; f.mu.Unlock() }()
	if tok == f.stall {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"cpu_percent": 7}`)
}

func (f *stallingMetrics) state(tok string) (inFlight, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight[tok], f.calls[tok]
}

func decodeUsage(t *testing.T, w *httptest.ResponseRecorder) map[string]usageJSON {
	t.Helper()
	var body struct {
		Items map[string]usageJSON `json:"items"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil {
		t.Fatalf("usage: %d %s", w.Code, w.Body)
	}
	return body.Items
}

// TestUsage_OneOwnerCannotStallTheOthers: tenant A's samples never come,
// and two of A's tabs poll 2 of its sandboxes each (as many as the
// dashboard has slots), without pause. Tenant
// B's samples still come at once (A holds its share of the slots, not
// all of them); A's say that they did not come in time, and name no
// engine.
func TestUsage_OneOwnerCannotStallTheOthers(t *testing.T) {
	api := &stallingMetrics{stall: "sbx_a", inFlight: map[string]int{}, calls: map[string]int{}}
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var polls sync.WaitGroup
	t.Cleanup(func() { close(stop); h.Close(); polls.Wait() })
	aAnswers := make(chan map[string]usageJSON, 64)
	for tab := range 2 {
		a := openLocal(t, h, "sbx_a", "a", "127.0.0.1:7070")
		polls.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, usageRequest(a, 2, tab*2))
				if w.Code == http.StatusOK {
					select {
					case aAnswers <- decodeUsage(t, w):
					default:
					}
				}
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, _ := api.state("sbx_a"); n >= maxUsageCallsPerOwner {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's calls never took their slots")
		}
		time.Sleep(10 * time.Millisecond)
	}

	b := openLocal(t, h, "sbx_b", "b", "127.0.0.1:7070")
	start := time.Now()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, usageRequest(b, 2, 100))
	took := time.Since(start)
	for id, u := range decodeUsage(t, w) {
		if u.Error != "" || u.CPUPercent != 7 {
			t.Errorf("B's %s after %v: %+v, want its sample", id, took, u)
		}
	}
	if took >= usageCallTimeout {
		t.Errorf("B waited %v for samples the API gives at once (A's stalled calls took its slots)", took)
	}
	if n, _ := api.state("sbx_a"); n > maxUsageCallsPerOwner {
		t.Errorf("A has %d metrics calls in flight, more than its share %d", n, maxUsageCallsPerOwner)
	}

	select {
	case items := <-aAnswers:
		for id, u := range items {
			if u.Error == "" {
				t.Errorf("A's %s: a sample, from an API that gives none", id)
			}
			if strings.Contains(u.Error, "engine") {
				t.Errorf("A's %s: %q blames an engine", id, u.Error)
			}
		}
	case <-time.After(2 * usageWait):
		t.Fatal("A's polls never got an answer")
	}
}

// TestUsage_OneCallPerSandboxShared: several tabs of one token asking for
// the same sandboxes at once share one metrics call per sandbox, and its
// answer serves them for usageCacheFor; another token makes its own.
func TestUsage_OneCallPerSandboxShared(t *testing.T) {
	api := &slowMetrics{release: make(chan struct{})}
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	const tabs = 5
	answers := make(chan *httptest.ResponseRecorder, tabs)
	for range tabs {
		s := openLocal(t, h, "sbx_one", "one", "127.0.0.1:7070")
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, usageRequest(s, 2, 0))
			answers <- w
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, _, _ := api.state(); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two calls never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(api.release)
	for range tabs {
		for id, u := range decodeUsage(t, <-answers) {
			if u.Error != "" {
				t.Errorf("%s: %+v", id, u)
			}
		}
	}
	if _, _, calls := api.state(); calls != 2 {
		t.Fatalf("%d tabs asking for 2 sandboxes made %d metrics calls, want 2", tabs, calls)
	}
	again := openLocal(t, h, "sbx_one", "one", "127.0.0.1:7070")
	decodeUsage(t, func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, usageRequest(again, 2, 0))
		return w
	}())
	if _, _, calls := api.state(); calls != 2 {
		t.Fatalf("a poll right after made %d calls in all, want the cached 2", calls)
	}
	other := openLocal(t, h, "sbx_two", "two", "127.0.0.1:7070")
	decodeUsage(t, func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, usageRequest(other, 2, 0))
		return w
	}())
	if _, _, calls := api.state(); calls != 4 {
		t.Fatalf("another token's poll: %d calls in all, want 4 (samples are not shared across tokens)", calls)
	}
}

// TestFairSlots_Turns: a freed slot goes to the next waiting owner below
// its share, in turn; a waiter that gives up leaves nothing queued.
func TestFairSlots_Turns(t *testing.T) {
	f := newFairSlots(3, 2)
	ctx := t.Context()
	for _, o := range []string{"a", "a", "b"} {
		if err := f.acquire(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 4)
	waitFor := func(owner string) {
		go func() {
			if f.acquire(ctx, owner) == nil {
				got <- owner
			}
		}()
	}
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			f.mu.Lock()
			w := 0
			for _, o := range f.owners {
				w += len(o.waiters)
			}
			f.mu.Unlock()
			if w == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters, want %d", w, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("a")
	queued(1)
	waitFor("c")
	queued(2)
	f.release("b") // a is at its share: c is served first
	if o := <-got; o != "c" {
		t.Fatalf("the freed slot went to %s, want c", o)
	}
	f.release("a")
	if o := <-got; o != "a" {
		t.Fatalf("the next freed slot went to %s, want a", o)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.acquire(gone, "d"); err == nil {
		t.Fatal("an acquire with an ended context took a slot")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used != 3 || len(f.turns) != 0 || f.owners["d"] != nil {
		t.Fatalf("used %d, turns %v, d %+v; want 3, none, none", f.used, f.turns, f.owners["d"])
	}
}

// TestUsage_CacheBounded: a tenant naming sandbox ids at random makes a
// flight for each; the ones past usageCacheFor are swept, so the map
// holds about what the last few seconds made, not everything ever asked.
func TestUsage_CacheBounded(t *testing.T) {
	api := &stallingMetrics{inFlight: map[string]int{}, calls: map[string]int{}}
	var mu sync.Mutex
	clock := time.Now() // sessions' contexts end at their expiry by the wall clock
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := openLocal(t, h, "sbx_one", "one", "127.0.0.1:7070")
	peak := 0
	for i := range 300 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, usageRequest(s, maxUsageBatch, i*maxUsageBatch))
		for id, u := range decodeUsage(t, w) {
			if u.Error != "" {
				t.Fatalf("request %d, %s: %s", i, id, u.Error)
			}
		}
		mu.Lock()
		clock = clock.Add(time.Second)
		mu.Unlock()
		h.flights.mu.Lock()
		peak = max(peak, len(h.flights.m))
		h.flights.mu.Unlock()
	}
	if _, calls := api.state("sbx_one"); calls != 300*maxUsageBatch {
		t.Fatalf("%d metrics calls for %d distinct sandboxes", calls, 300*maxUsageBatch)
	}
	if limit := 2*minFlightSweep + maxUsageBatch; peak > limit {
		t.Fatalf("the flight cache held %d entries at its peak, want at most %d", peak, limit)
	}
}
