package service_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

// keysCluster is the cluster's keys as a map, for service tests that
// inject the cluster's failures (a name held by another node, no quorum).
// The real keys are etcd's (internal/cluster), whose own tests prove its
// transactions; the multi-process tests drive both together.
type keysCluster struct {
	mu         sync.Mutex
	placements map[string]service.Placement
	names      map[string]string // owner/name → id
	hostnames  map[string]string // hostname → id
	intents    map[string]service.Intents
	fail       error // every call fails with it when set
	// failRelease, when set, fails ReleaseSandbox only.
	failRelease error
	// asks are the creates Place was asked to place; placeOn, when set,
	// is where it places them (else here).
	asks    []service.Ask
	placeOn service.Node
}

func newKeysCluster() *keysCluster {
	return &keysCluster{placements: map[string]service.Placement{}, names: map[string]string{}, hostnames: map[string]string{}}
}

func (c *keysCluster) ClaimSandbox(_ context.Context, p service.Placement) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if p.Name != "" {
		if id, ok := c.names[p.Owner+"/"+p.Name]; ok && id != p.ID {
			return fmt.Errorf("held by %s: %w", id, service.ErrNameConflict)
		}
		c.names[p.Owner+"/"+p.Name] = p.ID
	}
	c.placements[p.ID] = p
	return nil
}

func (c *keysCluster) ReleaseSandbox(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if c.failRelease != nil {
		return c.failRelease
	}
	if p, ok := c.placements[id]; ok && c.names[p.Owner+"/"+p.Name] == id {
		delete(c.names, p.Owner+"/"+p.Name)
	}
	delete(c.placements, id)
	return nil
}

func (c *keysCluster) ClaimHostname(_ context.Context, host, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if held, ok := c.hostnames[host]; ok && held != id {
		return service.ErrHostnameConflict
	}
	c.hostnames[host] = id
	return nil
}

func (c *keysCluster) ReleaseHostname(_ context.Context, host, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if c.hostnames[host] == id {
		delete(c.hostnames, host)
	}
	return nil
}

func (c *keysCluster) SetIntents(_ context.Context, id string, in service.Intents) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	if c.intents == nil {
		c.intents = map[string]service.Intents{}
	}
	c.intents[id] = in
	return nil
}

func (c *keysCluster) Ready(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fail
}

func (c *keysCluster) Place(_ context.Context, a service.Ask) (service.Node, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asks = append(c.asks, a)
	if c.fail != nil {
		return service.Node{}, false, c.fail
	}
	if c.placeOn.ID != "" {
		return c.placeOn, false, nil
	}
	return service.Node{}, true, nil
}

func (c *keysCluster) snapshot() (placements int, names, hostnames map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.placements), maps.Clone(c.names), maps.Clone(c.hostnames)
}

// A name another node holds is the same 409 as a local one, and the create
// that lost it leaves nothing: no container, row, route, capacity or key.
func TestCluster_NameHeldElsewhereIsAConflictThatLeavesNothing(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	kc.names["alice/web"] = "sb-00000000000000aa" // another node's
	h := newHarness(t, harnessOptions{cluster: kc})

	_, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Name: "web"})
	if !errors.Is(err, service.ErrNameConflict) {
		t.Fatalf("create: %v, want ErrNameConflict", err)
	}
	h.assertNothingLeft(t)
	n, names, _ := kc.snapshot()
	if n != 0 || !cmp.Equal(names, map[string]string{"alice/web": "sb-00000000000000aa"}) {
		t.Errorf("cluster after the refusal: %d placements, names %v", n, names)
	}
}

