package ingress

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// caListener serves TLS handshakes with ca's configuration over allow on
// loopback until the test ends; it returns the address.
// A cfg given is used instead of ca.TLSConfig(allow).
func caListener(t *testing.T, ca *LocalCA, allow func(string) bool, cfg ...*tls.Config) string {
	t.Helper()
	conf := ca.TLSConfig(allow)
	if len(cfg) > 0 {
		conf = cfg[0]
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// shake runs one handshake for name against addr, trusting ca.
func shake(addr, name string, ca *LocalCA) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, RootCAs: ca.Pool()})
	if err != nil {
		return err
	}
	return c.Close()
}

func newTestCA(t *testing.T) *LocalCA {
	t.Helper()
	ca, err := NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	ca.now = func() time.Time { return at } // no budget refills during a test
	return ca
}

// TestLocalCA_UnknownNamesSignNothing: handshakes for many distinct names
// allow refuses all fail, and none makes the CA sign.
func TestLocalCA_UnknownNamesSignNothing(t *testing.T) {
	ca := newTestCA(t)
	addr := caListener(t, ca, func(string) bool { return false })
	for i := range 300 {
		if err := shake(addr, fmt.Sprintf("%d-sb-%016x.localhost", 1000+i, i), ca); err == nil {
			t.Fatalf("a handshake for an unknown name succeeded")
		}
	}
	if got := ca.Counts(); got.Issued != 0 || got.RefusedName != 300 {
		t.Fatalf("counts %+v after 300 unknown names; want 0 issued, 300 refused by name", got)
	}
}

// TestLocalCA_ConcurrentHandshakesForOneNameSignOnce: 32 handshakes at
// once for one name all succeed with one signature.
func TestLocalCA_ConcurrentHandshakesForOneNameSignOnce(t *testing.T) {
	ca := newTestCA(t)
	addr := caListener(t, ca, func(string) bool { return true })
	const n = 32
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() { <-start; errs <- shake(addr, "8080-sb-00000000000000aa.localhost", ca) }()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := ca.Counts().Issued; got != 1 {
		t.Fatalf("%d signatures for one name, want 1", got)
	}
}

// TestLocalCA_OneSandboxsPortsAreBounded: a caller walking the ports of
// one servable sandbox gets certificates for the group's burst only; the
// CA still signs for another sandbox, and the first sandbox's early
// names stay cached (no eviction of everyone's).
func TestLocalCA_OneSandboxsPortsAreBounded(t *testing.T) {
	ca := newTestCA(t)
	addr := caListener(t, ca, func(string) bool { return true })
	ok := 0
	for port := 1; port <= 200; port++ {
		if shake(addr, fmt.Sprintf("%d-sb-00000000000000aa.localhost", port), ca) == nil {
			ok++
		}
	}
	if ok != localGroupBurst {
		t.Fatalf("%d of 200 ports of one sandbox got a certificate, want the group's burst %d", ok, localGroupBurst)
	}
	if err := shake(addr, "8080-sb-00000000000000bb.localhost", ca); err != nil {
		t.Fatalf("another sandbox after the walk: %v", err)
	}
	before := ca.Counts().Issued
	if err := shake(addr, "1-sb-00000000000000aa.localhost", ca); err != nil {
		t.Fatalf("the walked sandbox's first name (cached): %v", err)
	}
	if got := ca.Counts(); got.Issued != before || got.RefusedBudget != 200-localGroupBurst {
		t.Fatalf("counts %+v; want %d issued (the cached name not signed again) and %d refused by the budget", got, before, 200-localGroupBurst)
	}
}

// TestLocalCA_CacheEvictsOneNotAll: past the cap the least recently used
// leaf goes, and a name in use keeps its certificate.
func TestLocalCA_CacheEvictsOneNotAll(t *testing.T) {
	ca := newTestCA(t)
	ca.cap = 8
	addr := caListener(t, ca, func(string) bool { return true })
	hot := "app.example.test"
	if err := shake(addr, hot, ca); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := shake(addr, fmt.Sprintf("n%d.example.test", i), ca); err != nil {
			t.Fatal(err)
		}
		if err := shake(addr, hot, ca); err != nil { // in use all along
			t.Fatal(err)
		}
	}
	got := ca.Counts()
	if got.Issued != 21 || got.Cached != 8 {
		t.Fatalf("counts %+v; want 21 signed (the hot name once) and 8 cached", got)
	}
}

// ownersByID admits every name and names as its owner the tenant the
// test gave its sandbox id's prefix (sb-a…: mallory, sb-b…: alice).
func ownersByID(host string) (string, bool) {
	switch {
	case strings.Contains(host, "-sb-a"):
		return "mallory", true
	case strings.Contains(host, "-sb-b"):
		return "alice", true
	}
	return "", true
}

// caListenerByOwner is caListener over TLSConfigByOwner(admit).
func caListenerByOwner(t *testing.T, ca *LocalCA, admit func(string) (string, bool)) string {
	t.Helper()
	cfg := ca.TLSConfigByOwner(admit)
	return caListener(t, ca, func(string) bool { return true }, cfg)
}

// TestLocalCA_OneOwnerCannotStarveAnother: one tenant walking the ports
// of its 40 sandboxes (each a fresh group of 32) used to empty the CA's
// whole budget, and another tenant's new ports then failed TLS. Now the
// walker gets its owner's share, and the other tenant its names.
func TestLocalCA_OneOwnerCannotStarveAnother(t *testing.T) {
	ca := newTestCA(t) // no refills: what the walk spends stays spent
	addr := caListenerByOwner(t, ca, ownersByID)
	walked := 0
	for sb := range 40 {
		for port := 1; port <= 10; port++ {
			if shake(addr, fmt.Sprintf("%d-sb-a%015x.localhost", port, sb), ca) == nil {
				walked++
			}
		}
	}
	if walked > localIssueBurst {
		t.Fatalf("the walk got %d certificates, more than the CA's burst %d", walked, localIssueBurst)
	}
	for port := 3000; port < 3020; port++ {
		if err := shake(addr, fmt.Sprintf("%d-sb-b%015x.localhost", port, 1), ca); err != nil {
			t.Fatalf("alice's new port %d after mallory's walk (%d certificates): %v", port, walked, err)
		}
	}
}

// TestLocalCA_OneOwnersFloodEvictsOnlyItsOwn: a tenant's flood of names
// used to push everyone's leaves out of the LRU, and the CA's empty
// budget then refused to sign them again. Now an owner holds at most its
// share of the cache, and past it loses its own least recently used.
func TestLocalCA_OneOwnersFloodEvictsOnlyItsOwn(t *testing.T) {
	ca := newTestCA(t)
	ca.cap = 60
	addr := caListenerByOwner(t, ca, ownersByID)
	victim := fmt.Sprintf("8080-sb-b%015x.localhost", 1)
	if err := shake(addr, victim, ca); err != nil {
		t.Fatal(err)
	}
	for sb := range 40 {
		for port := 1; port <= 10; port++ {
			_ = shake(addr, fmt.Sprintf("%d-sb-a%015x.localhost", port, sb), ca)
		}
	}
	before := ca.Counts().Issued
	if err := shake(addr, victim, ca); err != nil {
		t.Fatalf("alice's cached name after mallory's flood: %v", err)
	}
	if got := ca.Counts(); got.Issued != before || got.Cached > 1+ca.cap/localOwnerCacheShare {
		t.Errorf("counts %+v; want alice's leaf served from the cache (%d issued) and at most %d cached", got, before, 1+ca.cap/localOwnerCacheShare)
	}
}
