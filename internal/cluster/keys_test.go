package cluster

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestClaimPlacement_NameUniqueAndRetrySafe(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()

	p1 := Placement{ID: "sb1", Node: "a", Owner: "alice", Name: "web", Failover: FailoverRecreate,
		Spec: []byte("sealed"), Ports: []PortIntent{{Port: 8080, Protocol: "http", Public: true}}, Domains: []string{"x.example"}}
	if err := n.ClaimPlacement(ctx, p1); err != nil {
		t.Fatalf("ClaimPlacement: %v", err)
	}
	if err := n.ClaimPlacement(ctx, p1); err != nil {
		t.Errorf("ClaimPlacement retry: got %v, want nil", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb2", Node: "a", Owner: "alice", Name: "web"}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("ClaimPlacement of a taken name: got %v, want ErrNameTaken", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb2", Node: "a", Owner: "bob", Name: "web"}); err != nil {
		t.Errorf("ClaimPlacement of the name for another owner: got %v, want nil", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "b", Owner: "alice", Name: "web"}); !errors.Is(err, ErrConflict) {
		t.Errorf("ClaimPlacement of sb1 by another node: got %v, want ErrConflict", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb3", Node: "a", Owner: "alice"}); err != nil {
		t.Errorf("ClaimPlacement unnamed: %v", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "a/b", Node: "a", Owner: "alice"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ClaimPlacement of id a/b: got %v, want ErrInvalidArgument", err)
	}
	waitName(t, n, "alice", "web", "sb1")

	waitFor(t, 10*time.Second, "sb1 in the directory", func() bool { _, ok := n.Placement("sb1"); return ok })
	got, _ := n.Placement("sb1")
	want := p1
	want.State = StateCreating
	if diff := cmp.Diff(want, got, cmpIgnoreRevision); diff != "" {
		t.Errorf("Placement(sb1) (-want +got):\n%s", diff)
	}
	if got.Revision == 0 {
		t.Errorf("Placement(sb1).Revision = 0, want the ModRevision")
	}

	if err := n.ReleasePlacement(ctx, "sb1"); err != nil {
		t.Fatalf("ReleasePlacement: %v", err)
	}
	if err := n.ReleasePlacement(ctx, "sb1"); err != nil {
		t.Errorf("ReleasePlacement again: got %v, want nil", err)
	}
	waitName(t, n, "alice", "web", "")
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb4", Node: "a", Owner: "alice", Name: "web"}); err != nil {
		t.Errorf("ClaimPlacement of a released name: %v", err)
	}
	waitFor(t, 10*time.Second, "sb1 gone from the directory", func() bool { _, ok := n.Placement("sb1"); return !ok })
	waitFor(t, 10*time.Second, "sb4 in the directory", func() bool { _, ok := n.Placement("sb4"); return ok })
	var ids []string
	for _, p := range n.PlacementsOf("a") {
		ids = append(ids, p.ID)
	}
	if diff := cmp.Diff([]string{"sb2", "sb3", "sb4"}, ids); diff != "" {
		t.Errorf("PlacementsOf(a) (-want +got):\n%s", diff)
	}
}

var cmpIgnoreRevision = cmpopts.IgnoreFields(Placement{}, "Revision")

func TestReleasePlacement_FencedOnName(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "a", Owner: "alice", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	// The name now names another sandbox (as if moved by hand): the
	// release must leave it.
	if _, err := n.Client().Put(ctx, nameKey("alice", "web"), encodeRef("sb9")); err != nil {
		t.Fatal(err)
	}
	if err := n.ReleasePlacement(ctx, "sb1"); err != nil {
		t.Fatalf("ReleasePlacement: %v", err)
	}
	waitName(t, n, "alice", "web", "sb9")
	if _, ok, err := n.getPlacement(ctx, "sb1"); ok || err != nil {
		t.Errorf("placement sb1 after release: present %v, err %v; want absent", ok, err)
	}
}

func TestNameKey_OwnerCannotReachIntoName(t *testing.T) {
	if a, b := nameKey("a/b", "c"), nameKey("a", "b/c"); a == b {
		t.Errorf("nameKey(a/b, c) = nameKey(a, b/c) = %q", a)
	}
}

func TestUpdatePlacement(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	if _, err := n.UpdatePlacement(ctx, "nope", func(*Placement) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdatePlacement of an absent placement: got %v, want ErrNotFound", err)
	}
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "a", Owner: "alice", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	got, err := n.UpdatePlacement(ctx, "sb1", func(p *Placement) error {
		p.State = StateRunning
		p.Ports = append(p.Ports, PortIntent{Port: 3000, Protocol: "tcp"})
		return nil
	})
	if err != nil {
		t.Fatalf("UpdatePlacement: %v", err)
	}
	if got.State != StateRunning || len(got.Ports) != 1 || got.Revision == 0 {
		t.Errorf("UpdatePlacement returned %+v", got)
	}
	cur, _, err := n.getPlacement(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, cur); diff != "" {
		t.Errorf("stored placement (-returned +stored):\n%s", diff)
	}

	boom := errors.New("boom")
	if _, err := n.UpdatePlacement(ctx, "sb1", func(p *Placement) error { p.State = StateLost; return boom }); !errors.Is(err, boom) {
		t.Errorf("UpdatePlacement with a failing f: got %v, want boom", err)
	}
	if _, err := n.UpdatePlacement(ctx, "sb1", func(p *Placement) error { p.Name = "other"; return nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("UpdatePlacement renaming: got %v, want ErrInvalidArgument", err)
	}
	if cur2, _, _ := n.getPlacement(ctx, "sb1"); cur2.Revision != cur.Revision {
		t.Errorf("a refused update wrote: revision %d, want %d", cur2.Revision, cur.Revision)
	}

	// Concurrent updates all land: each retries on the compare it lost.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = n.UpdatePlacement(ctx, "sb1", func(p *Placement) error {
				p.Domains = append(p.Domains, fmt.Sprintf("d%d.example", i))
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent UpdatePlacement %d: %v", i, err)
		}
	}
	if cur, _, _ := n.getPlacement(ctx, "sb1"); len(cur.Domains) != len(errs) {
		t.Errorf("after %d concurrent updates: domains %v", len(errs), cur.Domains)
	}
}

