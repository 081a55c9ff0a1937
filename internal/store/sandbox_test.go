package store_test

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
)

func TestCreateSandbox_RoundTrip(t *testing.T) {
	s, _ := newStore(t)
	want := store.Sandbox{
		ID:               sandboxID(1),
		Name:             "web",
		Owner:            "alice",
		Image:            "debian:12",
		State:            store.StateCreating,
		CPUMillis:        1500,
		MemoryMB:         512,
		Tags:             map[string]string{"team": "a", "env": "dev"},
		Env:              map[string]string{"LANG": "C"},
		SealedSecrets:    []byte{1, 2, 3},
		Spec:             json.RawMessage(`{"image":"debian:12"}`),
		AgentTokenSealed: []byte{4, 5},
		SSHPublicKey:     "ssh-ed25519 AAAA",
		NodeID:           "node-1",
		ExpiresAt:        storetest.Epoch.Add(time.Hour),
	}
	sb := want
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	want.CreatedAt, want.UpdatedAt = storetest.Epoch, storetest.Epoch
	if diff := cmp.Diff(want, sb); diff != "" {
		t.Errorf("CreateSandbox wrote back (-want +got):\n%s", diff)
	}
	for name, get := range map[string]func() (store.Sandbox, error){
		"GetSandbox":       func() (store.Sandbox, error) { return s.GetSandbox(t.Context(), want.ID) },
		"GetSandboxByName": func() (store.Sandbox, error) { return s.GetSandboxByName(t.Context(), "alice", "web") },
	} {
		got, err := get()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestCreateSandbox_EmptyNamesNeverConflict(t *testing.T) {
	s, _ := newStore(t)
	for i := range 3 {
		createSandbox(t, s, sandboxID(i), "")
	}
	if _, err := s.GetSandboxByName(t.Context(), "alice", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandboxByName(\"\") = %v, want ErrNotFound", err)
	}
}

func TestCreateSandbox_DuplicateID(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "a")
	sb := store.Sandbox{ID: sandboxID(1), Name: "b", Image: "debian", State: store.StateRunning}
	if err := s.CreateSandbox(t.Context(), &sb); !errors.Is(err, store.ErrIDConflict) {
		t.Fatalf("CreateSandbox(duplicate id) = %v, want ErrIDConflict", err)
	}
}

func TestCreateSandbox_InvalidState(t *testing.T) {
	s, _ := newStore(t)
	sb := store.Sandbox{ID: sandboxID(1), Image: "debian", State: "paused"}
	if err := s.CreateSandbox(t.Context(), &sb); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("CreateSandbox(state paused) = %v, want ErrInvalidArgument", err)
	}
}

func TestCreateSandbox_RaceOneName(t *testing.T) {
	s, _ := newStore(t)
	var created, conflicts atomic.Int32
	race(races, func(i int) {
		sb := store.Sandbox{ID: sandboxID(i), Name: "same", Image: "debian", State: store.StateCreating}
		switch err := s.CreateSandbox(t.Context(), &sb); {
		case err == nil:
			created.Add(1)
		case errors.Is(err, store.ErrNameConflict):
			conflicts.Add(1)
		default:
			t.Errorf("CreateSandbox(%d): %v", i, err)
		}
	})
	if created.Load() != 1 || conflicts.Load() != races-1 {
		t.Errorf("created %d, conflicts %d; want 1 and %d", created.Load(), conflicts.Load(), races-1)
	}
	items, _, err := s.ListSandboxes(t.Context(), store.ListFilter{Name: "same"})
	if err != nil || len(items) != 1 {
		t.Errorf("rows named same: %d, %v; want 1", len(items), err)
	}
}

