package store_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

func TestCustomDomains(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a, b := sandboxID(1), sandboxID(2)
	createSandbox(t, s, a, "")
	createSandbox(t, s, b, "")

	if created, err := s.AddCustomDomain(ctx, "App.Example.com", a, 8080); err != nil || !created {
		t.Fatalf("add = %v, %v; want created", created, err)
	}
	if created, err := s.AddCustomDomain(ctx, "App.Example.com", a, 8080); err != nil || created {
		t.Fatalf("identical add = %v, %v; want a no-op", created, err)
	}
	for name, tc := range map[string]struct {
		host string
		sb   string
		port int
	}{
		"other port":                  {"App.Example.com", a, 9090},
		"other sandbox":               {"App.Example.com", b, 8080},
		"other sandbox, another case": {"app.example.COM", b, 8080},
	} {
		if _, err := s.AddCustomDomain(ctx, tc.host, tc.sb, tc.port); !errors.Is(err, store.ErrHostnameConflict) {
			t.Errorf("%s: %v, want ErrHostnameConflict", name, err)
		}
	}
	if _, err := s.AddCustomDomain(ctx, "x.example.com", "sb-missing", 80); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing sandbox: %v, want ErrNotFound", err)
	}

	got, err := s.GetCustomDomain(ctx, "app.example.com")
	if err != nil {
		t.Fatal(err)
	}
	want := store.CustomDomain{Hostname: "App.Example.com", SandboxID: a, Port: 8080, CreatedAt: storetest.Epoch,
		Challenge: got.Challenge, VerifiedAt: storetest.Epoch}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetCustomDomain (-want +got):\n%s", diff)
	}
	list, err := s.ListCustomDomains(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.CustomDomain{want}, list); diff != "" {
		t.Errorf("ListCustomDomains (-want +got):\n%s", diff)
	}

	if removed, err := s.RemoveCustomDomain(ctx, b, "app.example.com"); err != nil || removed {
		t.Errorf("remove by another sandbox = %v, %v; want nothing removed", removed, err)
	}
	for i, want := range []bool{true, false} {
		if removed, err := s.RemoveCustomDomain(ctx, a, "app.example.com"); err != nil || removed != want {
			t.Errorf("remove #%d = %v, %v; want %v", i+1, removed, err, want)
		}
	}
	if _, err := s.GetCustomDomain(ctx, "app.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCustomDomain after remove = %v, want ErrNotFound", err)
	}
}

func TestCustomDomains_RaceOneHostname(t *testing.T) {
	s, _ := newStore(t)
	for i := range races {
		createSandbox(t, s, sandboxID(i), "")
	}
	var created, conflicts atomic.Int32
	race(races, func(i int) {
		switch ok, err := s.AddCustomDomain(t.Context(), "race.example.com", sandboxID(i), 80); {
		case err == nil && ok:
			created.Add(1)
		case errors.Is(err, store.ErrHostnameConflict):
			conflicts.Add(1)
		default:
			t.Errorf("caller %d: %v, %v", i, ok, err)
		}
	})
	if created.Load() != 1 || conflicts.Load() != races-1 {
		t.Errorf("created %d, conflicts %d; want 1 and %d", created.Load(), conflicts.Load(), races-1)
	}
	if all, _ := s.ListAllCustomDomains(t.Context()); len(all) != 1 {
		t.Errorf("rows: %d, want 1", len(all))
	}
}

// TestCustomDomains_ReleaseIsFenced: the undo of a put deletes the binding
// only while no other call has put it since — neither an identical put that
// found it nor a remove and a new put.
func TestCustomDomains_ReleaseIsFenced(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a := sandboxID(1)
	createSandbox(t, s, a, "")
	const host = "fence.example.com"

	created, first, err := s.PutCustomDomain(ctx, host, a, 8080)
	if err != nil || !created {
		t.Fatalf("put = %v, %v; want created", created, err)
	}
	created, second, err := s.PutCustomDomain(ctx, host, a, 8080)
	if err != nil || created {
		t.Fatalf("identical put = %v, %v; want found", created, err)
	}
	if first == second {
		t.Fatalf("identical put kept token %d; want a fresh one", first)
	}
	if _, _, err := s.PutCustomDomain(ctx, host, a, 9090); !errors.Is(err, store.ErrHostnameConflict) {
		t.Fatalf("put with another port: %v, want ErrHostnameConflict", err)
	}
	if released, err := s.ReleaseCustomDomain(ctx, a, host, first); err != nil || released {
		t.Errorf("release by the creator after an identical put = %v, %v; want nothing released", released, err)
	}
	if _, err := s.GetCustomDomain(ctx, host); err != nil {
		t.Fatalf("binding after a fenced release: %v", err)
	}
	for i, want := range []bool{true, false} {
		if released, err := s.ReleaseCustomDomain(ctx, a, host, second); err != nil || released != want {
			t.Errorf("release #%d by the last put = %v, %v; want %v", i+1, released, err, want)
		}
	}

	// Removed and bound again: the old token is no longer the row's.
	_, third, err := s.PutCustomDomain(ctx, host, a, 8080)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveCustomDomain(ctx, a, host); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutCustomDomain(ctx, host, a, 8080); err != nil {
		t.Fatal(err)
	}
	if released, err := s.ReleaseCustomDomain(ctx, a, host, third); err != nil || released {
		t.Errorf("release of a removed and re-bound binding = %v, %v; want nothing released", released, err)
	}
	if _, err := s.GetCustomDomain(ctx, host); err != nil {
		t.Errorf("binding after a stale release: %v", err)
	}
}

