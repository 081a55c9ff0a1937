package service_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// poolOf is a pool target of n busybox sandboxes of the default class.
func poolOf(n int) []service.PoolTarget {
	return []service.PoolTarget{{PoolClass: service.PoolClass{Image: busybox}, Size: n}}
}

// runPool runs h's background work (the pool among it) until the test ends.
func runPool(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.svc.RunBackground(ctx, time.Hour, time.Hour)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		h.svc.DrainPool(dctx)
	})
}

// waitReady waits until the pool holds n idle sandboxes.
func waitReady(t *testing.T, h *harness, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("the pool holds %d idle sandboxes", n), func() bool {
		ready := 0
		for _, st := range h.svc.PoolStatus() {
			ready += st.Ready
		}
		return ready == n
	})
}

// pooledIDs lists the pool's idle sandboxes from the store.
func pooledIDs(t *testing.T, h *harness) []string {
	t.Helper()
	rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{Owner: store.PoolOwner})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func hit(c *service.Created) bool {
	for _, st := range c.Timings {
		if st.Step == "pool" && st.Desc == "hit" {
			return true
		}
	}
	return false
}

// 64 creates race for 8 idle sandboxes: each gets a sandbox of its own,
// from the pool or cold, never one another create got.
func TestPool_ConcurrentClaimsNeverShare(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(8)})
	runPool(t, h)
	waitReady(t, h, 8)

	const n = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		owners  = map[string]string{}
		hits    int
		created []*service.Created
	)
	for i := range n {
		wg.Go(func() {
			req := service.CreateRequest{Owner: fmt.Sprintf("tenant-%d", i), Image: busybox}
			c, err := h.svc.CreateSandbox(t.Context(), req)
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := owners[c.ID]; dup {
				t.Errorf("%s went to both %s and %s", c.ID, prev, req.Owner)
			}
			owners[c.ID] = req.Owner
			if hit(c) {
				hits++
			}
			created = append(created, c)
		})
	}
	wg.Wait()
	if hits == 0 {
		t.Error("no create was served from the pool")
	}
	t.Logf("%d of %d creates served from the pool", hits, n)
	for _, c := range created {
		got, err := h.svc.Get(t.Context(), service.Caller{Owner: owners[c.ID]}, c.ID)
		if err != nil || got.Owner != owners[c.ID] {
			t.Errorf("%s as its owner: %+v, %v", c.ID, got.Owner, err)
		}
	}
	var dwg sync.WaitGroup
	for _, c := range created {
		dwg.Go(func() {
			if err := h.svc.Destroy(context.Background(), admin, c.ID); err != nil {
				t.Errorf("destroy %s: %v", c.ID, err)
			}
		})
	}
	dwg.Wait()
}