func TestHostname_ClaimAndFencedRelease(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	if err := n.ClaimHostname(ctx, "app.example.com", "sb1"); err != nil {
		t.Fatalf("ClaimHostname: %v", err)
	}
	if err := n.ClaimHostname(ctx, "app.example.com", "sb1"); err != nil {
		t.Errorf("ClaimHostname retry: got %v, want nil", err)
	}
	if err := n.ClaimHostname(ctx, "app.example.com", "sb2"); !errors.Is(err, ErrHostnameTaken) {
		t.Errorf("ClaimHostname of a taken host: got %v, want ErrHostnameTaken", err)
	}
	waitFor(t, 10*time.Second, "app.example.com in the directory", func() bool {
		id, ok := n.HostnameTarget("app.example.com")
		return ok && id == "sb1"
	})
	if err := n.ReleaseHostname(ctx, "app.example.com", "sb2"); err != nil {
		t.Errorf("ReleaseHostname by another id: got %v, want nil", err)
	}
	if err := n.ClaimHostname(ctx, "app.example.com", "sb2"); !errors.Is(err, ErrHostnameTaken) {
		t.Errorf("a release by another id freed the host: got %v", err)
	}
	if err := n.ReleaseHostname(ctx, "app.example.com", "sb1"); err != nil {
		t.Fatalf("ReleaseHostname: %v", err)
	}
	if err := n.ReleaseHostname(ctx, "app.example.com", "sb1"); err != nil {
		t.Errorf("ReleaseHostname again: got %v, want nil", err)
	}
	waitFor(t, 10*time.Second, "app.example.com gone from the directory", func() bool {
		_, ok := n.HostnameTarget("app.example.com")
		return !ok
	})
	if err := n.ClaimHostname(ctx, "app.example.com", "sb2"); err != nil {
		t.Errorf("ClaimHostname after release: %v", err)
	}
}

