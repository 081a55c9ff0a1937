package store_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

// TestPauseResume_RaceOneWinnerEach: of racing pauses exactly one moves a
// running sandbox, the others see it paused; the same for resumes.
func TestPauseResume_RaceOneWinnerEach(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	for _, step := range []struct {
		name string
		fn   func() (store.Sandbox, error)
		then store.SandboxState
	}{
		{"pause", func() (store.Sandbox, error) { return s.PauseSandbox(t.Context(), sandboxID(1)) }, store.StatePaused},
		{"resume", func() (store.Sandbox, error) { return s.ResumeSandbox(t.Context(), sandboxID(1)) }, store.StateRunning},
	} {
		var won, lost atomic.Int32
		race(races, func(int) {
			_, err := step.fn()
			var sce *store.StateConflictError
			switch {
			case err == nil:
				won.Add(1)
			case errors.As(err, &sce) && sce.Current == step.then:
				lost.Add(1)
			default:
				t.Error(err)
			}
		})
		if won.Load() != 1 || lost.Load() != races-1 {
			t.Errorf("%s: won %d, lost %d; want 1 and %d", step.name, won.Load(), lost.Load(), races-1)
		}
	}
}

// TestPause_TimeoutStopsWhilePaused: a paused sandbox is neither listed as
// expired nor reaped, holds its capacity, and gets back on resume the
// time it had left when it was paused.
func TestPause_TimeoutStopsWhilePaused(t *testing.T) {
	s, clock := newStore(t)
	sb := store.Sandbox{ID: sandboxID(1), Image: "debian", State: store.StateRunning, MemoryMB: 512,
		ExpiresAt: storetest.Epoch.Add(time.Minute)}
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second) // 40 s left
	paused, err := s.PauseSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.State != store.StatePaused || !paused.PausedAt.Equal(clock.Now()) {
		t.Errorf("paused row: state %s, paused at %v; want paused at %v", paused.State, paused.PausedAt, clock.Now())
	}
	clock.Advance(time.Hour)
	if exp, err := s.ListExpired(t.Context(), clock.Now()); err != nil || len(exp) != 0 {
		t.Errorf("ListExpired while paused = %v, %v; want none", exp, err)
	}
	if _, ok, err := s.BeginReap(t.Context(), sb.ID, clock.Now()); ok || err != nil {
		t.Errorf("BeginReap of a paused sandbox = %v, %v; want not reaped", ok, err)
	}
	if u, err := s.LiveUsage(t.Context()); err != nil || u.MemoryMB != 512 {
		t.Errorf("LiveUsage while paused = %+v, %v; want its 512 MiB held", u, err)
	}
	if got, err := s.ListPausedBefore(t.Context(), clock.Now()); err != nil || len(got) != 1 {
		t.Errorf("ListPausedBefore = %d rows, %v; want 1", len(got), err)
	}
	resumed, err := s.ResumeSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(40 * time.Second); resumed.State != store.StateRunning || !resumed.ExpiresAt.Equal(want) || !resumed.PausedAt.IsZero() {
		t.Errorf("resumed row: state %s, expires %v, paused at %v; want running, %v, zero", resumed.State, resumed.ExpiresAt, resumed.PausedAt, want)
	}
	// Stopping a paused sandbox clears its pause.
	if _, err := s.PauseSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	stopped, err := s.UpdateSandboxState(t.Context(), sb.ID, []store.SandboxState{store.StatePaused}, store.StateStopped, "")
	if err != nil || !stopped.PausedAt.IsZero() {
		t.Errorf("paused → stopped = %+v, %v; want PausedAt cleared", stopped.PausedAt, err)
	}
	if _, err := s.PauseSandbox(t.Context(), sb.ID); !errors.Is(err, store.ErrStateConflict) {
		t.Errorf("pause of a stopped sandbox = %v, want a state conflict", err)
	}
	if _, err := s.PauseSandbox(t.Context(), "sb-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pause of a missing sandbox = %v, want ErrNotFound", err)
	}
}

// TestHibernated_OnlyWhilePaused: a paused sandbox is marked hibernated
// (a repeat keeps the first time), a running one is a state conflict;
// leaving paused (a resume, a stop) forgets the mark, and a pause after
// starts unmarked; ClearHibernated forgets it too.
func TestHibernated_OnlyWhilePaused(t *testing.T) {
	s, clock := newStore(t)
	id := sandboxID(1)
	createSandbox(t, s, id, "")
	var sce *store.StateConflictError
	if _, err := s.MarkHibernated(t.Context(), id); !errors.As(err, &sce) || sce.Current != store.StateRunning {
		t.Fatalf("MarkHibernated of a running sandbox = %v, want a state conflict", err)
	}
	if _, err := s.PauseSandbox(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	first, err := s.MarkHibernated(t.Context(), id)
	if err != nil || !first.HibernatedAt.Equal(clock.Now()) {
		t.Fatalf("MarkHibernated = %v at %v, want %v", err, first.HibernatedAt, clock.Now())
	}
	clock.Advance(time.Second)
	if again, err := s.MarkHibernated(t.Context(), id); err != nil || !again.HibernatedAt.Equal(first.HibernatedAt) {
		t.Errorf("MarkHibernated again = %v at %v, want the first time %v", err, again.HibernatedAt, first.HibernatedAt)
	}
	if got, err := s.GetSandbox(t.Context(), id); err != nil || got.HibernatedAt.IsZero() {
		t.Errorf("GetSandbox of a hibernated sandbox: %v, HibernatedAt %v", err, got.HibernatedAt)
	}
	if cleared, err := s.ClearHibernated(t.Context(), id); err != nil || !cleared.HibernatedAt.IsZero() || cleared.State != store.StatePaused {
		t.Errorf("ClearHibernated = %+v, %v; want paused, not hibernated", cleared, err)
	}
	if _, err := s.MarkHibernated(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ResumeSandbox(t.Context(), id); err != nil || !r.HibernatedAt.IsZero() {
		t.Fatalf("ResumeSandbox = %v, HibernatedAt %v; want cleared", err, r.HibernatedAt)
	}
	if p, err := s.PauseSandbox(t.Context(), id); err != nil || !p.HibernatedAt.IsZero() {
		t.Fatalf("PauseSandbox = %v, HibernatedAt %v; want a pause unmarked", err, p.HibernatedAt)
	}
	if _, err := s.MarkHibernated(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if st, err := s.UpdateSandboxState(t.Context(), id, nil, store.StateStopped, ""); err != nil || !st.HibernatedAt.IsZero() {
		t.Errorf("stop of a hibernated sandbox = %v, HibernatedAt %v; want none", err, st.HibernatedAt)
	}
	if _, err := s.MarkHibernated(t.Context(), "sb-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkHibernated of a missing sandbox = %v, want ErrNotFound", err)
	}
}
