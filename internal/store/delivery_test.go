package store_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

const (
	dScope = "test.delivery"
	dFP    = "0123abcd"
	window = 10 * time.Second
)

// undelivered makes sandbox id's create inflight and then abandons it.
func undelivered(t *testing.T, s *store.Store, id string) store.Claim {
	t.Helper()
	c, err := s.BeginDelivery(t.Context(), dScope, dFP, id, window)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Abandon(t.Context(), c); err != nil || !ok {
		t.Fatalf("Abandon(%s) = %v, %v; want true", id, ok, err)
	}
	return c
}

func hasUndelivered(t *testing.T, s *store.Store, fp string) bool {
	t.Helper()
	ok, err := s.HasUndelivered(t.Context(), dScope, fp)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestDelivery_InflightIsNeverAdopted: a create whose client still waits is
// nobody else's; once handed over, it never is.
func TestDelivery_InflightIsNeverAdopted(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	c, err := s.BeginDelivery(t.Context(), dScope, dFP, sandboxID(1), window)
	if err != nil {
		t.Fatal(err)
	}
	if hasUndelivered(t, s, dFP) {
		t.Fatal("an inflight create is offered")
	}
	if _, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP); err != nil || ok {
		t.Fatalf("AdoptUndelivered of an inflight create = %v, %v", ok, err)
	}
	if ok, err := s.HandOver(t.Context(), c); err != nil || !ok {
		t.Fatalf("HandOver = %v, %v", ok, err)
	}
	// Delivered: the client's. A late abandon (its context ending after the
	// answer) changes nothing.
	if ok, err := s.Abandon(t.Context(), c); err != nil || ok {
		t.Fatalf("Abandon after HandOver = %v, %v; want false", ok, err)
	}
	if hasUndelivered(t, s, dFP) {
		t.Fatal("a delivered create is offered")
	}
}

// TestDelivery_AbandonNeedsTheRow: a create is offered only once its
// sandbox has a row, so an adopter may take "no row" for "rolled back".
func TestDelivery_AbandonNeedsTheRow(t *testing.T) {
	s, _ := newStore(t)
	c, err := s.BeginDelivery(t.Context(), dScope, dFP, sandboxID(1), window)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Abandon(t.Context(), c); err != nil || ok {
		t.Fatalf("Abandon before the row = %v, %v; want false", ok, err)
	}
	createSandbox(t, s, sandboxID(1), "")
	if ok, err := s.Abandon(t.Context(), c); err != nil || !ok {
		t.Fatalf("Abandon with the row = %v, %v; want true", ok, err)
	}
}

// TestDelivery_RaceOneAdopter: of N retries racing for one undelivered
// create, exactly one adopts it; of the rest none adopts anything.
func TestDelivery_RaceOneAdopter(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	undelivered(t, s, sandboxID(1))
	var (
		mu      sync.Mutex
		adopted []string
	)
	race(races, func(int) {
		c, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP)
		if err != nil {
			t.Error(err)
			return
		}
		if ok {
			mu.Lock()
			adopted = append(adopted, c.TargetID)
			mu.Unlock()
		}
	})
	if len(adopted) != 1 || adopted[0] != sandboxID(1) {
		t.Fatalf("adopters: %v, want exactly one of %s", adopted, sandboxID(1))
	}
}

// TestDelivery_AdopterWhoLeavesOffersItAgain: the adopter is a holder like
// any: its client going away makes the create undelivered again, with a
// fresh window, and the first holder's token no longer acts on it.
func TestDelivery_AdopterWhoLeavesOffersItAgain(t *testing.T) {
	s, clk := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	first := undelivered(t, s, sandboxID(1))
	clk.Advance(window - time.Second)
	a, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP)
	if err != nil || !ok {
		t.Fatalf("adopt: %v %v", ok, err)
	}
	if ok, _ := s.Abandon(t.Context(), first); ok {
		t.Fatal("the first holder's token still acts after an adoption")
	}
	if ok, err := s.Abandon(t.Context(), a); err != nil || !ok {
		t.Fatalf("adopter abandons: %v %v", ok, err)
	}
	clk.Advance(window - time.Second) // past the first window, inside the second
	if out, err := s.ExpireUndelivered(t.Context(), a); err != nil || out != store.ExpireNothing {
		t.Fatalf("expire inside the new window = %v, %v", out, err)
	}
	if _, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP); err != nil || !ok {
		t.Fatalf("second adoption: %v %v", ok, err)
	}
}

// TestDelivery_ExpiryRacesAdoption: at the end of the window, an adoption
// and the expiry are decided under the writer: one wins; an adopted create
// is never destroyed, an expired one never adopted.
func TestDelivery_ExpiryRacesAdoption(t *testing.T) {
	for i := range 20 {
		s, clk := newStore(t)
		id := sandboxID(i)
		createSandbox(t, s, id, "")
		c := undelivered(t, s, id)
		clk.Advance(window - time.Millisecond)
		var (
			wg      sync.WaitGroup
			adopted bool
			expired store.ExpireOutcome
		)
		wg.Go(func() {
			_, adopted, _ = s.AdoptUndelivered(t.Context(), dScope, dFP)
		})
		wg.Go(func() {
			clk.Advance(time.Millisecond)
			expired, _ = s.ExpireUndelivered(t.Context(), c)
		})
		wg.Wait()
		sb, err := s.GetSandbox(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case adopted && expired == store.ExpireDestroy:
			t.Fatalf("run %d: adopted and expired", i)
		case adopted && !sb.DestroyingSince.IsZero():
			t.Fatalf("run %d: an adopted create was marked for destroy", i)
		case !adopted && expired != store.ExpireDestroy:
			t.Fatalf("run %d: neither adopted nor expired (%v)", i, expired)
		case expired == store.ExpireDestroy && sb.DestroyingSince.IsZero():
			t.Fatalf("run %d: expired but not marked for destroy", i)
		}
	}
}

