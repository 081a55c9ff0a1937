package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

// claimFields compares the observable fields of a Claim.
var claimFields = cmpopts.IgnoreUnexported(store.Claim{})

func claimReq(hash string, ttl time.Duration) store.ClaimRequest {
	return store.ClaimRequest{Scope: "e2b.create", Fingerprint: "fp-1", RequestHash: hash, PendingTTL: ttl}
}

func mustClaim(t *testing.T, s *store.Store, req store.ClaimRequest, want store.Claim) store.Claim {
	t.Helper()
	got, err := s.Claim(t.Context(), req)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	want.Scope, want.Fingerprint = req.Scope, req.Fingerprint
	if diff := cmp.Diff(want, got, claimFields); diff != "" {
		t.Fatalf("Claim (-want +got):\n%s", diff)
	}
	return got
}

func TestClaim_AcquiredThenPending(t *testing.T) {
	s, clock := newStore(t)
	req := claimReq("h", 2*time.Minute)
	lock := storetest.Epoch.Add(2 * time.Minute)
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: lock})
	clock.Advance(2*time.Minute - time.Millisecond) // the last locked millisecond
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimPending, LockedUntil: lock})
}

func TestClaim_StalePendingIsReclaimed(t *testing.T) {
	s, clock := newStore(t)
	req := claimReq("h", time.Minute)
	first := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
	clock.Advance(time.Minute) // the lock has expired
	second := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, Reclaimed: true,
		LockedUntil: storetest.Epoch.Add(2 * time.Minute)})

	// The first holder lost the claim: it can neither complete nor delete it.
	if err := s.Complete(t.Context(), first, "sb-1", time.Minute); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete by the stale holder = %v, want ErrClaimLost", err)
	}
	if _, err := s.DeleteClaim(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimPending, LockedUntil: second.LockedUntil})
}

func TestClaim_ReadyWithinReplayWindow(t *testing.T) {
	s, clock := newStore(t)
	req := claimReq("h", time.Minute)
	c := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
	clock.Advance(5 * time.Second)
	if err := s.Complete(t.Context(), c, "sb-1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	replay := storetest.Epoch.Add(15 * time.Second)
	clock.Advance(10*time.Second - time.Millisecond)
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimReady, TargetID: "sb-1", ReplayUntil: replay})
}

func TestClaim_ExpiredReplayWindowIsReclaimed(t *testing.T) {
	s, clock := newStore(t)
	req := claimReq("h", time.Minute)
	c := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
	if err := s.Complete(t.Context(), c, "sb-1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, Reclaimed: true,
		LockedUntil: storetest.Epoch.Add(70 * time.Second)})
}