// A cluster that cannot answer refuses the create as unavailable
// (retryable), with nothing left behind; so does a destroy, which leaves
// the sandbox as it was (visible, its keys held) until the cluster is
// back. A destroy whose cluster step fails after its commit succeeds, and
// the reconciler finishes it once the cluster is back.
func TestCluster_UnavailableRefusesAndLeavesNothing(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	h := newHarness(t, harnessOptions{cluster: kc})
	ctx := t.Context()

	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	kc.mu.Lock()
	kc.fail = fmt.Errorf("no quorum: %w", service.ErrUnavailable)
	kc.mu.Unlock()

	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Name: "two"}); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("create without quorum: %v, want ErrUnavailable", err)
	}
	if err := h.svc.Destroy(ctx, admin, sb.ID); !errors.Is(err, service.ErrUnavailable) || service.UnavailableReason(err) != service.ReasonNoQuorum {
		t.Fatalf("destroy without quorum: %v, want ErrUnavailable naming the quorum", err)
	}
	if got, err := h.svc.Get(ctx, admin, sb.ID); err != nil || got.State != service.StateRunning {
		t.Errorf("a sandbox whose destroy was refused: %+v, %v; want it running", got, err)
	}
	if n, _, _ := kc.snapshot(); n != 1 {
		t.Errorf("placements after the refused destroy: %d, want 1", n)
	}

	// The cluster answers the check, then not the release: committed.
	kc.mu.Lock()
	kc.failRelease = fmt.Errorf("no quorum: %w", service.ErrUnavailable)
	kc.fail = nil
	kc.mu.Unlock()
	if err := h.svc.Destroy(ctx, admin, sb.ID); err != nil {
		t.Fatalf("destroy whose release failed after its commit: %v, want nil", err)
	}
	if _, err := h.svc.Get(ctx, admin, sb.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("a sandbox whose destroy was committed still reads: %v", err)
	}

	kc.mu.Lock()
	kc.failRelease = nil
	kc.mu.Unlock()
	h.clock.Advance(2 * time.Minute) // past the grace of a destroy in progress
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
	if n, names, _ := kc.snapshot(); n != 0 || len(names) != 0 {
		t.Errorf("cluster keys left: %d placements, names %v", n, names)
	}
}

// A sandbox's cluster keys live as long as it does: its placement and name
// from the create, a custom hostname from its binding; a destroy gives
// them all back. A hostname another node's sandbox holds is a conflict.
func TestCluster_KeysFollowTheSandbox(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	kc.hostnames["taken.example.com"] = "sb-00000000000000bb"
	h := newHarness(t, harnessOptions{cluster: kc})
	ctx := t.Context()

	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Name: "web", Failover: service.FailoverRecreate,
		SecretEnv: map[string]string{"K": "v"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	alice := service.Caller{Owner: "alice"}
	// A tenant's claim is pending: it takes no cluster key.
	if d, err := h.svc.AddDomain(ctx, alice, "web", "pending.example.com", 8080); err != nil || d.Verified {
		t.Fatalf("alice's claim = %+v, %v; want it pending", d, err)
	}
	// An admin's binding is verified: it takes the hostname cluster-wide.
	admin := service.Caller{Admin: true}
	if _, err := h.svc.AddDomain(ctx, admin, sb.ID, "app.example.com", 8080); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.AddDomain(ctx, admin, sb.ID, "taken.example.com", 8080); !errors.Is(err, service.ErrHostnameConflict) {
		t.Errorf("a hostname held elsewhere: %v, want ErrHostnameConflict", err)
	}
	// A failover replays the verified binding only (the pending claim
	// routes nothing), and a replay binds it verified with no DNS check.
	kc.mu.Lock()
	in := kc.intents[sb.ID]
	kc.mu.Unlock()
	if len(in.Domains) != 1 || in.Domains[0].Hostname != "app.example.com" {
		t.Errorf("recorded domains = %+v, want app.example.com alone", in.Domains)
	}
	if err := h.svc.ReplayDomain(ctx, sb.ID, "app.example.com", 8080); err != nil {
		t.Errorf("replay of the recorded binding: %v", err)
	}
	n, names, hosts := kc.snapshot()
	if n != 1 || names["alice/web"] != sb.ID || hosts["app.example.com"] != sb.ID {
		t.Fatalf("cluster after create and bind: %d placements, names %v, hostnames %v", n, names, hosts)
	}
	kc.mu.Lock()
	p := kc.placements[sb.ID]
	kc.mu.Unlock()
	if p.Failover != service.FailoverRecreate || len(p.Recovery) == 0 {
		t.Errorf("placement %+v: want a recovery spec for failover", p)
	}

	if err := h.svc.Destroy(ctx, alice, sb.ID); err != nil {
		t.Fatal(err)
	}
	n, names, hosts = kc.snapshot()
	if n != 0 || len(names) != 0 || !cmp.Equal(hosts, map[string]string{"taken.example.com": "sb-00000000000000bb"}) {
		t.Errorf("cluster after destroy: %d placements, names %v, hostnames %v", n, names, hosts)
	}
	h.assertNothingLeft(t)
}

// A create served from the warm pool takes its keys as a cold one does; a
// name held elsewhere refuses it the same way.
func TestCluster_PoolClaimTakesTheKeys(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	kc.names["alice/held"] = "sb-00000000000000cc"
	h := newHarness(t, harnessOptions{pool: poolOf(2), cluster: kc})
	runPool(t, h)
	waitReady(t, h, 2)
	ctx := t.Context()

	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(sb) {
		t.Fatalf("not served from the pool: %+v", sb.Timings)
	}
	if _, names, _ := kc.snapshot(); names["alice/web"] != sb.ID {
		t.Errorf("names after a pool claim: %v", names)
	}
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Name: "held"}); !errors.Is(err, service.ErrNameConflict) {
		t.Errorf("a pool claim of a name held elsewhere: %v, want ErrNameConflict", err)
	}
}

