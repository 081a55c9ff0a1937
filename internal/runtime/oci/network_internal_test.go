package oci

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLease_EmptyLeaseOfADeadWriterIsTakenOver: a lease file left empty
// (its writer killed between the create and the write) is not held
// forever: once older than emptyLeaseAge its address is leased again;
// a young empty one (being written) is not.
func TestLease_EmptyLeaseOfADeadWriterIsTakenOver(t *testing.T) {
	n := &Network{Bridge: "sbtest0", Subnet: netip.MustParsePrefix("10.9.8.0/29"), Gateway: netip.MustParseAddr("10.9.8.1"), LeaseDir: t.TempDir()}
	first, size := n.pool()
	if size <= 0 {
		t.Fatalf("pool of %s: %d addresses", n.Subnet, size)
	}
	old := time.Now().Add(-2 * emptyLeaseAge)
	for i := range size {
		p := filepath.Join(n.LeaseDir, addrAdd(first, i).String())
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if i > 0 { // the first stays young: being written
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "sb-0123456789abcdef")
	ip, err := n.lease("sb-0123456789abcdef", dir, netip.Addr{})
	if err != nil {
		t.Fatalf("lease with every address's lease empty and all but one stale: %v", err)
	}
	if ip == first {
		t.Errorf("leased %s, whose empty lease is young (being written)", ip)
	}
	if b, err := os.ReadFile(filepath.Join(n.LeaseDir, ip.String())); err != nil || string(b) != dir {
		t.Errorf("the lease of %s holds %q, %v; want %q", ip, b, err, dir)
	}
}
