package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
)

func TestThreeMembers_DirectoryAndDeparted(t *testing.T) {
	t.Parallel() // mostly waiting on etcd: overlap it with the other tests
	ms := startThree(t)
	a := openNode(t, "a", []string{ms[0].ClientURL()})
	c := openNode(t, "c", []string{ms[2].ClientURL()})

	// A placement claimed through member m2 reaches a's directory on m0.
	if err := c.ClaimPlacement(t.Context(), Placement{ID: "sb1", Node: "c", Owner: "alice", Name: "web"}); err != nil {
		t.Fatalf("ClaimPlacement on c: %v", err)
	}
	waitFor(t, 10*time.Second, "sb1 in a's directory", func() bool {
		p, ok := a.Placement("sb1")
		return ok && p.Node == "c"
	})
	waitFor(t, 10*time.Second, "alice/web in a's directory", func() bool {
		id, err := a.LookupName(t.Context(), "alice", "web")
		return err == nil && id == "sb1"
	})

	// A clean leave: Close revokes the lease, a sees it at once.
	d := openNode(t, "d", []string{ms[1].ClientURL()})
	waitFor(t, 10*time.Second, "a sees d", func() bool { return hasNode(a, "d") })
	left := time.Now()
	if err := d.Close(); err != nil {
		t.Fatalf("Close d: %v", err)
	}
	waitDeparted(t, a, "d", 10*time.Second)
	if took := time.Since(left); took > 2*time.Second {
		t.Errorf("d's revoked lease took %s to reach a (want well under its 2 s TTL)", took)
	}
	if hasNode(a, "d") {
		t.Errorf("a's directory still lists d")
	}

	// A crash: the client goes away without a revoke, the lease expires.
	e := openNode(t, "e", []string{ms[1].ClientURL()})
	waitFor(t, 10*time.Second, "a sees e", func() bool { return hasNode(a, "e") })
	e.abandon()
	waitDeparted(t, a, "e", 20*time.Second)
	if got := nodeIDs(a); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("a's nodes: got %v, want [a c]", got)
	}
}

func hasNode(n *Node, id string) bool { return slices.Contains(nodeIDs(n), id) }

func nodeIDs(n *Node) []string {
	var ids []string
	for _, ni := range n.Nodes() {
		ids = append(ids, ni.ID)
	}
	return ids
}

func TestThreeMembers_QuorumLoss(t *testing.T) {
	t.Parallel() // mostly waiting on etcd: overlap it with the other tests
	ms := startThree(t)
	const opTimeout = time.Second
	a := openNode(t, "a", []string{ms[0].ClientURL()}, func(c *Config) { c.OpTimeout = opTimeout })
	if err := a.ClaimPlacement(t.Context(), Placement{ID: "sb1", Node: "a", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "sb1 in a's directory", func() bool { _, ok := a.Placement("sb1"); return ok })

	ms[1].Close()
	ms[2].Close()

	start := time.Now()
	err := a.ClaimPlacement(t.Context(), Placement{ID: "sb2", Node: "a", Owner: "alice", Name: "web"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ClaimPlacement without quorum: got %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("a write without quorum does not say its outcome is unknown: %v", err)
	}
	if took := time.Since(start); took > 3*opTimeout {
		t.Errorf("ClaimPlacement without quorum took %s, want at most %s", took, 3*opTimeout)
	}
	if err := a.Healthy(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Healthy without quorum: got %v, want ErrUnavailable", err)
	}
	// Names and tokens answer from the directory: calls are still
	// authenticated and routed without quorum.
	if _, err := NewTokenStore(a).LookupAPITokenByHash(t.Context(), [32]byte{}); !errors.Is(err, auth.ErrTokenNotFound) {
		t.Errorf("token lookup without quorum: got %v, want ErrTokenNotFound from the directory", err)
	}
	// The directory still answers.
	if p, ok := a.Placement("sb1"); !ok || p.Node != "a" {
		t.Errorf("Placement(sb1) without quorum: got %+v, %v", p, ok)
	}
	if got := a.PlacementsOf("a"); len(got) != 1 {
		t.Errorf("PlacementsOf(a) without quorum: got %d, want 1", len(got))
	}
}

func TestAddMember_JoinListRemove(t *testing.T) {
	t.Parallel() // mostly waiting on etcd: overlap it with the other tests
	m0 := startSingle(t)
	eps := []string{m0.ClientURL()}
	ctx := t.Context()

	peer, client := freeURL(t), freeURL(t)
	initial, err := AddMember(ctx, eps, testTLS(t), "m1", peer)
	if err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	if !strings.Contains(initial, "m1="+peer) || !strings.Contains(initial, "m0=") {
		t.Errorf("AddMember's initial cluster %q lacks m0 or m1=%s", initial, peer)
	}
	again, err := AddMember(ctx, eps, testTLS(t), "m1", peer)
	if err != nil || again != initial {
		t.Errorf("AddMember retry: got %q, %v; want %q", again, err, initial)
	}
	m1 := startMember(t, MemberConfig{Name: "m1", DataDir: t.TempDir(), ClientURL: client, PeerURL: peer, InitialCluster: initial, State: "existing"})

	list, err := ListMembers(ctx, []string{m1.ClientURL()}, testTLS(t))
	if err != nil {
		t.Fatalf("ListMembers: %v", err)
	}
	var names []string
	leaders := 0
	for _, mi := range list {
		names = append(names, mi.Name)
		if mi.Leader {
			leaders++
		}
		if mi.ID == 0 || mi.PeerURL == "" || mi.ClientURL == "" {
			t.Errorf("member %+v lacks an id or a URL", mi)
		}
	}
	if !slices.Equal(names, []string{"m0", "m1"}) || leaders != 1 {
		t.Errorf("ListMembers: %+v, want m0 and m1 with one leader", list)
	}

	// The joined member serves the same keys.
	a := openNode(t, "a", eps)
	b := openNode(t, "b", []string{m1.ClientURL()})
	if err := a.ClaimPlacement(ctx, Placement{ID: "sb1", Node: "a", Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "sb1 in b's directory", func() bool { _, ok := b.Placement("sb1"); return ok })
	b.Close()

	if err := RemoveMember(ctx, eps, testTLS(t), "m1"); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	if err := RemoveMember(ctx, eps, testTLS(t), "m1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RemoveMember again: got %v, want ErrNotFound", err)
	}
	list, err = ListMembers(ctx, eps, testTLS(t))
	if err != nil || len(list) != 1 || list[0].Name != "m0" || !list[0].Leader {
		t.Errorf("ListMembers after remove: %+v, %v; want m0 alone, leading", list, err)
	}
}