// Recreate makes the sandbox again under its id from the recovery spec:
// same name, env and secret env.
func TestCluster_RecreateFromTheRecoverySpec(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	h := newHarness(t, harnessOptions{cluster: kc})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Name: "web", Failover: service.FailoverRecreate,
		Env: map[string]string{"PLAIN": "p"}, SecretEnv: map[string]string{"SECRET": "s"}})
	if err != nil {
		t.Fatal(err)
	}
	kc.mu.Lock()
	spec := kc.placements[sb.ID].Recovery
	kc.mu.Unlock()

	// As on the node that lost it: the sandbox is gone here, its keys kept.
	other := newHarness(t, harnessOptions{cluster: kc})
	got, err := other.svc.Recreate(ctx, sb.ID, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != sb.ID || got.Name != "web" {
		t.Errorf("recreated %s %q, want %s \"web\"", got.ID, got.Name, sb.ID)
	}
	res, err := other.svc.Exec(ctx, service.Caller{Owner: "alice"}, "web", service.ExecRequest{Command: `echo "$PLAIN $SECRET"`})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "p s\n" {
		t.Errorf("the recreated sandbox sees %q", res.Stdout)
	}
	// A failover cannot carry volumes.
	if _, err := other.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Failover: service.FailoverRecreate,
		Mounts: []service.Mount{{Volume: "v", Path: "/data"}}}); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("failover with mounts: %v, want ErrInvalidArgument", err)
	}
}

// PlaceCreate places from the typed request: a create that mounts volumes
// stays here without asking the cluster; any other asks it with the
// owner, the template's id (resolved per owner; an unknown one is none)
// and the key, bound for its pending time and replay window; the
// cluster's failure is a retryable ErrUnavailable.
func TestCluster_PlaceCreateFromTheTypedRequest(t *testing.T) {
	t.Parallel()
	kc := newKeysCluster()
	h := newHarness(t, harnessOptions{cluster: kc})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}

	_, here, err := h.svc.PlaceCreate(ctx, alice, service.CreateOnceRequest{Create: service.CreateRequest{
		Owner: "alice", Mounts: []service.Mount{{Volume: "data", Path: "/data"}},
	}})
	if err != nil || !here {
		t.Fatalf("place a create with volumes: here=%v, %v; want here", here, err)
	}
	kc.mu.Lock()
	asked := len(kc.asks)
	kc.placeOn = service.Node{ID: "n2", URL: "http://n2.invalid:7070"}
	kc.mu.Unlock()
	if asked != 0 {
		t.Errorf("a create with volumes asked the cluster %d time(s)", asked)
	}

	key := service.OnceKey{Scope: "v1.create", Fingerprint: "f", PendingTTL: 2 * time.Minute, ReplayWindow: 24 * time.Hour}
	n, here, err := h.svc.PlaceCreate(ctx, alice, service.CreateOnceRequest{Key: key, Create: service.CreateRequest{Owner: "alice", Template: "no-such-template"}})
	if err != nil || here || n.ID != "n2" {
		t.Fatalf("place a keyed create: %+v here=%v, %v; want n2", n, here, err)
	}
	kc.mu.Lock()
	got := kc.asks
	kc.fail = fmt.Errorf("no quorum: %w", service.ErrUnavailable)
	kc.mu.Unlock()
	want := []service.Ask{{Owner: "alice", Key: service.KeyRef{Scope: "v1.create", Fingerprint: "f"}, KeyTTL: 24*time.Hour + 2*time.Minute}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("asks (-want +got):\n%s", d)
	}
	if _, _, err := h.svc.PlaceCreate(ctx, alice, service.CreateOnceRequest{Create: service.CreateRequest{Owner: "alice"}}); !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("place without quorum: %v, want ErrUnavailable", err)
	}
}
