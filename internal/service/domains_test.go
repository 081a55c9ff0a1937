package service_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv/dnstest"
)

// resolverOf is a resolver that asks only the test's DNS server.
func resolverOf(s *dnstest.Server) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr())
	}}
}

// A tenant's custom domain is pending and routes nothing until its TXT
// record holds its challenge; another tenant's claim of the same name
// blocks nobody and never routes; the first to prove control wins it,
// on a verify call or by the background check.
func TestDomains_VerifiedByTXTRecord(t *testing.T) {
	t.Parallel()
	dns := dnstest.Start(t)
	h := newHarness(t, harnessOptions{resolver: resolverOf(dns)})
	ctx := t.Context()
	alice, mallory := service.Caller{Owner: "alice"}, service.Caller{Owner: "mallory"}
	sbA, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	sbM, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.svc.Destroy(context.Background(), admin, sbA.ID)
		h.svc.Destroy(context.Background(), admin, sbM.ID)
	})

	for _, sb := range []service.Caller{alice, mallory} {
		id := map[string]string{"alice": sbA.ID, "mallory": sbM.ID}[sb.Owner]
		if _, err := h.svc.ExposePort(ctx, sb, id, 8080, "http", true); err != nil {
			t.Fatal(err)
		}
	}
	// Mallory claims first: pending, not routed.
	dm, err := h.svc.AddDomain(ctx, mallory, sbM.ID, "Shop.Example.com.", 8080)
	if err != nil || dm.Verified || dm.TXTName != "_sandboxd-challenge.shop.example.com" || dm.TXTValue == "" {
		t.Fatalf("mallory's claim = %+v, %v; want pending with a TXT record to set", dm, err)
	}
	da, err := h.svc.AddDomain(ctx, alice, sbA.ID, "shop.example.com", 8080)
	if err != nil || da.Verified || da.TXTValue == dm.TXTValue {
		t.Fatalf("alice's claim beside mallory's = %+v, %v; want her own pending claim", da, err)
	}
	if h.routes.Routable("shop.example.com") {
		t.Fatal("a pending claim routes")
	}
	// No record yet: still pending, and why.
	got, err := h.svc.VerifyDomain(ctx, mallory, sbM.ID, "shop.example.com")
	if err != nil || got.Verified || got.CheckError == "" {
		t.Fatalf("verify without a record = %+v, %v; want pending with a reason", got, err)
	}
	// Alice controls the zone: her value, not mallory's, goes in.
	dns.SetTXT(da.TXTName, "unrelated", da.TXTValue)
	if got, err := h.svc.VerifyDomain(ctx, mallory, sbM.ID, "shop.example.com"); err != nil || got.Verified {
		t.Errorf("mallory's verify with alice's record = %+v, %v; want still pending", got, err)
	}
	if got, err := h.svc.VerifyDomain(ctx, alice, sbA.ID, "shop.example.com"); err != nil || !got.Verified {
		t.Fatalf("alice's verify = %+v, %v; want verified", got, err)
	}
	if got, err := h.svc.VerifyDomain(ctx, alice, sbA.ID, "shop.example.com"); err != nil || !got.Verified {
		t.Errorf("alice's verify again = %+v, %v; want verified (a retry)", got, err)
	}
	if !h.routes.Routable("shop.example.com") {
		t.Error("a verified binding does not route")
	}
	// Mallory can neither verify nor claim it now, even with the record
	// set to her value.
	dns.SetTXT(dm.TXTName, dm.TXTValue)
	if _, err := h.svc.VerifyDomain(ctx, mallory, sbM.ID, "shop.example.com"); !errors.Is(err, service.ErrHostnameConflict) {
		t.Errorf("mallory's verify after alice's = %v, want ErrHostnameConflict", err)
	}
	if _, err := h.svc.AddDomain(ctx, mallory, sbM.ID, "other.example.com", 8080); err != nil {
		t.Fatal(err)
	}
	// Another tenant cannot verify alice's claim for her, nor see it.
	if _, err := h.svc.VerifyDomain(ctx, mallory, sbA.ID, "shop.example.com"); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("mallory verifying alice's sandbox's domain = %v, want ErrNotFound", err)
	}

	// The background check verifies a claim whose record appears later.
	dc, err := h.svc.AddDomain(ctx, alice, sbA.ID, "later.example.com", 8081)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.CheckPendingDomains(ctx); err != nil || n != 0 {
		t.Errorf("check before the record = %d, %v; want none verified", n, err)
	}
	dns.SetTXT(dc.TXTName, dc.TXTValue)
	if n, err := h.svc.CheckPendingDomains(ctx); err != nil || n != 1 {
		t.Errorf("check after the record = %d, %v; want 1 verified", n, err)
	}
	ds, err := h.svc.ListDomains(ctx, alice, sbA.ID)
	if err != nil || len(ds) != 2 || !ds[0].Verified || !ds[1].Verified {
		t.Errorf("alice's domains = %+v, %v; want both verified", ds, err)
	}
	// Its window passed, a pending claim is no longer looked up.
	dns.SetTXT("_sandboxd-challenge.other.example.com")
	h.clock.Advance(2 * time.Hour)
	before := dns.Queries("_sandboxd-challenge.other.example.com")
	if _, err := h.svc.CheckPendingDomains(ctx); err != nil {
		t.Fatal(err)
	}
	if after := dns.Queries("_sandboxd-challenge.other.example.com"); after != before {
		t.Errorf("a claim past its window was looked up %d more times", after-before)
	}
}

// An admin's binding is verified at once, and promotes a tenant's pending
// claim of the same binding; a resolver that does not answer makes a
// verify call 503, not a silent pending.
func TestDomains_AdminGrantsAndDeadResolver(t *testing.T) {
	t.Parallel()
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dead.LocalAddr().String())
	}}
	h := newHarness(t, harnessOptions{resolver: r})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.svc.Destroy(context.Background(), admin, sb.ID) })
	if _, err := h.svc.AddDomain(ctx, alice, sb.ID, "app.example.com", 8080); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.VerifyDomain(ctx, alice, sb.ID, "app.example.com"); !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("verify with a dead resolver = %v, want ErrUnavailable", err)
	}
	if d, err := h.svc.AddDomain(ctx, admin, sb.ID, "app.example.com", 8080); err != nil || !d.Verified {
		t.Errorf("an admin's binding = %+v, %v; want verified", d, err)
	}
	if ds, err := h.svc.ListDomains(ctx, alice, sb.ID); err != nil || len(ds) != 1 || !ds[0].Verified {
		t.Errorf("alice's domains = %+v, %v; want the one binding, verified", ds, err)
	}
}
