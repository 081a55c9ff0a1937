package store_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sandboxd/sandboxd/internal/store"
)

func TestSandboxMounts(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	want := [][]byte{{1, 2}, {3}, {}}
	for range 2 { // put is idempotent
		if err := s.PutSandboxMounts(ctx, sandboxID(1), want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListSandboxMounts(ctx, sandboxID(1))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ListSandboxMounts (-want +got):\n%s", diff)
	}
	if err := s.PutSandboxMounts(ctx, sandboxID(1), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListSandboxMounts(ctx, sandboxID(1)); len(got) != 0 {
		t.Errorf("mounts after clearing: %v", got)
	}
	if err := s.PutSandboxMounts(ctx, "sb-missing", want); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("mounts of a missing sandbox = %v, want ErrNotFound", err)
	}
}
