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