// What one claim sets — env, secret env, its token — is its sandbox's
// alone: the token the sandbox booted with stops working, and the next
// claim of the class sees none of it. Idle sandboxes are nobody's: no
// lookup or listing shows them, admins included.
func TestPool_ClaimIsolatesEnvSecretsAndToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(2)})
	runPool(t, h)
	waitReady(t, h, 2)
	ctx := t.Context()

	idle := pooledIDs(t, h)
	for _, id := range idle {
		if _, err := h.svc.Get(ctx, admin, id); !errors.Is(err, service.ErrNotFound) {
			t.Errorf("an admin's Get of idle %s: %v, want ErrNotFound", id, err)
		}
	}
	items, _, err := h.svc.List(ctx, admin, service.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 0 {
		t.Errorf("an admin's listing shows %d idle sandboxes", len(items))
	}

	first, err := h.svc.CreateSandbox(ctx, service.CreateRequest{
		Owner: "alice", Image: busybox, Name: "web", Tags: map[string]string{"team": "a"},
		Env: map[string]string{"PLAIN": "alice"}, SecretEnv: map[string]string{"SECRET": "alice-secret"},
		Timeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(first) {
		t.Fatalf("the first create was not served from the pool: %+v", first.Timings)
	}
	alice := service.Caller{Owner: "alice"}
	echo := func(c service.Caller, id string) string {
		t.Helper()
		res, err := h.svc.Exec(ctx, c, id, service.ExecRequest{Command: `echo "${PLAIN-none} ${SECRET-none}"`})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if got := echo(alice, first.ID); got != "alice alice-secret\n" {
		t.Errorf("alice's claimed sandbox sees %q", got)
	}
	got, err := h.svc.Get(ctx, alice, "web")
	if err != nil || got.ID != first.ID || got.Tags["team"] != "a" || got.ExpiresAt.IsZero() {
		t.Errorf("alice's sandbox by name: %+v, %v", got, err)
	}
	if _, leaked := got.Env["SECRET"]; leaked {
		t.Error("the secret env shows in the sandbox's view")
	}

	// The token it booted with is refused now.
	row, err := h.store.GetSandbox(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := h.keyring.Open(row.BootTokenSealed, secrets.AssociatedData("sandbox", first.ID, "agent-token"))
	if err != nil {
		t.Fatalf("open the boot token: %v", err)
	}
	old := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return h.rt.DialAgent(ctx, first.ID) }, string(boot))
	defer old.Close()
	if err := old.Check(ctx); err == nil {
		t.Error("the token the pooled sandbox booted with still works after its claim")
	}

	// The next claim of the class: nothing of alice's.
	second, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "bob", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(second) || second.ID == first.ID {
		t.Fatalf("the second create: hit %v, id %s (first %s)", hit(second), second.ID, first.ID)
	}
	if got := echo(service.Caller{Owner: "bob"}, second.ID); got != "none none\n" {
		t.Errorf("bob's claimed sandbox sees %q", got)
	}

	// A stop and a start: the agent boots with its first token again and
	// is handed the current one and the env.
	if _, err := h.svc.Stop(ctx, alice, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Start(ctx, alice, first.ID); err != nil {
		t.Fatal(err)
	}
	if got := echo(alice, first.ID); got != "alice alice-secret\n" {
		t.Errorf("after a stop and a start alice's sandbox sees %q", got)
	}
	for _, c := range []*service.Created{first, second} {
		if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// A name conflict or a quota costs no container, and the idle sandbox
// stays in the pool; idle sandboxes count in no tenant's quota.
func TestPool_RefusedClaimLeavesThePoolAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	quota := service.Quota{Sandboxes: 1}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Name: "web", Quota: quota})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(c) {
		t.Fatalf("not served from the pool: %+v", c.Timings)
	}
	waitReady(t, h, 1)
	idle := pooledIDs(t, h)
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Name: "web"}); !errors.Is(err, service.ErrNameConflict) {
		t.Errorf("a second sandbox named web: %v, want ErrNameConflict", err)
	}
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Quota: quota}); !errors.Is(err, service.ErrQuotaExceeded) {
		t.Errorf("past alice's quota: %v, want ErrQuotaExceeded", err)
	}
	if after := pooledIDs(t, h); fmt.Sprint(after) != fmt.Sprint(idle) {
		t.Errorf("idle sandboxes before the refused creates %v, after %v", idle, after)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("%d containers, want alice's and the idle one", n)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
}

// An idle sandbox that died under the pool: the create that takes it is
// served cold (a miss answers like a create without the pool), the dead
// one is destroyed, and the pool refills.
func TestPool_DeadIdleSandboxIsAMissAndIsReplaced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	dead := pooledIDs(t, h)[0]
	if err := h.rt.Stop(ctx, dead); err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if hit(c) || c.ID == dead {
		t.Errorf("the create got the dead sandbox: hit %v, id %s", hit(c), c.ID)
	}
	if res, err := h.svc.Exec(ctx, service.Caller{Owner: "alice"}, c.ID, service.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec in the cold sandbox: %+v, %v", res, err)
	}
	eventually(t, "the dead idle sandbox is destroyed and the pool refilled", func() bool {
		ids := pooledIDs(t, h)
		_, err := h.store.GetSandbox(ctx, dead)
		return len(ids) == 1 && ids[0] != dead && errors.Is(err, store.ErrNotFound)
	})
	waitReady(t, h, 1)
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
}

// A restarted daemon adopts the idle sandboxes the last one left, and
// destroys those beyond its targets; a drained pool leaves nothing.
func TestPool_RestartAdoptsIdleSandboxes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(2)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.svc.RunBackground(ctx, time.Hour, time.Hour) }()
	waitReady(t, h, 2)
	cancel() // the daemon dies without draining
	<-done
	before := pooledIDs(t, h)

	svc2, _, _, _ := restarted(t, h, 0)
	if _, err := svc2.SetPool(t.Context(), poolOf(1)); err != nil {
		t.Fatal(err)
	}
	if err := svc2.Reconcile(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { defer close(done2); svc2.RunBackground(ctx2, time.Hour, time.Hour) }()
	eventually(t, "the restarted daemon keeps one idle sandbox of the last run's", func() bool {
		st := svc2.PoolStatus()
		ids := pooledIDs(t, h)
		return len(st) == 1 && st[0].Ready == 1 && len(ids) == 1 && (ids[0] == before[0] || ids[0] == before[1])
	})
	c, err := svc2.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(c) || (c.ID != before[0] && c.ID != before[1]) {
		t.Errorf("the restarted daemon's create: hit %v, %s; want one of %v", hit(c), c.ID, before)
	}
	if err := svc2.Destroy(t.Context(), admin, c.ID); err != nil {
		t.Fatal(err)
	}
	cancel2()
	<-done2
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	svc2.DrainPool(dctx)
	if ids := pooledIDs(t, h); len(ids) != 0 {
		t.Errorf("idle sandboxes left after the drain: %v", ids)
	}
	eventually(t, "no container left after the drain", func() bool { return h.containers(t) == 0 })
}

