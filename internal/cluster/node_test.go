package cluster

import (
	"bytes"
	"encoding/hex"
	"errors"
	"golang.org/x/time/rate"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/auth"
)

func TestSeal_OpensOnAnotherNodeWithTheSameSecret(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	other := openNode(t, "c", []string{m.ClientURL()}, func(c *Config) {
		c.Secret = bytes.Repeat([]byte{7}, 32)
	})
	plain, ad := []byte(`{"image":"base"}`), []byte("sb1")

	sealed, err := a.Seal(plain, ad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatalf("sealed blob contains the plaintext")
	}
	got, err := b.Open(sealed, ad)
	if err != nil {
		t.Fatalf("Open on b: %v", err)
	}
	if !bytes.Equal(got, plain) {
		t.Errorf("Open on b: got %q, want %q", got, plain)
	}
	if _, err := b.Open(sealed, []byte("sb2")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open with another ad: got %v, want ErrCorrupt", err)
	}
	if _, err := other.Open(sealed, ad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open with another secret: got %v, want ErrCorrupt", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := b.Open(bad, ad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open with byte %d flipped: got %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := b.Open(sealed[:len(sealed)-1], ad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open of a truncated blob: got %v, want ErrCorrupt", err)
	}
	again, _ := a.Seal(plain, ad)
	if bytes.Equal(again, sealed) {
		t.Errorf("two seals of the same plaintext are equal: the nonce is not fresh")
	}
}

func TestOpen_ShortSecret(t *testing.T) {
	_, err := Open(t.Context(), Config{NodeID: "a", Endpoints: []string{"https://127.0.0.1:1"}, TLS: testTLS(t), Secret: []byte("short")})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Open with a 5-byte secret: got %v, want ErrInvalidArgument", err)
	}
}

func TestOpen_NoClusterIsUnavailable(t *testing.T) {
	start := time.Now()
	_, err := Open(t.Context(), Config{NodeID: "a", Endpoints: []string{freeURL(t)}, TLS: testTLS(t), Secret: testSecret,
		OpTimeout: 500 * time.Millisecond, Logger: testLogger()})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open with nothing listening: got %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open with nothing listening took %s", d)
	}
}

func TestTokenStore_TokenWorksOnEveryNode(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	sa, sb := NewTokenStore(a), NewTokenStore(b)
	ctx := t.Context()

	plain, rec, err := auth.NewIssuer(sa).IssueWithQuota(ctx, auth.RoleUser, "alice", "ci", auth.Quota{Sandboxes: 3})
	if err != nil {
		t.Fatalf("Issue on a: %v", err)
	}
	// b sees it once its watch delivers it.
	waitFor(t, 10*time.Second, "the token on b", func() bool {
		_, err := sb.LookupAPITokenByHash(ctx, auth.Hash(plain))
		return err == nil
	})
	p, err := auth.NewAuthenticator(sb).AuthenticateToken(ctx, plain)
	if err != nil {
		t.Fatalf("AuthenticateToken on b: %v", err)
	}
	if p.TokenID != rec.ID || p.Owner != "alice" || p.Role != auth.RoleUser {
		t.Errorf("principal on b: %+v, want token %s of alice", p, rec.ID)
	}
	st, err := sb.LookupAPITokenByHash(ctx, auth.Hash(plain))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(auth.StoredToken{ID: rec.ID, Role: "user", Owner: "alice", SecretSHA256: auth.Hash(plain), Quota: auth.Quota{Sandboxes: 3}}, st); diff != "" {
		t.Errorf("LookupAPITokenByHash on b (-want +got):\n%s", diff)
	}
	if _, err := sb.LookupAPITokenByHash(ctx, auth.Hash("sbx_nope")); !errors.Is(err, auth.ErrTokenNotFound) {
		t.Errorf("lookup of an unknown hash: got %v, want ErrTokenNotFound", err)
	}

	// A retry of the same create is the same token; another token with
	// the id, or another id with the hash, is ErrTokenIDTaken.
	again, err := sa.CreateAPIToken(ctx, auth.Record{Token: rec.Token}, auth.Hash(plain))
	if err != nil {
		t.Errorf("CreateAPIToken retry: %v", err)
	}
	if diff := cmp.Diff(rec, again); diff != "" {
		t.Errorf("CreateAPIToken retry (-first +retry):\n%s", diff)
	}
	if _, err := sb.CreateAPIToken(ctx, auth.Record{Token: rec.Token}, auth.Hash("another secret")); !errors.Is(err, auth.ErrTokenIDTaken) {
		t.Errorf("CreateAPIToken of a taken id: got %v, want ErrTokenIDTaken", err)
	}
	other := rec.Token
	other.ID = "0000beef"
	if _, err := sb.CreateAPIToken(ctx, auth.Record{Token: other}, auth.Hash(plain)); !errors.Is(err, auth.ErrTokenIDTaken) {
		t.Errorf("CreateAPIToken of a taken hash: got %v, want ErrTokenIDTaken", err)
	}

	list, err := sb.ListAPITokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != rec.ID {
		t.Errorf("ListAPITokens on b: %+v, want the one token", list)
	}

	if err := sb.RevokeAPIToken(ctx, rec.ID); err != nil {
		t.Fatalf("RevokeAPIToken on b: %v", err)
	}
	waitFor(t, 10*time.Second, "the revocation on a", func() bool {
		_, err := auth.NewAuthenticator(sa).AuthenticateToken(ctx, plain)
		return errors.Is(err, auth.ErrUnauthenticated)
	})
	list, _ = sa.ListAPITokens(ctx)
	if len(list) != 1 || list[0].RevokedAt.IsZero() {
		t.Fatalf("ListAPITokens after revoke: %+v", list)
	}
	first := list[0].RevokedAt
	if err := sa.RevokeAPIToken(ctx, rec.ID); err != nil {
		t.Errorf("RevokeAPIToken again: got %v, want nil", err)
	}
	if list, _ := sa.ListAPITokens(ctx); !list[0].RevokedAt.Equal(first) {
		t.Errorf("a second revoke moved RevokedAt from %s to %s", first, list[0].RevokedAt)
	}
	if err := sa.RevokeAPIToken(ctx, "ffffffff"); !errors.Is(err, auth.ErrTokenNotFound) {
		t.Errorf("RevokeAPIToken of an unknown id: got %v, want ErrTokenNotFound", err)
	}
}