// TestCreateSandbox_NamesArePerOwner: a name is unique within its owner
// only, so one tenant holding "web" neither blocks another tenant's "web"
// nor shows through a lookup by the other tenant.
func TestCreateSandbox_NamesArePerOwner(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	alice := createSandbox(t, s, sandboxID(1), "web") // owner alice
	bob := store.Sandbox{ID: sandboxID(2), Name: "web", Owner: "bob", Image: "debian", State: store.StateRunning}
	if err := s.CreateSandbox(ctx, &bob); err != nil {
		t.Fatalf("bob's web beside alice's: %v, want created", err)
	}
	again := store.Sandbox{ID: sandboxID(3), Name: "web", Owner: "alice", Image: "debian", State: store.StateRunning}
	if err := s.CreateSandbox(ctx, &again); !errors.Is(err, store.ErrNameConflict) {
		t.Errorf("alice's second web: %v, want ErrNameConflict", err)
	}
	for owner, want := range map[string]string{"alice": alice.ID, "bob": bob.ID} {
		if got, err := s.GetSandboxByName(ctx, owner, "web"); err != nil || got.ID != want {
			t.Errorf("GetSandboxByName(%s, web) = %s, %v; want %s", owner, got.ID, err, want)
		}
	}
	if _, err := s.GetSandboxByName(ctx, "carol", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandboxByName(carol, web) = %v, want ErrNotFound", err)
	}
}