// A claim writes its row and configures the agent at once: a daemon killed
// after the write and before the agent call leaves a row of its owner's
// whose agent takes only its boot token. The restarted daemon hands that
// agent its env and its current token before it is ready.
func TestPool_ClaimCutShortAfterItsWriteIsFinishedAtRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.svc.RunBackground(ctx, time.Hour, time.Hour) }()
	waitReady(t, h, 1)
	cancel() // the daemon dies without draining
	<-done
	id := pooledIDs(t, h)[0]
	t.Cleanup(func() { _ = h.svc.Destroy(context.Background(), admin, id) })

	// The claim's write, as claimPooled makes it, without its agent call.
	row, err := h.store.GetSandbox(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := h.keyring.Seal([]byte("fresh-token-of-alices-claim-0123456789"), secrets.AssociatedData("sandbox", id, "agent-token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Store.ClaimPooled(t.Context(), store.PoolClaim{
		ID: id, Owner: "alice", Env: map[string]string{"PLAIN": "alice"},
		AgentTokenSealed: sealed, BootTokenSealed: row.AgentTokenSealed, Spec: row.Spec, Commit: true,
	}); err != nil {
		t.Fatal(err)
	}

	svc2, _, _, _ := restarted(t, h, 0)
	if err := svc2.Reconcile(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	res, err := svc2.Exec(t.Context(), service.Caller{Owner: "alice"}, id, service.ExecRequest{Command: `echo "${PLAIN-none}"`})
	if err != nil || string(res.Stdout) != "alice\n" {
		t.Fatalf("exec in the sandbox whose claim a crash cut short: %+v, %v", res, err)
	}
	if err := svc2.Destroy(t.Context(), admin, id); err != nil {
		t.Fatal(err)
	}
}

// Idle sandboxes never keep a tenant out: a create the full host could not
// admit destroys idle ones to make room.
func TestPool_IdleSandboxesMakeRoomForTenants(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(2), budget: admission.Budget{MilliCPU: 2000, MemoryMB: 1024}})
	runPool(t, h)
	waitReady(t, h, 2)
	// Another class: no idle sandbox serves it, and the pool holds the host.
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox, MilliCPU: 500, MemoryMB: 64})
	if err != nil {
		t.Fatalf("a create on a host the pool fills: %v", err)
	}
	if hit(c) {
		t.Error("served from the pool, which has no such class")
	}
	if err := h.svc.Destroy(t.Context(), admin, c.ID); err != nil {
		t.Fatal(err)
	}
}

// Unkeyed E2B creates (the delivery rule) are served from the pool too:
// the delivery row is keyed by the pooled sandbox's id. A delivered one is
// never given out again, an abandoned one is adopted by its retry, and a
// dead idle sandbox makes the create go cold under a fresh id, leaving no
// delivery row behind for the dead one.
func TestPool_DeliveryCreatesClaimFromThePool(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(2)})
	runPool(t, h)
	waitReady(t, h, 2)
	ctx := t.Context()
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			_ = h.svc.Destroy(context.WithoutCancel(ctx), admin, id)
		}
	})

	idle := pooledIDs(t, h)
	r := deliveryReq("fp-pool-delivered", 10*time.Second)
	c := deliveredCreate(t, h.svc, r)
	made = append(made, c.ID)
	if !hit(c) || !slices.Contains(idle, c.ID) {
		t.Fatalf("delivered create: hit %v, id %s, want one of the idle %v", hit(c), c.ID, idle)
	}
	again := deliveredCreate(t, h.svc, r)
	made = append(made, again.ID)
	if again.ID == c.ID || again.Replayed {
		t.Fatalf("an identical create after delivery answered %s (replayed %v) again", again.ID, again.Replayed)
	}

	waitReady(t, h, 2)
	r = deliveryReq("fp-pool-abandoned", 10*time.Second)
	left := abandonedCreate(t, h, r)
	made = append(made, left.ID)
	if !hit(left) {
		t.Fatalf("the abandoned create did not come from the pool: %+v", left.Timings)
	}
	retry := deliveredCreate(t, h.svc, r)
	if retry.ID != left.ID {
		t.Fatalf("the retry got %s, want the abandoned %s", retry.ID, left.ID)
	}

	waitReady(t, h, 2)
	idle = pooledIDs(t, h)
	for _, id := range idle {
		if err := h.rt.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	r = deliveryReq("fp-pool-dead", 10*time.Second)
	cold := deliveredCreate(t, h.svc, r)
	made = append(made, cold.ID)
	if hit(cold) || slices.Contains(idle, cold.ID) {
		t.Fatalf("the create got a dead idle sandbox: hit %v, id %s (dead %v)", hit(cold), cold.ID, idle)
	}
	if res, err := h.svc.Exec(ctx, alice, cold.ID, service.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("exec in the cold sandbox: %+v, %v", res, err)
	}
	if ok, err := h.store.HasUndelivered(ctx, deliveryScope, r.Key.Fingerprint); err != nil || ok {
		t.Fatalf("undelivered rows for the dead sandbox's create: %v, %v", ok, err)
	}
}