// TestDelivery_ExpireSettlesEachCase: past the window the row goes and the
// sandbox is marked for destroy; a sandbox still being created waits; a
// missing one just loses its row.
func TestDelivery_ExpireSettlesEachCase(t *testing.T) {
	s, clk := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	running := undelivered(t, s, sandboxID(1))
	creating := store.Sandbox{ID: sandboxID(2), Image: "debian", State: store.StateCreating, Owner: "alice"}
	if err := s.CreateSandbox(t.Context(), &creating); err != nil {
		t.Fatal(err)
	}
	busy := undelivered(t, s, sandboxID(2))
	createSandbox(t, s, sandboxID(3), "")
	gone := undelivered(t, s, sandboxID(3))
	if err := s.DeleteSandbox(t.Context(), sandboxID(3)); err != nil {
		t.Fatal(err)
	}

	if l, err := s.ListExpiredUndelivered(t.Context(), 0); err != nil || len(l) != 0 {
		t.Fatalf("expired inside the window: %v %v", l, err)
	}
	if out, err := s.ExpireUndelivered(t.Context(), running); err != nil || out != store.ExpireNothing {
		t.Fatalf("expire inside the window = %v %v", out, err)
	}
	clk.Advance(window)
	l, err := s.ListExpiredUndelivered(t.Context(), 0)
	if err != nil || len(l) != 3 {
		t.Fatalf("expired after the window: %v %v, want 3", l, err)
	}
	for _, tc := range []struct {
		c    store.Claim
		want store.ExpireOutcome
	}{{running, store.ExpireDestroy}, {busy, store.ExpireBusy}, {gone, store.ExpireGone}} {
		if out, err := s.ExpireUndelivered(t.Context(), tc.c); err != nil || out != tc.want {
			t.Errorf("expire %s = %v %v, want %v", tc.c.TargetID, out, err, tc.want)
		}
	}
	if sb, err := s.GetSandbox(t.Context(), sandboxID(1)); err != nil || sb.DestroyingSince.IsZero() {
		t.Errorf("expired sandbox not marked: %+v %v", sb, err)
	}
	if l, err := s.ListExpiredUndelivered(t.Context(), 0); err != nil || len(l) != 1 || l[0].TargetID != sandboxID(2) {
		t.Errorf("left after expiry: %v %v, want only the one still creating", l, err)
	}
}

// TestDelivery_ReofferAndAbandonInflight: an answer whose write failed is
// offered again; a restart offers what the dead process never handed over.
func TestDelivery_ReofferAndAbandonInflight(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	createSandbox(t, s, sandboxID(2), "")
	c, err := s.BeginDelivery(t.Context(), dScope, dFP, sandboxID(1), window)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HandOver(t.Context(), c); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.Reoffer(t.Context(), c, window); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP); err != nil || !ok || got.TargetID != sandboxID(1) {
		t.Fatalf("adopt the reoffered create: %+v %v %v", got, ok, err)
	}
	if _, err := s.BeginDelivery(t.Context(), dScope, dFP, sandboxID(2), window); err != nil {
		t.Fatal(err)
	}
	// Both rows are inflight now (the adopter's and the new one): a restart
	// offers both.
	if n, err := s.AbandonInflight(t.Context()); err != nil || n != 2 {
		t.Fatalf("AbandonInflight = %d %v, want 2", n, err)
	}
	// Another fingerprint's range does not overlap, even a prefix.
	if hasUndelivered(t, s, dFP[:len(dFP)-1]) || hasUndelivered(t, s, dFP+"0") {
		t.Error("another fingerprint sees these rows")
	}
	seen := map[string]bool{}
	for range 2 {
		got, ok, err := s.AdoptUndelivered(t.Context(), dScope, dFP)
		if err != nil || !ok {
			t.Fatalf("adopt after restart: %v %v", ok, err)
		}
		seen[got.TargetID] = true
	}
	if !seen[sandboxID(1)] || !seen[sandboxID(2)] {
		t.Errorf("adopted %v, want both", seen)
	}
}

// TestMigrate_0006KeepsClaims: the rebuild of request_idempotency keeps
// every claim of a version-5 database, and the keyed rules still read them.
func TestMigrate_0006KeepsClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	db := rawDB(t, path)
	files, err := filepath.Glob("migrations/000[1-5]_*.sql")
	if err != nil || len(files) != 5 {
		t.Fatalf("migrations 1-5: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	far := time.Now().Add(time.Hour).UnixMilli()
	if _, err := db.Exec(`INSERT INTO request_idempotency (scope, fingerprint, state, token, request_hash, replay_until, target_id, created_at)
		VALUES ('s', 'ready-fp', 'ready', 7, 'h', ?, 'sb-0000000000000001', 1)`, far); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 5`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Claim(t.Context(), store.ClaimRequest{Scope: "s", Fingerprint: "ready-fp", RequestHash: "h", PendingTTL: time.Minute})
	if err != nil || c.Outcome != store.ClaimReady || c.TargetID != "sb-0000000000000001" {
		t.Fatalf("claim after the migration: %+v %v", c, err)
	}
}
