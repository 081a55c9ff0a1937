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
