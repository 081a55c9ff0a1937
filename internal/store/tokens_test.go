package store_test

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

func TestAPITokens(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	secret := sha256.Sum256([]byte("s3cret"))
	tok := store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleUser, Owner: "alice"}
	if err := s.CreateAPIToken(ctx, &tok, secret); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	retry := store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleUser, Owner: "alice"}
	if err := s.CreateAPIToken(ctx, &retry, secret); err != nil || !retry.CreatedAt.Equal(tok.CreatedAt) {
		t.Fatalf("identical create = %v (created %v); want a no-op keeping %v", err, retry.CreatedAt, tok.CreatedAt)
	}
	other := sha256.Sum256([]byte("other"))
	for name, tc := range map[string]struct {
		tok    store.APIToken
		secret [32]byte
	}{
		"same id, other secret": {store.APIToken{ID: "tok-1", Role: store.RoleUser, Name: "ci", Owner: "alice"}, other},
		"same id, other owner":  {store.APIToken{ID: "tok-1", Role: store.RoleUser, Name: "ci", Owner: "bob"}, secret},
		"same secret, other id": {store.APIToken{ID: "tok-2", Role: store.RoleUser}, secret},
	} {
		if err := s.CreateAPIToken(ctx, &tc.tok, tc.secret); !errors.Is(err, store.ErrIDConflict) {
			t.Errorf("%s: %v, want ErrIDConflict", name, err)
		}
	}

	want := store.APIToken{ID: "tok-1", Name: "ci", Role: store.RoleUser, Owner: "alice", CreatedAt: storetest.Epoch}
	got, err := s.LookupAPITokenByHash(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LookupAPITokenByHash (-want +got):\n%s", diff)
	}
	if _, err := s.LookupAPITokenByHash(ctx, other); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("lookup of an unknown secret = %v, want ErrNotFound", err)
	}

	for range 2 { // revoking is idempotent and keeps the first time
		if err := s.RevokeAPIToken(ctx, "tok-1"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	if _, err := s.LookupAPITokenByHash(ctx, secret); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("lookup of a revoked token = %v, want ErrNotFound", err)
	}
	if err := s.RevokeAPIToken(ctx, "tok-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke unknown = %v, want ErrNotFound", err)
	}
	list, err := s.ListAPITokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want.RevokedAt = storetest.Epoch.Add(time.Second)
	if diff := cmp.Diff([]store.APIToken{want}, list); diff != "" {
		t.Errorf("ListAPITokens (-want +got):\n%s", diff)
	}
}

// TestAPITokens_Quota: a token's quota is stored and read back with it,
// a retry with another quota is a conflict, and a negative one invalid.
func TestAPITokens_Quota(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	secret := sha256.Sum256([]byte("quota"))
	q := store.Quota{Sandboxes: 3, MilliCPU: 4000, MemoryMB: 8192}
	tok := store.APIToken{ID: "tok-q", Name: "ci", Role: store.RoleUser, Owner: "alice", Quota: q}
	if err := s.CreateAPIToken(ctx, &tok, secret); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupAPITokenByHash(ctx, secret)
	if err != nil || got.Quota != q {
		t.Fatalf("lookup: quota %+v, %v; want %+v", got.Quota, err, q)
	}
	other := tok
	other.Quota.Sandboxes = 4
	if err := s.CreateAPIToken(ctx, &other, secret); !errors.Is(err, store.ErrIDConflict) {
		t.Errorf("same token, other quota: %v, want ErrIDConflict", err)
	}
	bad := store.APIToken{ID: "tok-n", Role: store.RoleUser, Quota: store.Quota{MemoryMB: -1}}
	if err := s.CreateAPIToken(ctx, &bad, sha256.Sum256([]byte("n"))); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("negative quota: %v, want ErrInvalidArgument", err)
	}
}
