package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// TestRegistryCredentials: put replaces per (owner, host), owners are
// apart, the host lookup sees any owner's, delete is per owner, and an
// owner keeps at most MaxRegistryCredentials.
func TestRegistryCredentials(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	put := func(owner, host, user string) error {
		return s.PutRegistryCredential(ctx, store.RegistryCredential{Owner: owner, Host: host, Username: user, SealedSecret: []byte("sealed"), CreatedAt: time.Now()})
	}
	if err := put("a", "r.example:5000", "u1"); err != nil {
		t.Fatal(err)
	}
	if err := put("a", "r.example:5000", "u2"); err != nil { // replaces
		t.Fatal(err)
	}
	got, err := s.GetRegistryCredential(ctx, "a", "r.example:5000")
	if err != nil || got.Username != "u2" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := s.GetRegistryCredential(ctx, "b", "r.example:5000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another owner's Get = %v, want ErrNotFound", err)
	}
	if has, err := s.RegistryHasCredentials(ctx, "r.example:5000"); err != nil || !has {
		t.Fatalf("RegistryHasCredentials = %v, %v", has, err)
	}
	if err := s.DeleteRegistryCredential(ctx, "b", "r.example:5000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of another owner's = %v, want ErrNotFound", err)
	}
	if err := s.DeleteRegistryCredential(ctx, "a", "r.example:5000"); err != nil {
		t.Fatal(err)
	}
	// The node's copies pulled with the credential stay: the host stays
	// private after its last credential goes.
	if has, _ := s.RegistryHasCredentials(ctx, "r.example:5000"); !has {
		t.Fatal("the host's last credential deleted, its images became public")
	}
	if has, _ := s.RegistryHasCredentials(ctx, "never.example"); has {
		t.Fatal("a host nobody stored a credential for is private")
	}
	for i := range store.MaxRegistryCredentials {
		if err := put("c", fmt.Sprintf("r%d.example", i), "u"); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("c", "one-more.example", "u"); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("past the bound: %v, want ErrInvalidArgument", err)
	}
	if err := put("c", "r0.example", "again"); err != nil {
		t.Fatalf("replacing at the bound: %v", err)
	}
	list, err := s.ListRegistryCredentials(ctx, "c")
	if err != nil || len(list) != store.MaxRegistryCredentials {
		t.Fatalf("List = %d, %v", len(list), err)
	}
}