func TestClaim_DeleteStartsFresh(t *testing.T) {
	s, _ := newStore(t)
	req := claimReq("h", time.Minute)
	c := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
	for range 2 { // idempotent
		if _, err := s.DeleteClaim(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
}

func TestClaim_KeyReusedWithAnotherBody(t *testing.T) {
	s, clock := newStore(t)
	c := mustClaim(t, s, claimReq("body-1", time.Minute), store.Claim{Outcome: store.ClaimAcquired,
		LockedUntil: storetest.Epoch.Add(time.Minute)})
	if _, err := s.Claim(t.Context(), claimReq("body-2", time.Minute)); !errors.Is(err, store.ErrIdempotencyKeyReused) {
		t.Fatalf("pending, other body = %v, want ErrIdempotencyKeyReused", err)
	}
	if err := s.Complete(t.Context(), c, "sb-1", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(t.Context(), claimReq("body-2", time.Minute)); !errors.Is(err, store.ErrIdempotencyKeyReused) {
		t.Fatalf("ready, other body = %v, want ErrIdempotencyKeyReused", err)
	}
	if _, err := s.PeekClaim(t.Context(), claimReq("body-2", 0)); !errors.Is(err, store.ErrIdempotencyKeyReused) {
		t.Fatalf("peek, other body = %v, want ErrIdempotencyKeyReused", err)
	}
	clock.Advance(24 * time.Hour) // once the key expired, another body may use it
	mustClaim(t, s, claimReq("body-2", time.Minute), store.Claim{Outcome: store.ClaimAcquired, Reclaimed: true,
		LockedUntil: clock.Now().Add(time.Minute)})
}

func TestPeekClaim(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	req := claimReq("h", time.Minute)
	peek := func(want store.Claim) {
		t.Helper()
		got, err := s.PeekClaim(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want.Scope, want.Fingerprint = req.Scope, req.Fingerprint
		if diff := cmp.Diff(want, got, claimFields); diff != "" {
			t.Errorf("PeekClaim (-want +got):\n%s", diff)
		}
	}
	peek(store.Claim{Outcome: store.ClaimAvailable})
	c, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	peek(store.Claim{Outcome: store.ClaimPending, LockedUntil: c.LockedUntil})
	if err := s.Complete(ctx, c, "sb-1", time.Second); err != nil {
		t.Fatal(err)
	}
	peek(store.Claim{Outcome: store.ClaimReady, TargetID: "sb-1", ReplayUntil: clock.Now().Add(time.Second)})
	clock.Advance(time.Second)
	peek(store.Claim{Outcome: store.ClaimAvailable})

	// A peeked claim cannot complete anything.
	p, err := s.PeekClaim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, p, "sb-2", time.Second); !errors.Is(err, store.ErrClaimLost) {
		t.Errorf("Complete(peeked) = %v, want ErrClaimLost", err)
	}
}

func TestStaleClaims_ListAndFencedDelete(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	claims := map[string]store.Claim{}
	for i, fp := range []string{"a", "b", "c", "d"} {
		c, err := s.Claim(ctx, store.ClaimRequest{Scope: "x", Fingerprint: fp, PendingTTL: time.Duration(i+1) * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		claims[fp] = c
	}
	if err := s.AttachClaimTarget(ctx, claims["b"], "sb-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, claims["c"], "sb-c", time.Hour); err != nil {
		t.Fatal(err)
	}
	// d's target has a row: a retry needs d to adopt it, so it is not listed.
	createSandbox(t, s, "sb-d", "")
	if err := s.AttachClaimTarget(ctx, claims["d"], "sb-d"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second) // a, b and d are past their locks; c replays for an hour
	stale, err := s.ListStaleClaims(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		FP      string
		Pending bool
		Target  string
	}
	var got []row
	for _, sc := range stale {
		got = append(got, row{sc.Fingerprint, sc.Pending, sc.TargetID})
	}
	if diff := cmp.Diff([]row{{"a", true, ""}, {"b", true, "sb-b"}}, got); diff != "" {
		t.Fatalf("ListStaleClaims (-want +got):\n%s", diff)
	}

	// b is taken over between the listing and the delete: the delete is
	// fenced and leaves the new holder's claim alone.
	if _, err := s.Claim(ctx, store.ClaimRequest{Scope: "x", Fingerprint: "b", PendingTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		deleted, err := s.DeleteStaleClaim(ctx, stale[i])
		if err != nil || deleted != want {
			t.Errorf("DeleteStaleClaim(%s) = %v, %v; want %v", stale[i].Fingerprint, deleted, err, want)
		}
	}
	if c, err := s.PeekClaim(ctx, store.ClaimRequest{Scope: "x", Fingerprint: "b"}); err != nil || c.Outcome != store.ClaimPending {
		t.Errorf("b after prune = %v, %v; want pending (the new holder's)", c.Outcome, err)
	}
	if c, err := s.PeekClaim(ctx, store.ClaimRequest{Scope: "x", Fingerprint: "c"}); err != nil || c.Outcome != store.ClaimReady {
		t.Errorf("c after prune = %v, %v; want ready", c.Outcome, err)
	}
}

// A holder that reclaims a stale claim and then gives up (ReleaseClaim)
// leaves the dead holder's target attached: the next holder still sees it.
func TestClaim_ReclaimKeepsTargetUntilSettled(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	req := claimReq("h", time.Minute)
	first := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, LockedUntil: storetest.Epoch.Add(time.Minute)})
	if err := s.AttachClaimTarget(ctx, first, "sb-1"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	second := mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, Reclaimed: true,
		PreviousTarget: "sb-1", LockedUntil: storetest.Epoch.Add(2 * time.Minute)})
	if err := s.ReleaseClaim(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseClaim(ctx, first); err != nil { // lost: a no-op
		t.Fatal(err)
	}
	mustClaim(t, s, req, store.Claim{Outcome: store.ClaimAcquired, Reclaimed: true,
		PreviousTarget: "sb-1", LockedUntil: storetest.Epoch.Add(2 * time.Minute)})
}

func TestClaim_RaceOneAcquires(t *testing.T) {
	s, _ := newStore(t)
	var (
		mu       sync.Mutex
		outcomes = map[store.ClaimOutcome]int{}
	)
	race(races, func(int) {
		c, err := s.Claim(t.Context(), claimReq("h", time.Minute))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		outcomes[c.Outcome]++
		mu.Unlock()
	})
	want := map[store.ClaimOutcome]int{store.ClaimAcquired: 1, store.ClaimPending: races - 1}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// claimModel is the idempotency state machine as the spec states it.
type claimModel struct {
	rows map[string]modelRow // by fingerprint
}

type modelRow struct {
	ready       bool
	holder      int // index of the handle that holds the claim
	hash        string
	lockedUntil time.Time
	replayUntil time.Time
	target      string
}

func (r modelRow) live(now time.Time) bool {
	if r.ready {
		return now.Before(r.replayUntil)
	}
	return now.Before(r.lockedUntil)
}

// handle is a claim that Claim acquired, for Complete and DeleteClaim to use.
type handle struct {
	fp    string
	claim store.Claim
}

// TestClaim_Model drives Claim, Complete, DeleteClaim, PeekClaim and the clock with random
// operations and checks every answer against claimModel.
func TestClaim_Model(t *testing.T) {
	s, clock := newStore(t)
	iteration := 0
	rapid.Check(t, func(rt *rapid.T) {
		iteration++
		scope := fmt.Sprintf("scope-%d", iteration) // a fresh key space per run
		m := claimModel{rows: map[string]modelRow{}}
		var handles []handle
		fps := rapid.SampledFrom([]string{"fp-a", "fp-b"})
		hashes := rapid.SampledFrom([]string{"", "body-1", "body-2"})
		// Durations are whole ticks so that the clock often lands exactly on a lock's or a
		// replay window's end, where the off-by-one bugs live.
		const tick = 500 * time.Millisecond
		ticks := func(label string, lo, hi int64) time.Duration {
			return time.Duration(rapid.Int64Range(lo, hi).Draw(rt, label)) * tick
		}

		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) { clock.Advance(ticks("d", 0, 4)) },
			"claim": func(rt *rapid.T) {
				req := store.ClaimRequest{Scope: scope, Fingerprint: fps.Draw(rt, "fp"),
					RequestHash: hashes.Draw(rt, "hash"), PendingTTL: ticks("ttl", 1, 4)}
				got, err := s.Claim(t.Context(), req)
				now := clock.Now()
				row, exists := m.rows[req.Fingerprint]
				want := store.Claim{Scope: scope, Fingerprint: req.Fingerprint}
				switch {
				case exists && row.live(now) && row.hash != req.RequestHash:
					if !errors.Is(err, store.ErrIdempotencyKeyReused) {
						rt.Fatalf("Claim = %+v, %v; want ErrIdempotencyKeyReused", got, err)
					}
					return
				case exists && row.live(now) && row.ready:
					want.Outcome, want.TargetID, want.ReplayUntil = store.ClaimReady, row.target, row.replayUntil
				case exists && row.live(now):
					want.Outcome, want.LockedUntil = store.ClaimPending, row.lockedUntil
				default:
					want.Outcome, want.Reclaimed, want.LockedUntil = store.ClaimAcquired, exists, now.Add(req.PendingTTL)
					m.rows[req.Fingerprint] = modelRow{holder: len(handles), hash: req.RequestHash, lockedUntil: want.LockedUntil}
					handles = append(handles, handle{fp: req.Fingerprint, claim: got})
				}
				if err != nil {
					rt.Fatalf("Claim: %v", err)
				}
				if diff := cmp.Diff(want, got, claimFields); diff != "" {
					rt.Fatalf("Claim (-want +got):\n%s", diff)
				}
			},
			"complete": func(rt *rapid.T) {
				if len(handles) == 0 {
					rt.Skip("no claim to complete")
				}
				h := rapid.IntRange(0, len(handles)-1).Draw(rt, "handle")
				target := rapid.SampledFrom([]string{"sb-1", "sb-2"}).Draw(rt, "target")
				window := ticks("window", 1, 4)
				err := s.Complete(t.Context(), handles[h].claim, target, window)
				row, exists := m.rows[handles[h].fp]
				if !exists || row.holder != h {
					if !errors.Is(err, store.ErrClaimLost) {
						rt.Fatalf("Complete(lost claim %d) = %v, want ErrClaimLost", h, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("Complete(%d): %v", h, err)
				}
				row.ready, row.target, row.replayUntil = true, target, clock.Now().Add(window)
				m.rows[handles[h].fp] = row
			},
			"delete": func(rt *rapid.T) {
				if len(handles) == 0 {
					rt.Skip("no claim to delete")
				}
				h := rapid.IntRange(0, len(handles)-1).Draw(rt, "handle")
				deleted, err := s.DeleteClaim(t.Context(), handles[h].claim)
				if err != nil {
					rt.Fatalf("DeleteClaim(%d): %v", h, err)
				}
				row, ok := m.rows[handles[h].fp]
				held := ok && row.holder == h
				if deleted != held {
					rt.Fatalf("DeleteClaim(%d) deleted = %v, want %v (the key's holder is %v)", h, deleted, held, row.holder)
				}
				if held {
					delete(m.rows, handles[h].fp)
				}
			},
			"peek": func(rt *rapid.T) {
				req := store.ClaimRequest{Scope: scope, Fingerprint: fps.Draw(rt, "fp"), RequestHash: hashes.Draw(rt, "hash")}
				got, err := s.PeekClaim(t.Context(), req)
				now := clock.Now()
				row, exists := m.rows[req.Fingerprint]
				want := store.Claim{Scope: scope, Fingerprint: req.Fingerprint, Outcome: store.ClaimAvailable}
				switch {
				case exists && row.live(now) && row.hash != req.RequestHash:
					if !errors.Is(err, store.ErrIdempotencyKeyReused) {
						rt.Fatalf("PeekClaim = %+v, %v; want ErrIdempotencyKeyReused", got, err)
					}
					return
				case exists && row.live(now) && row.ready:
					want.Outcome, want.TargetID, want.ReplayUntil = store.ClaimReady, row.target, row.replayUntil
				case exists && row.live(now):
					want.Outcome, want.LockedUntil = store.ClaimPending, row.lockedUntil
				}
				if err != nil {
					rt.Fatalf("PeekClaim: %v", err)
				}
				if diff := cmp.Diff(want, got, claimFields); diff != "" {
					rt.Fatalf("PeekClaim (-want +got):\n%s", diff)
				}
			},
		})
	})
}