// An unkeyed E2B create whose client goes away in the middle of its claim
// is offered to its retry once the claim is done, and the retry adopts
// that very sandbox: the delivery row is written with the claim, so it
// never names a sandbox that is still the pool's (which a retry could not
// adopt, and would replace with a second sandbox, leaving the first
// running for nobody).
func TestPool_DeliveryAbortedMidClaimIsAdoptedByItsRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	idle := pooledIDs(t, h)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.store.on("ClaimPooled", func() error {
		once.Do(func() {
			close(reached)
			<-release
		})
		return nil
	})
	r := deliveryReq("fp-pool-abort-mid-claim", 10*time.Second)
	cctx, cancel := context.WithCancel(ctx)
	type result struct {
		c   *service.Created
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := h.svc.CreateOnce(cctx, alice, r)
		done <- result{c, err}
	}()
	<-reached
	cancel()
	if ok, err := h.store.HasUndelivered(ctx, deliveryScope, r.Key.Fingerprint); err != nil || ok {
		t.Fatalf("before the claim's write an undelivered row exists (%v, %v): it names the pool's sandbox", ok, err)
	}
	close(release)
	out := <-done
	if out.err != nil {
		t.Fatalf("the aborted create: %v", out.err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, out.c.ID) })
	if out.c.ID != idle[0] {
		t.Fatalf("the create got %s, want the idle %s", out.c.ID, idle[0])
	}
	if err := out.c.Delivery.HandOver(cctx); !errors.Is(err, service.ErrUndelivered) {
		t.Fatalf("HandOver after the client left = %v, want ErrUndelivered", err)
	}
	h.waitUndelivered(t, r.Key.Fingerprint)
	retry := deliveredCreate(t, h.svc, r)
	if retry.ID != out.c.ID {
		_ = h.svc.Destroy(context.WithoutCancel(ctx), admin, retry.ID)
		t.Fatalf("the retry got %s, want the aborted create's %s", retry.ID, out.c.ID)
	}
}

// An idle sandbox that failed in the pool (the reconciler marked it) and
// that a claim takes before the health check is destroyed, with its
// capacity released; the create goes cold.
func TestPool_FailedIdleSandboxTakenByAClaimIsDestroyed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	failed := pooledIDs(t, h)[0]
	if _, err := h.store.UpdateSandboxState(ctx, failed, []store.SandboxState{store.StateRunning}, store.StateError, "its container vanished"); err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	if c.ID == failed || hit(c) {
		t.Fatalf("the create got the failed sandbox: id %s, hit %v", c.ID, hit(c))
	}
	eventually(t, "the failed idle sandbox is destroyed and its capacity released", func() bool {
		_, err := h.store.GetSandbox(ctx, failed)
		_, held := h.adm.Held(failed)
		return errors.Is(err, store.ErrNotFound) && !held
	})
}

