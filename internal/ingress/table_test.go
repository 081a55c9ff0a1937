package ingress_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/ingress"
)

func TestTable_ChangesAreIdempotent(t *testing.T) {
	tb := ingress.NewTable()
	ctx := t.Context()
	http := ingress.Port{Number: 8080, Protocol: ingress.HTTP}

	if err := tb.ExposePort(sbA, http); !errors.Is(err, ingress.ErrNotInstalled) {
		t.Fatalf("expose before install: got %v, want ErrNotInstalled", err)
	}
	for range 2 {
		if err := tb.Install(ctx, sbA); err != nil {
			t.Fatal(err)
		}
		if err := tb.ExposePort(sbA, http); err != nil {
			t.Fatal(err)
		}
	}
	public := http
	public.Public = true
	if err := tb.ExposePort(sbA, public); err != nil {
		t.Fatalf("flip public: %v", err)
	}
	if err := tb.ExposePort(sbA, ingress.Port{Number: 8080, Protocol: ingress.TCP}); !errors.Is(err, ingress.ErrProtocolConflict) {
		t.Fatalf("other protocol: got %v, want ErrProtocolConflict", err)
	}
	if diff := cmp.Diff([]ingress.Port{public}, tb.Ports(sbA)); diff != "" {
		t.Fatalf("ports (-want +got):\n%s", diff)
	}

	tb.UnexposePort(sbA, 8080)
	tb.UnexposePort(sbA, 8080)
	if _, ok := tb.Lookup(sbA, 8080); ok {
		t.Fatal("port still exposed")
	}
	for range 2 {
		tb.Remove(ctx, sbA)
	}
	if tb.Has(sbA) || tb.Len() != 0 {
		t.Fatal("sandbox still installed")
	}
}

func TestTable_RejectsInvalidRoutes(t *testing.T) {
	tb := ingress.NewTable()
	for _, id := range []string{"", "SB-upper", "-sb", "sb_1", "a.b"} {
		if err := tb.Install(t.Context(), id); !errors.Is(err, ingress.ErrInvalidRoute) {
			t.Errorf("install %q: got %v, want ErrInvalidRoute", id, err)
		}
	}
	tb.Install(t.Context(), sbA)
	for _, p := range []ingress.Port{{Number: 0, Protocol: ingress.HTTP}, {Number: 65536, Protocol: ingress.HTTP}, {Number: 80, Protocol: "udp"}} {
		if err := tb.ExposePort(sbA, p); !errors.Is(err, ingress.ErrInvalidRoute) {
			t.Errorf("expose %+v: got %v, want ErrInvalidRoute", p, err)
		}
	}
	for _, h := range []string{"localhost", "a..b", "-a.b", "a b.c"} {
		if err := tb.BindDomain(h, sbA, 80); !errors.Is(err, ingress.ErrInvalidRoute) {
			t.Errorf("bind %q: got %v, want ErrInvalidRoute", h, err)
		}
	}
}

func TestTable_RemoveReleasesDomains(t *testing.T) {
	tb := ingress.NewTable()
	ctx := t.Context()
	tb.Install(ctx, sbA)
	tb.Install(ctx, sbB)
	tb.ExposePort(sbA, ingress.Port{Number: 80, Protocol: ingress.HTTP})
	if err := tb.BindDomain("a.example.com", sbA, 80); err != nil {
		t.Fatal(err)
	}
	if _, ok, bound := tb.LookupDomain("a.example.com"); !ok || !bound {
		t.Fatal("domain does not resolve")
	}
	tb.Remove(ctx, sbA)
	if _, _, bound := tb.LookupDomain("a.example.com"); bound {
		t.Fatal("domain outlived its sandbox")
	}
	if err := tb.BindDomain("a.example.com", sbB, 80); err != nil {
		t.Fatalf("rebind after Remove: %v", err)
	}
	if got := tb.Ports(sbA); !slices.Equal(got, nil) {
		t.Fatalf("ports after Remove: %v", got)
	}
}