func TestBindKey_FirstBinderWinsUntilExpiry(t *testing.T) {
	t.Parallel() // mostly waiting on etcd: overlap it with the other tests
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	ctx := t.Context()
	if got, err := a.BindKey(ctx, "create", "alice", "key-1", "a", time.Second); err != nil || got.Node != "a" {
		t.Fatalf("BindKey on a: got %q, %v; want a", got, err)
	}
	if got, err := a.BindKey(ctx, "create", "alice", "key-1", "a", time.Second); err != nil || got.Node != "a" {
		t.Errorf("BindKey retry on a: got %q, %v; want a", got, err)
	}
	if got, err := b.BindKey(ctx, "create", "alice", "key-1", "b", time.Second); err != nil || got.Node != "a" {
		t.Errorf("BindKey on b: got %q, %v; want a (the first binder)", got, err)
	}
	if got, err := b.BindKey(ctx, "create", "bob", "key-1", "b", time.Second); err != nil || got.Node != "b" {
		t.Errorf("BindKey of the same key for another owner: got %q, %v; want b", got, err)
	}
	if got, err := b.BindKey(ctx, "e2b", "alice", "key-1", "b", time.Second); err != nil || got.Node != "b" {
		t.Errorf("BindKey of the same key in another scope: got %q, %v; want b", got, err)
	}
	// The binding's lease expires (etcd raises 1 s to its minimum, ~2 s).
	waitFor(t, 15*time.Second, "the binding to expire", func() bool {
		got, err := b.BindKey(ctx, "create", "alice", "key-1", "b", time.Minute)
		return err == nil && got.Node == "b"
	})
}

// A key bound to a node that departed moves to exactly one live node,
// whoever races for it; a key bound elsewhere is left as it is.
func TestRebindKey_OneWinnerFromTheDepartedNode(t *testing.T) {
	t.Parallel()
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	if _, err := a.BindKey(ctx, "v1", "alice", "k", "dead", time.Minute); err != nil {
		t.Fatal(err)
	}
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			b, err := a.RebindKey(ctx, "v1", "alice", "k", Binding{Node: "dead"}, fmt.Sprintf("n%d", i), time.Minute)
			if err != nil {
				t.Errorf("RebindKey %d: %v", i, err)
			}
			got[i] = b.Node
		})
	}
	wg.Wait()
	for _, b := range got[1:] {
		if b != got[0] || b == "dead" {
			t.Fatalf("racing rebinds answered %v: want one live node for all", got)
		}
	}
	if b, err := a.BindKey(ctx, "v1", "alice", "k", "other", time.Minute); err != nil || b.Node != got[0] {
		t.Errorf("BindKey after the rebind: %q, %v; want %q", b, err, got[0])
	}
	if b, err := a.RebindKey(ctx, "v1", "alice", "k", Binding{Node: "dead"}, "late", time.Minute); err != nil || b.Node != got[0] {
		t.Errorf("a late rebind from the dead node: %q, %v; want %q kept", b, err, got[0])
	}
}

func TestClaimPlacement_RaceOneWinner(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	const racers = 32
	var wins, taken atomic.Int32
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			err := n.ClaimPlacement(t.Context(), Placement{ID: fmt.Sprintf("sb%02d", i), Node: "a", Owner: "alice", Name: "web"})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ErrNameTaken):
				taken.Add(1)
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if got, want := wins.Load(), int32(1); got != want {
		t.Errorf("winners: got %d, want %d", got, want)
	}
	if got, want := taken.Load(), int32(racers-1); got != want {
		t.Errorf("ErrNameTaken: got %d, want %d", got, want)
	}
	// The losers left nothing behind.
	resp, err := n.Client().Get(t.Context(), placementsPrefix, clientCountOnly()...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Errorf("placements stored: %d, want 1", resp.Count)
	}
}

