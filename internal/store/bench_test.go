package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

// The figures to compare, NORMAL beside FULL, come from go run ./bench/storebench; these
// benchmarks are for profiling one path (go test -bench . -cpuprofile …).

func BenchmarkCreateSandbox(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	i := 0
	for b.Loop() {
		sb := store.Sandbox{ID: sandboxID(i), Name: fmt.Sprint("n", i), Image: "debian", State: store.StateRunning}
		if err := s.CreateSandbox(b.Context(), &sb); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkReserveHostPort(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	const sandboxes = 4096
	for i := range sandboxes {
		sb := store.Sandbox{ID: sandboxID(i), Image: "debian", State: store.StateRunning}
		if err := s.CreateSandbox(b.Context(), &sb); err != nil {
			b.Fatal(err)
		}
	}
	pool := store.PortRange{Lo: 1024, Hi: 65535}
	i := 0
	for b.Loop() {
		// Distinct (sandbox, port) pairs; the pool stays sparse.
		req := tcp(sandboxID(i%sandboxes), 1+i/sandboxes)
		if _, _, err := s.ReserveHostPort(b.Context(), req, pool, nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkClaim(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	i := 0
	for b.Loop() {
		req := store.ClaimRequest{Scope: "bench", Fingerprint: fmt.Sprint(i), PendingTTL: time.Minute}
		if _, err := s.Claim(b.Context(), req); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGetSandbox(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	sb := store.Sandbox{ID: sandboxID(1), Image: "debian", State: store.StateRunning}
	if err := s.CreateSandbox(b.Context(), &sb); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.GetSandbox(b.Context(), sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkE2BCreateClaims_Body is what the old E2B body dedupe added to a
// create: Claim, AttachClaimTarget, Complete (three writes).
func BenchmarkE2BCreateClaims_Body(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	i := 0
	for b.Loop() {
		req := store.ClaimRequest{Scope: "bench", Fingerprint: fmt.Sprintf("%064x", i), PendingTTL: time.Minute}
		c, err := s.Claim(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.AttachClaimTarget(b.Context(), c, sandboxID(i)); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(b.Context(), c, sandboxID(i), 10*time.Second); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkE2BCreateClaims_Delivery is what the delivery rule adds to a
// create with nothing to adopt: HasUndelivered (a read), BeginDelivery and
// HandOver (two writes), all on one fingerprint, as identical creates are.
func BenchmarkE2BCreateClaims_Delivery(b *testing.B) {
	s := storetest.New(b, store.Options{Clock: time.Now})
	fp := fmt.Sprintf("%064x", 1)
	i := 0
	for b.Loop() {
		if _, err := s.HasUndelivered(b.Context(), "bench", fp); err != nil {
			b.Fatal(err)
		}
		c, err := s.BeginDelivery(b.Context(), "bench", fp, sandboxID(i), 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := s.HandOver(b.Context(), c); err != nil || !ok {
			b.Fatal(ok, err)
		}
		i++
	}
}