func TestNode_HeadroomReachesOtherNodes(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	waitFor(t, 10*time.Second, "a sees both nodes", func() bool { return len(a.Nodes()) == 2 })
	h := Headroom{MilliCPU: 4000, MemoryMB: 8192, FreeMilliCPU: 3000, FreeMemoryMB: 4096}
	b.SetHeadroom(h)
	waitFor(t, 10*time.Second, "a sees b's headroom", func() bool {
		for _, ni := range a.Nodes() {
			if ni.ID == "b" {
				return ni.Headroom == h
			}
		}
		return false
	})
	want := []NodeInfo{{ID: "a", APIURL: "http://a.test"}, {ID: "b", APIURL: "http://b.test", Headroom: h}}
	if diff := cmp.Diff(want, a.Nodes()); diff != "" {
		t.Errorf("Nodes on a (-want +got):\n%s", diff)
	}
	if err := a.Healthy(t.Context()); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

// TestNode_TLSAddrReachesOtherNodes: Config.TLSAddr is published at Open,
// SetTLSAddr replaces it, and a node without one publishes none.
func TestNode_TLSAddrReachesOtherNodes(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()}, func(c *Config) { c.TLSAddr = "127.0.0.1:7443" })
	tlsOf := func(id string) string {
		for _, ni := range a.Nodes() {
			if ni.ID == id {
				return ni.TLSAddr
			}
		}
		return "missing"
	}
	waitFor(t, 10*time.Second, "a sees b's TLS address", func() bool { return tlsOf("b") == "127.0.0.1:7443" })
	if got := tlsOf("a"); got != "" {
		t.Errorf("a's TLS address %q, want none", got)
	}
	b.SetTLSAddr("10.0.0.2:443")
	waitFor(t, 10*time.Second, "a sees b's new TLS address", func() bool { return tlsOf("b") == "10.0.0.2:443" })
}

func TestNode_LostLeaseIsGrantedAgain(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	waitFor(t, 10*time.Second, "a sees b", func() bool { return hasNode(a, "b") })

	// b's lease goes away under it (as if it expired during a partition):
	// a sees b depart, then b puts its key again under a new lease.
	lost := b.currentLease()
	if _, err := a.Client().Revoke(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	waitDeparted(t, a, "b", 10*time.Second)
	waitFor(t, 10*time.Second, "b back in a's directory", func() bool { return hasNode(a, "b") })
	if b.currentLease() == lost {
		t.Errorf("b still holds the revoked lease %x", lost)
	}
	// b's own directory never reports b itself as departed.
	select {
	case id := <-b.Departed():
		t.Errorf("b's Departed delivered %q", id)
	default:
	}
}

// A token made on one node works on another as soon as its create
// answered, before that node's watch delivered it: a miss in the
// directory reads etcd once. Those reads are budgeted: past the budget a
// miss is a miss (made-up tokens cannot load etcd).
func TestTokenStore_FreshTokenIsReadOnAMiss(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	ctx := t.Context()
	plain, _, err := auth.NewIssuer(NewTokenStore(a)).IssueWithQuota(ctx, auth.RoleUser, "alice", "ci", auth.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	// Not through the directory: straight to the miss path, as if the
	// watch had not delivered it yet.
	h := auth.Hash(plain)
	if tr, ok := b.fetchToken(ctx, hex.EncodeToString(h[:])); !ok || tr.Owner != "alice" {
		t.Fatalf("fetchToken of a token made on a: %+v, %v", tr, ok)
	}
	// A budget that does not refill (the real one refills every second,
	// which a busy machine's loop below may outlast).
	b.missReads = rate.NewLimiter(0, missReadsPerSecond)
	for range missReadsPerSecond + 5 {
		b.fetchToken(ctx, hex.EncodeToString(make([]byte, 32)))
	}
	if _, ok := b.fetchToken(ctx, hex.EncodeToString(h[:])); ok {
		t.Error("a read past the budget went to etcd")
	}
}