// A claim configures the idle sandbox's agent before its store write: when
// that write fails, the sandbox has seen the owner's env and new token, so
// it is destroyed, never given back to the pool for the next owner; the
// create answers the error and the pool refills with another sandbox.
func TestPool_ClaimWriteFailureDestroysTheConfiguredSandbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	seen := pooledIDs(t, h)[0]
	var once sync.Once
	h.store.on("ClaimPooled", func() error {
		err := error(nil)
		once.Do(func() { err = errors.New("injected: the disk is full") })
		return err
	})
	_, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, SecretEnv: map[string]string{"KEY": "alice's"}})
	if err == nil || !strings.Contains(err.Error(), "the disk is full") {
		t.Fatalf("the create whose claim write failed: %v, want the write's error", err)
	}
	eventually(t, "the configured sandbox is destroyed and the pool refilled with another", func() bool {
		_, gerr := h.store.GetSandbox(ctx, seen)
		ids := pooledIDs(t, h)
		return errors.Is(gerr, store.ErrNotFound) && len(ids) == 1 && ids[0] != seen
	})
	waitReady(t, h, 1)
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "bob", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	if !hit(c) || c.ID == seen {
		t.Fatalf("bob's create: hit %v, id %s (alice's failed claim had %s)", hit(c), c.ID, seen)
	}
	res, err := h.svc.Exec(ctx, service.Caller{Owner: "bob"}, c.ID, service.ExecRequest{Command: `printf %s "$KEY"`})
	if err != nil || len(res.Stdout) != 0 {
		t.Errorf("bob sees KEY=%q (%v)", res.Stdout, err)
	}
}

// A create served from the pool announces itself as a cold one does: its
// owner's subscribers see it created, then running.
func TestPool_ClaimPublishesTheEventsOfACreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	sub, err := h.svc.Subscribe("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(t.Context()), admin, c.ID) })
	if !hit(c) {
		t.Fatalf("not served from the pool: %+v", c.Timings)
	}
	var got []string
	for len(got) < 2 {
		select {
		case ev := <-sub.Events():
			got = append(got, fmt.Sprintf("created=%v %s→%s", ev.Created, ev.OldState, ev.Sandbox.State))
		case <-time.After(time.Minute):
			t.Fatalf("events so far %v, want two", got)
		}
	}
	if want := "[created=true →creating created=false creating→running]"; fmt.Sprint(got) != want {
		t.Errorf("events %v, want %s", got, want)
	}
}

// The pool's class carries the disk limit: a create that asks for the
// default (or nothing) is served from the pool and reads the default, one
// that asks for another limit is served cold with its own, and both are
// recorded with whether the engine enforces them.
func TestPool_DiskLimitIsPartOfTheClass(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: poolOf(1)})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	lim, err := h.drt.DiskLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pooled, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if !hit(pooled) || pooled.DiskMB != service.DefaultDiskMB || pooled.DiskEnforced != lim.Enforced {
		t.Errorf("a default create: pool hit %v, disk %d MiB enforced %v; want a hit, %d MiB, enforced %v",
			hit(pooled), pooled.DiskMB, pooled.DiskEnforced, service.DefaultDiskMB, lim.Enforced)
	}
	own, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, DiskMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if hit(own) || own.DiskMB != 64 || own.DiskEnforced != lim.Enforced {
		t.Errorf("a 64 MiB create: pool hit %v, disk %d MiB enforced %v; want cold, 64 MiB, enforced %v", hit(own), own.DiskMB, own.DiskEnforced, lim.Enforced)
	}
	if got, err := h.svc.Get(ctx, admin, own.ID); err != nil || got.DiskMB != 64 || got.DiskEnforced != lim.Enforced {
		t.Errorf("read back: %d MiB enforced %v (%v)", got.DiskMB, got.DiskEnforced, err)
	}
	for _, id := range []string{pooled.ID, own.ID} {
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Error(err)
		}
	}
}

// A pool whose size follows demand grows only for creates that got a
// sandbox: a tenant whose creates of the class the empty pool cannot
// serve are all refused (past its quota) grows nothing; one create served
// cold grows it by one.
func TestPool_AdaptiveGrowsOnlyForCreatesServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pool: []service.PoolTarget{{PoolClass: service.PoolClass{Image: busybox}, Size: 0, Max: 4, Window: time.Minute}}})
	runPool(t, h)
	ctx := t.Context()
	target := func() int {
		st := h.svc.PoolStatus()
		if len(st) != 1 {
			t.Fatalf("pool status %+v, want one class", st)
		}
		return st[0].Target
	}
	if got := target(); got != 0 {
		t.Fatalf("target %d before any create, want 0", got)
	}
	for range 8 {
		_, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "mallory", Image: busybox, Quota: service.Quota{MemoryMB: 128}})
		if !errors.Is(err, service.ErrInvalidArgument) && !errors.Is(err, service.ErrQuotaExceeded) {
			t.Fatalf("a create past mallory's quota: %v", err)
		}
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	if hit(c) {
		t.Fatal("served from a pool of 0")
	}
	// Every miss was counted before the create returned: the first target
	// the loop sets counts them all.
	eventually(t, "the pool grows", func() bool { return target() != 0 })
	if got := target(); got != 1 {
		t.Errorf("target %d after one create served cold and %d refused, want 1", got, 8)
	}
	waitReady(t, h, 1)
}