// Pending claims hold nothing: two sandboxes may claim one hostname, the
// first verified wins it, the other can then neither verify nor bind it,
// and no claim is possible behind a verified binding; the sandbox's
// pending claims are bounded.
func TestCustomDomains_PendingClaims(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a, b := sandboxID(1), sandboxID(2)
	createSandbox(t, s, a, "")
	createSandbox(t, s, b, "")
	claim := func(sb string, verified bool) (store.CustomDomain, store.DomainOutcome, error) {
		return s.ClaimCustomDomain(ctx, store.DomainClaim{Hostname: "shop.example.com", SandboxID: sb, Port: 80, Verified: verified,
			RetryUntil: storetest.Epoch.Add(time.Hour), MaxPending: 2})
	}
	da, out, err := claim(a, false)
	if err != nil || !out.Created || da.Verified() || da.Challenge == "" {
		t.Fatalf("a's pending claim = %+v, %+v, %v", da, out, err)
	}
	db, _, err := claim(b, false)
	if err != nil || db.Verified() || db.Challenge == da.Challenge {
		t.Fatalf("b's pending claim beside a's = %+v, %v; want its own pending claim", db, err)
	}
	if again, out, err := claim(a, false); err != nil || out.Created || again.Challenge != da.Challenge {
		t.Errorf("a's claim again = %+v, %+v, %v; want the same claim", again, out, err)
	}
	if _, err := s.GetCustomDomain(ctx, "shop.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCustomDomain of pending claims = %v, want ErrNotFound (nothing routes)", err)
	}
	if ds, _ := s.ListAllCustomDomains(ctx); len(ds) != 0 {
		t.Errorf("ListAllCustomDomains = %+v, want no verified binding", ds)
	}
	if ds, _ := s.ListPendingCustomDomains(ctx, 10); len(ds) != 2 {
		t.Errorf("ListPendingCustomDomains = %+v, want both claims", ds)
	}

	promoted, token, err := s.VerifyCustomDomain(ctx, b, "shop.example.com")
	if err != nil || !promoted {
		t.Fatalf("verify b = %v, %v", promoted, err)
	}
	if got, err := s.GetCustomDomain(ctx, "shop.example.com"); err != nil || got.SandboxID != b {
		t.Errorf("GetCustomDomain = %+v, %v; want b's", got, err)
	}
	if _, _, err := s.VerifyCustomDomain(ctx, a, "shop.example.com"); !errors.Is(err, store.ErrHostnameConflict) {
		t.Errorf("verify a after b = %v, want ErrHostnameConflict", err)
	}
	if _, _, err := claim(a, true); !errors.Is(err, store.ErrHostnameConflict) {
		t.Errorf("a's verified claim after b = %v, want ErrHostnameConflict", err)
	}
	c := sandboxID(3)
	createSandbox(t, s, c, "")
	if _, _, err := claim(c, false); !errors.Is(err, store.ErrHostnameConflict) {
		t.Errorf("a new claim behind b's verified binding = %v, want ErrHostnameConflict", err)
	}
	if promoted, _, err := s.VerifyCustomDomain(ctx, b, "shop.example.com"); err != nil || promoted {
		t.Errorf("verify b again = %v, %v; want a no-op", promoted, err)
	}
	if changed, err := s.UnverifyCustomDomain(ctx, b, "shop.example.com", token); err != nil || !changed {
		t.Errorf("undo b's verify = %v, %v", changed, err)
	}
	if _, err := s.GetCustomDomain(ctx, "shop.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after the undo: %v, want nothing verified", err)
	}
	if _, _, err := s.VerifyCustomDomain(ctx, c, "shop.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("verify with no claim = %v, want ErrNotFound", err)
	}

	for _, h := range []string{"one.example.com", "two.example.com"} {
		_, _, err := s.ClaimCustomDomain(ctx, store.DomainClaim{Hostname: h, SandboxID: c, Port: 80, MaxPending: 2})
		if err != nil {
			t.Fatalf("claim %s: %v", h, err)
		}
	}
	if _, _, err := s.ClaimCustomDomain(ctx, store.DomainClaim{Hostname: "three.example.com", SandboxID: c, Port: 80, MaxPending: 2}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("a third pending claim = %v, want ErrInvalidArgument", err)
	}
	if _, _, err := s.ClaimCustomDomain(ctx, store.DomainClaim{Hostname: "three.example.com", SandboxID: c, Port: 80, Verified: true, MaxPending: 2}); err != nil {
		t.Errorf("an admin's verified binding beyond the pending bound = %v, want it bound", err)
	}
}