func TestTakeOver_RaceOneWinner(t *testing.T) {
	m := startSingle(t)
	n := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	if err := n.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "dead", Owner: "alice", State: StateRunning, Failover: FailoverRecreate}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "sb1 in the directory", func() bool { _, ok := n.Placement("sb1"); return ok })
	seen, _ := n.Placement("sb1")

	const racers = 16
	var wins atomic.Int32
	winner := make(chan string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			node := fmt.Sprintf("n%02d", i)
			ok, err := n.TakeOver(ctx, seen, node)
			if err != nil {
				t.Errorf("TakeOver %s: %v", node, err)
			}
			if ok {
				wins.Add(1)
				winner <- node
			}
		})
	}
	wg.Wait()
	if got, want := wins.Load(), int32(1); got != want {
		t.Fatalf("TakeOver winners: got %d, want %d", got, want)
	}
	cur, _, err := n.getPlacement(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if w := <-winner; cur.Node != w || cur.State != StateCreating || cur.Failover != FailoverRecreate {
		t.Errorf("after TakeOver by %s: %+v", w, cur)
	}
	if ok, err := n.TakeOver(ctx, seen, "late"); ok || err != nil {
		t.Errorf("TakeOver with a stale revision: got %v, %v; want false, nil", ok, err)
	}
}

// waitName waits until the node's directory names want for owner's name
// ("" for none): LookupName reads the watch-fed copy.
func waitName(t *testing.T, n *Node, owner, name, want string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s/%s naming %q", owner, name, want), func() bool {
		id, err := n.LookupName(t.Context(), owner, name)
		if want == "" {
			return errors.Is(err, ErrNotFound)
		}
		return err == nil && id == want
	})
}

// A keyed create's binding names its sandbox once the placement is
// claimed, moves with the placement when a failover takes it over, and
// forgets the sandbox when the placement is released (a retry then makes
// another); a binding of another node is never touched.
func TestBindKey_NamesItsSandboxAndMovesWithIt(t *testing.T) {
	t.Parallel()
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	ctx := t.Context()
	key := IdemKey("v1.create", "alice", "k")
	if _, err := a.BindKey(ctx, "v1.create", "alice", "k", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	bound := func() Binding {
		t.Helper()
		b, err := a.BindKey(ctx, "v1.create", "alice", "k", "x", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A claim of another node leaves the binding alone.
	if err := a.ClaimPlacement(ctx, Placement{ID: "sb0", Node: "z", Owner: "alice", Key: key}); err != nil {
		t.Fatal(err)
	}
	if got, want := bound(), (Binding{Node: "a"}); got != want {
		t.Errorf("after another node's claim: %+v, want %+v", got, want)
	}
	if err := a.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "a", Owner: "alice", Name: "web", Failover: "recreate", Key: key}); err != nil {
		t.Fatal(err)
	}
	if got, want := bound(), (Binding{Node: "a", ID: "sb1"}); got != want {
		t.Errorf("after the claim: %+v, want %+v", got, want)
	}
	p, ok, err := a.FreshPlacement(ctx, "sb1")
	if err != nil || !ok {
		t.Fatalf("read placement: %v %v", ok, err)
	}
	if won, err := a.TakeOver(ctx, p, "b"); err != nil || !won {
		t.Fatalf("take over: %v %v", won, err)
	}
	if got, want := bound(), (Binding{Node: "b", ID: "sb1"}); got != want {
		t.Errorf("after the take over: %+v, want %+v", got, want)
	}
	if err := a.ReleasePlacementOf(ctx, "sb1", "b"); err != nil {
		t.Fatal(err)
	}
	if got, want := bound(), (Binding{Node: "b"}); got != want {
		t.Errorf("after the release: %+v, want %+v", got, want)
	}
}