func TestListSandboxes_Filters(t *testing.T) {
	s, clock := newStore(t)
	add := func(id, owner string, state store.SandboxState, tags map[string]string) {
		t.Helper()
		sb := store.Sandbox{ID: id, Owner: owner, Image: "debian", State: state, Tags: tags}
		if err := s.CreateSandbox(t.Context(), &sb); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
	}
	add("sb-a", "alice", store.StateRunning, map[string]string{"team": "x", "env": "dev"})
	add("sb-b", "alice", store.StateStopped, map[string]string{"team": "x", "env": "prod"})
	add("sb-c", "bob", store.StateRunning, map[string]string{"team": "x", "env": "dev"})
	add("sb-d", "alice", store.StateRunning, nil)

	tests := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"all", store.ListFilter{}, []string{"sb-a", "sb-b", "sb-c", "sb-d"}},
		{"owner", store.ListFilter{Owner: "alice"}, []string{"sb-a", "sb-b", "sb-d"}},
		{"one tag", store.ListFilter{Tags: map[string]string{"team": "x"}}, []string{"sb-a", "sb-b", "sb-c"}},
		{"tags AND", store.ListFilter{Tags: map[string]string{"team": "x", "env": "dev"}}, []string{"sb-a", "sb-c"}},
		{"tags AND owner", store.ListFilter{Owner: "alice", Tags: map[string]string{"env": "dev"}}, []string{"sb-a"}},
		{"tag no match", store.ListFilter{Tags: map[string]string{"team": "y"}}, nil},
		{"states", store.ListFilter{States: []store.SandboxState{store.StateStopped, store.StateError}}, []string{"sb-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, next, err := s.ListSandboxes(t.Context(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if next != "" {
				t.Errorf("next page token = %q, want none", next)
			}
			if diff := cmp.Diff(tt.want, ids(items)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func ids(items []store.Sandbox) []string {
	var out []string
	for _, sb := range items {
		out = append(out, sb.ID)
	}
	return out
}

func TestListSandboxes_KeysetPaging(t *testing.T) {
	s, clock := newStore(t)
	var want []string
	for i := range 25 {
		// Three rows share each timestamp, so paging must break ties by id.
		if i%3 == 0 {
			clock.Advance(time.Millisecond)
		}
		createSandbox(t, s, sandboxID(i), "")
		want = append(want, sandboxID(i))
	}
	var got []string
	token := ""
	for page := 0; ; page++ {
		items, next, err := s.ListSandboxes(t.Context(), store.ListFilter{Limit: 4, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		got = append(got, ids(items)...)
		if page == 0 {
			// Rows inserted before the cursor and deleted behind it neither repeat nor shift.
			if err := s.DeleteSandbox(t.Context(), sandboxID(0)); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paged ids (-want +got):\n%s", diff)
	}
}

// TestListSandboxes_NewestFirstAcrossStates: NewestFirst pages newest
// first with ties broken by id, across states, and a row changing state
// between pages neither repeats nor goes missing (the keyset is
// (created_at, id), not the state).
func TestListSandboxes_NewestFirstAcrossStates(t *testing.T) {
	s, clock := newStore(t)
	var want []string
	for i := range 10 {
		if i%3 == 0 {
			clock.Advance(time.Millisecond)
		}
		sb := store.Sandbox{ID: sandboxID(i), Image: "debian", State: store.StateRunning}
		if i%2 == 1 {
			sb.State = store.StateStopped
		}
		if err := s.CreateSandbox(t.Context(), &sb); err != nil {
			t.Fatal(err)
		}
		want = append([]string{sandboxID(i)}, want...)
	}
	states := []store.SandboxState{store.StateRunning, store.StateStopped, store.StateError}
	var got []string
	token := ""
	for page := 0; ; page++ {
		items, next, err := s.ListSandboxes(t.Context(), store.ListFilter{States: states, NewestFirst: true, Limit: 3, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		got = append(got, ids(items)...)
		if page == 0 {
			// A sandbox further down stops between pages.
			if _, err := s.UpdateSandboxState(t.Context(), sandboxID(2), []store.SandboxState{store.StateRunning}, store.StateStopped, ""); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("newest-first ids (-want +got):\n%s", diff)
	}
}

func TestListSandboxes_AnnotationsAndCreatedBounds(t *testing.T) {
	s, clock := newStore(t)
	start := clock.Now()
	for i, tpl := range []string{"base", "code-interpreter-v1", "base", ""} {
		spec := `{}`
		if tpl != "" {
			spec = `{"annotations":{"e2b.template":"` + tpl + `","e2b.user":"user"}}`
		}
		sb := store.Sandbox{ID: sandboxID(i), Image: "debian", State: store.StateRunning, Spec: json.RawMessage(spec)}
		if err := s.CreateSandbox(t.Context(), &sb); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	for _, tt := range []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"annotation", store.ListFilter{Annotations: map[string]string{"e2b.template": "base"}}, []string{sandboxID(0), sandboxID(2)}},
		{"annotations AND", store.ListFilter{Annotations: map[string]string{"e2b.template": "code-interpreter-v1", "e2b.user": "user"}}, []string{sandboxID(1)}},
		{"annotation no match", store.ListFilter{Annotations: map[string]string{"e2b.template": "nope"}}, nil},
		{"created from (inclusive)", store.ListFilter{CreatedFrom: start.Add(2 * time.Second)}, []string{sandboxID(2), sandboxID(3)}},
		{"created until (inclusive)", store.ListFilter{CreatedUntil: start.Add(time.Second)}, []string{sandboxID(0), sandboxID(1)}},
		{"created window", store.ListFilter{CreatedFrom: start.Add(time.Second), CreatedUntil: start.Add(2 * time.Second)}, []string{sandboxID(1), sandboxID(2)}},
		{"newest first", store.ListFilter{NewestFirst: true, Annotations: map[string]string{"e2b.template": "base"}}, []string{sandboxID(2), sandboxID(0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			items, _, err := s.ListSandboxes(t.Context(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, ids(items)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListSandboxes_BadPageToken(t *testing.T) {
	s, _ := newStore(t)
	for _, tok := range []string{"%%%", "bm9kb3Q", "eC55"} { // not base64; "nodot"; "x.y"
		if _, _, err := s.ListSandboxes(t.Context(), store.ListFilter{PageToken: tok}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("ListSandboxes(page token %q) = %v, want ErrInvalidArgument", tok, err)
		}
	}
}

func TestUpdateSandboxState_CompareAndSet(t *testing.T) {
	s, clock := newStore(t)
	sb := store.Sandbox{ID: sandboxID(1), Image: "debian", State: store.StateCreating}
	if err := s.CreateSandbox(t.Context(), &sb); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	got, err := s.UpdateSandboxState(t.Context(), sb.ID, []store.SandboxState{store.StateCreating}, store.StateRunning, "")
	if err != nil {
		t.Fatalf("creating → running: %v", err)
	}
	if got.State != store.StateRunning || !got.UpdatedAt.Equal(storetest.Epoch.Add(time.Second)) {
		t.Errorf("after update: state %s, updated %v", got.State, got.UpdatedAt)
	}

	// A retry of the same transition is a conflict whose Current says it already happened.
	_, err = s.UpdateSandboxState(t.Context(), sb.ID, []store.SandboxState{store.StateCreating}, store.StateRunning, "")
	var sce *store.StateConflictError
	if !errors.Is(err, store.ErrStateConflict) || !errors.As(err, &sce) || sce.Current != store.StateRunning {
		t.Fatalf("retry = %v, want StateConflictError{Current: running}", err)
	}

	got, err = s.UpdateSandboxState(t.Context(), sb.ID, nil, store.StateError, "oom")
	if err != nil || got.State != store.StateError || got.ErrorReason != "oom" {
		t.Fatalf("unconditional → error = %+v, %v", got, err)
	}
	if _, err := s.UpdateSandboxState(t.Context(), "sb-missing", nil, store.StateError, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing sandbox: %v, want ErrNotFound", err)
	}
}

func TestUpdateSandboxState_RaceOneWinner(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	var won, lost atomic.Int32
	race(races, func(int) {
		_, err := s.UpdateSandboxState(t.Context(), sandboxID(1), []store.SandboxState{store.StateRunning}, store.StateStopping, "")
		switch {
		case err == nil:
			won.Add(1)
		case errors.Is(err, store.ErrStateConflict):
			lost.Add(1)
		default:
			t.Error(err)
		}
	})
	if won.Load() != 1 || lost.Load() != races-1 {
		t.Errorf("won %d, lost %d; want 1 and %d", won.Load(), lost.Load(), races-1)
	}
}

func TestUpdateSandbox_ExpiryAndTags(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	exp := storetest.Epoch.Add(time.Minute)
	tags := map[string]string{"k": "v"}
	got, err := s.UpdateSandbox(t.Context(), sandboxID(1), store.SandboxUpdate{ExpiresAt: &exp, Tags: &tags})
	if err != nil {
		t.Fatal(err)
	}
	if !got.ExpiresAt.Equal(exp) || !cmp.Equal(got.Tags, tags) {
		t.Errorf("after update: expires %v, tags %v", got.ExpiresAt, got.Tags)
	}
	never := time.Time{}
	got, err = s.UpdateSandbox(t.Context(), sandboxID(1), store.SandboxUpdate{ExpiresAt: &never})
	if err != nil || !got.ExpiresAt.IsZero() || !cmp.Equal(got.Tags, tags) {
		t.Errorf("clear expiry: %+v, %v", got, err)
	}
	if _, err := s.UpdateSandbox(t.Context(), "sb-missing", store.SandboxUpdate{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing sandbox: %v, want ErrNotFound", err)
	}
}

// TestUpdateSandbox_ExtendOnly: an extend-only expiry moves the expiry
// later, never earlier, and leaves a sandbox without one without one.
func TestUpdateSandbox_ExtendOnly(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	at := func(d time.Duration) *time.Time { e := storetest.Epoch.Add(d); return &e }
	if got, err := s.UpdateSandbox(t.Context(), sandboxID(1), store.SandboxUpdate{ExpiresAt: at(time.Minute), ExtendOnly: true}); err != nil || !got.ExpiresAt.IsZero() {
		t.Errorf("extend a sandbox that never expires: expires %v, %v; want never", got.ExpiresAt, err)
	}
	if _, err := s.UpdateSandbox(t.Context(), sandboxID(1), store.SandboxUpdate{ExpiresAt: at(5 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		to, want time.Duration
	}{
		{10 * time.Second, 5 * time.Minute}, // shorter: kept
		{5 * time.Minute, 5 * time.Minute},  // equal: kept
		{10 * time.Minute, 10 * time.Minute},
	} {
		got, err := s.UpdateSandbox(t.Context(), sandboxID(1), store.SandboxUpdate{ExpiresAt: at(tc.to), ExtendOnly: true})
		if err != nil || !got.ExpiresAt.Equal(*at(tc.want)) {
			t.Errorf("extend to +%v: expires %v, %v; want +%v", tc.to, got.ExpiresAt, err, tc.want)
		}
	}
}

func TestDeleteSandbox_CascadesAndFreesSlot(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	id := sandboxID(1)
	createSandbox(t, s, id, "x")
	if err := s.SeedTapSlots(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AllocateTapSlot(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReserveHostPort(ctx, store.PortRequest{SandboxID: id, Port: 22, Protocol: store.ProtocolTCP},
		store.PortRange{Lo: 30000, Hi: 30009}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCustomDomain(ctx, "x.example.com", id, 80); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandboxMounts(ctx, id, [][]byte{{1}}); err != nil {
		t.Fatal(err)
	}

	if err := s.DeleteSandbox(ctx, id); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if err := s.DeleteSandbox(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteSandbox = %v, want ErrNotFound", err)
	}
	ports, _ := s.ListAllExposedPorts(ctx)
	domains, _ := s.ListAllCustomDomains(ctx)
	mounts, _ := s.ListSandboxMounts(ctx, id)
	slots, _ := s.ListTapSlots(ctx)
	if len(ports)+len(domains)+len(mounts)+len(slots) != 0 {
		t.Errorf("left behind: ports %v, domains %v, mounts %v, slots %v", ports, domains, mounts, slots)
	}
	// The name is free again.
	createSandbox(t, s, sandboxID(2), "x")
}

func TestReaperQueries(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	mk := func(id string, state store.SandboxState, expires time.Duration, cpu, mem int64) {
		t.Helper()
		sb := store.Sandbox{ID: id, Image: "debian", State: state, CPUMillis: cpu, MemoryMB: mem}
		if expires != 0 {
			sb.ExpiresAt = storetest.Epoch.Add(expires)
		}
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	mk("sb-old-creating", store.StateCreating, 0, 1000, 256)
	clock.Advance(time.Minute)
	mk("sb-new-creating", store.StateCreating, 0, 500, 128)
	mk("sb-expired", store.StateRunning, 30*time.Second, 2000, 1024)
	mk("sb-later", store.StateStopping, time.Hour, 250, 64)
	mk("sb-stopped", store.StateStopped, 0, 4000, 4096)
	mk("sb-creating-expired", store.StateCreating, time.Second, 0, 0)

	expired, err := s.ListExpired(ctx, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sb-expired"}, ids(expired)); diff != "" {
		t.Errorf("ListExpired (-want +got):\n%s", diff)
	}
	stuck, err := s.ListStuckCreating(ctx, clock.Now().Add(-30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sb-old-creating"}, ids(stuck)); diff != "" {
		t.Errorf("ListStuckCreating (-want +got):\n%s", diff)
	}
	u, err := s.LiveUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Usage{Sandboxes: 5, CPUMillis: 3750, MemoryMB: 1472}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("LiveUsage (-want +got):\n%s", diff)
	}
}

// The reaper's check and its act are one write: a timeout extended after the
// reaper listed a sandbox saves it, and an extension after the reaper began
// the destroy is refused instead of answered and then undone.
func TestBeginReap_RechecksExpiryUnderTheWriter(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	for _, id := range []string{sandboxID(1), sandboxID(2)} {
		sb := store.Sandbox{ID: id, Image: "debian", State: store.StateRunning, ExpiresAt: storetest.Epoch.Add(time.Second)}
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	expired, err := s.ListExpired(ctx, clock.Now())
	if err != nil || len(expired) != 2 {
		t.Fatalf("ListExpired = %d rows, %v; want 2", len(expired), err)
	}
	later := clock.Now().Add(time.Hour)
	if _, err := s.UpdateSandbox(ctx, sandboxID(1), store.SandboxUpdate{ExpiresAt: &later}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.BeginReap(ctx, sandboxID(1), clock.Now()); err != nil || ok {
		t.Errorf("BeginReap(extended) = %v, %v; want false", ok, err)
	}
	sb, ok, err := s.BeginReap(ctx, sandboxID(2), clock.Now())
	if err != nil || !ok || sb.DestroyingSince.IsZero() {
		t.Fatalf("BeginReap(expired) = %v, %v (since %v); want true", ok, err, sb.DestroyingSince)
	}
	if _, ok, _ := s.BeginReap(ctx, sandboxID(2), clock.Now()); ok {
		t.Error("BeginReap twice: want false the second time")
	}
	if _, err := s.UpdateSandbox(ctx, sandboxID(2), store.SandboxUpdate{ExpiresAt: &later}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSandbox after BeginReap = %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateSandboxState(ctx, sandboxID(2), nil, store.StateStopped, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSandboxState after BeginReap = %v, want ErrNotFound", err)
	}
	if _, ok, err := s.BeginReap(ctx, sandboxID(9), clock.Now()); err != nil || ok {
		t.Errorf("BeginReap(missing) = %v, %v; want false, nil", ok, err)
	}
}

func TestBeginDestroy_HidesTheRowAndRepeats(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "web")
	first, err := s.BeginDestroy(ctx, sandboxID(1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.BeginDestroy(ctx, sandboxID(1))
	if err != nil || !again.DestroyingSince.Equal(first.DestroyingSince) {
		t.Errorf("BeginDestroy again = %v, %v; want the first time %v", again.DestroyingSince, err, first.DestroyingSince)
	}
	if _, err := s.GetSandboxByName(ctx, "alice", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandboxByName = %v, want ErrNotFound", err)
	}
	if got, _, _ := s.ListSandboxes(ctx, store.ListFilter{}); len(got) != 0 {
		t.Errorf("ListSandboxes = %v, want none", ids(got))
	}
	if got, _, _ := s.ListSandboxes(ctx, store.ListFilter{IncludeDestroying: true}); len(got) != 1 {
		t.Errorf("ListSandboxes(IncludeDestroying) = %v, want the row", ids(got))
	}
	if _, err := s.BeginDestroy(ctx, sandboxID(2)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BeginDestroy(missing) = %v, want ErrNotFound", err)
	}
}

func TestCommitCreate_StartsTheTimeout(t *testing.T) {
	s, clock := newStore(t)
	ctx := t.Context()
	sb := store.Sandbox{ID: sandboxID(1), Image: "debian", State: store.StateCreating}
	if err := s.CreateSandbox(ctx, &sb); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // a slow create
	exp := clock.Now().Add(time.Second)
	got, err := s.CommitCreate(ctx, sandboxID(1), exp)
	if err != nil || got.State != store.StateRunning || !got.ExpiresAt.Equal(exp) {
		t.Fatalf("CommitCreate = %s expires %v, %v; want running expiring %v", got.State, got.ExpiresAt, err, exp)
	}
	if _, err := s.CommitCreate(ctx, sandboxID(1), exp); !errors.Is(err, store.ErrStateConflict) {
		t.Errorf("CommitCreate twice = %v, want ErrStateConflict", err)
	}
	// A create whose sandbox is destroyed meanwhile cannot commit.
	sb2 := store.Sandbox{ID: sandboxID(2), Image: "debian", State: store.StateCreating}
	if err := s.CreateSandbox(ctx, &sb2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BeginDestroy(ctx, sandboxID(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitCreate(ctx, sandboxID(2), time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CommitCreate after BeginDestroy = %v, want ErrNotFound", err)
	}
}

// TestBeginRollBack_OnlyACreateThatIsStillCreating: the reconciler's
// rollback marks a row only while it is still creating; a create that
// committed since the reconciler listed it keeps its sandbox.
func TestBeginRollBack_OnlyACreateThatIsStillCreating(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	for _, id := range []string{sandboxID(1), sandboxID(2)} {
		sb := store.Sandbox{ID: id, Image: "debian", State: store.StateCreating}
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CommitCreate(ctx, sandboxID(1), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.BeginRollBack(ctx, sandboxID(1)); err != nil || ok {
		t.Errorf("BeginRollBack(committed) = %v, %v; want false", ok, err)
	}
	if got, err := s.GetSandbox(ctx, sandboxID(1)); err != nil || !got.DestroyingSince.IsZero() {
		t.Errorf("committed row after BeginRollBack: %+v %v; want it untouched", got, err)
	}
	sb, ok, err := s.BeginRollBack(ctx, sandboxID(2))
	if err != nil || !ok || sb.DestroyingSince.IsZero() {
		t.Fatalf("BeginRollBack(creating) = %v, %v; want true", ok, err)
	}
	if _, err := s.CommitCreate(ctx, sandboxID(2), time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CommitCreate after BeginRollBack = %v, want ErrNotFound", err)
	}
	if _, ok, _ := s.BeginRollBack(ctx, sandboxID(2)); ok {
		t.Error("BeginRollBack twice: want false the second time")
	}
}
