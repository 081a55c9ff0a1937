package service_test

// Regression tests of bugs found in the service's glue, one per bug,
// each named after what broke. They run on real SQLite and Docker with
// faults injected by the harness's wrappers.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// restarted is a second service over h's store, runtime (wrapped in a
// Faulty of its own), volumes and keyring, with a fresh ingress and
// admission: what a daemon restarted on the same data directory has. Its
// host-port pool is [lo, lo+7] and its reserved API hosts are reserved.
// It has not run its startup repair.
func restarted(t *testing.T, h *harness, lo int, reserved ...string) (*service.Service, *runtimetest.Faulty, *ingress.Router, *admission.Controller) {
	t.Helper()
	router, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: &lateDialer{svc: h.svc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	rt := runtimetest.NewFaulty(h.rt)
	adm := admission.New(admission.Budget{MilliCPU: 64_000, MemoryMB: 64 * 1024})
	deps := h.svc.Deps
	deps.Runtime, deps.Router, deps.Admission = rt, router, adm
	svc, err := service.New(service.Config{
		NodeID: h.nodeID, DefaultImage: busybox, AgentBinary: agentBinary,
		Domain: "localhost", HostPortLo: lo, HostPortHi: lo + 7, ReservedHosts: reserved,
	}, deps)
	if err != nil {
		t.Fatal(err)
	}
	return svc, rt, router, adm
}

// listening reports whether something accepts on 127.0.0.1:port.
func listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Regression: the reaper destroyed a sandbox that was still being created (its
// timeout counted from the row's insert). Now the timeout counts from the
// commit and a creating row is never reaped.
func TestReap_NeverTouchesASandboxBeingCreated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	reaped := -1
	var reapErr error
	h.routes.onInstall = func() {
		// Mid-create (the container runs, the row is creating): long past
		// the timeout, the reaper runs.
		h.clock.Advance(10 * time.Minute)
		reaped, reapErr = h.svc.Reap(ctx)
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, Timeout: time.Minute})
	h.routes.onInstall = nil
	if err != nil {
		t.Fatalf("create with the reaper running mid-create: %v", err)
	}
	if reaped != 0 || reapErr != nil {
		t.Fatalf("the reaper mid-create reaped %d (err %v), want 0", reaped, reapErr)
	}
	if want := h.clock.Now().Add(time.Minute); c.ExpiresAt.Sub(want).Abs() > time.Millisecond {
		t.Errorf("expires at %v, want a minute after the commit (%v)", c.ExpiresAt, want)
	}
	if n, err := h.svc.Reap(ctx); n != 0 || err != nil {
		t.Fatalf("right after the create: reaped %d (err %v), want 0", n, err)
	}
	h.clock.Advance(61 * time.Second)
	if n, err := h.svc.Reap(ctx); n != 1 || err != nil {
		t.Fatalf("a minute after the commit: reaped %d (err %v), want 1", n, err)
	}
	h.assertNothingLeft(t)
}

// Regression: the reaper listed expired rows, then destroyed each without
// looking again, so an extension answered 200 in between was lost; and
// its destroys ran one after another. Now each row is re-checked under the
// writer and the teardowns overlap.
func TestReap_ExtensionInTheWindowKeepsTheSandbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	keep, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var expired []string
	for range 3 {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		expired = append(expired, c.ID)
	}
	h.clock.Advance(2 * time.Minute)
	// Between the listing and the destroys, a PATCH extends one sandbox.
	h.store.on("ListExpired", func() error {
		_, err := h.svc.UpdateSandbox(ctx, admin, keep.ID, service.Update{SetTimeout: true, Timeout: time.Hour})
		return err
	})
	// The three destroys must be in flight together: each waits (with a
	// generous deadline) until all three have started.
	var started sync.WaitGroup
	started.Add(len(expired))
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	h.rt.Inject(runtimetest.Destroy, runtimetest.Fault{Times: len(expired), Hook: func() error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-time.After(time.Minute):
			return errors.New("the reaper's destroys ran one at a time")
		}
	}})
	n, err := h.svc.Reap(ctx)
	if err != nil || n != len(expired) {
		t.Fatalf("reaped %d (err %v), want %d", n, err, len(expired))
	}
	got, err := h.svc.Get(ctx, admin, keep.ID)
	if err != nil || got.State != store.StateRunning {
		t.Fatalf("the extended sandbox: %+v %v; want it running", got, err)
	}
	for _, id := range expired {
		if _, err := h.svc.Get(ctx, admin, id); !errors.Is(err, service.ErrNotFound) {
			t.Errorf("expired %s: %v, want it gone", id, err)
		}
	}
}

// Regression: a startup repair that failed (the engine not answering yet) was
// never retried: routes and TCP listeners stayed dead and admission
// started empty. Now the service refuses creates until the repair
// succeeds, retries it with backoff, and then restores everything.
func TestStartupRepair_RetriedUntilTheEngineAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	lo := freePorts(t, 8)
	before, _, beforeRouter, _ := restarted(t, h, lo)
	if err := before.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	sb, err := before.CreateSandbox(ctx, service.CreateRequest{Image: busybox, MilliCPU: 500, MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := before.ExposePort(ctx, admin, sb.ID, 8080, "tcp", true)
	if err != nil {
		t.Fatal(err)
	}
	// The daemon dies (its ingress with it); the next one starts while the
	// engine does not answer.
	beforeRouter.Close()
	eventually(t, "the dead daemon's TCP listener closes", func() bool { return !listening(ep.HostPort) })

	svc, rt, router, adm := restarted(t, h, lo)
	rt.Inject(runtimetest.ListOurs, runtimetest.Fault{Err: errInjected})
	bg, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() { defer close(done); svc.RunBackground(bg, time.Hour, time.Hour) }()
	defer func() { stop(); <-done }()

	eventually(t, "the repair fails twice", func() bool { return rt.Calls(runtimetest.ListOurs) >= 2 })
	if ok, reason := svc.Ready(); ok || !strings.Contains(reason, "list containers") {
		t.Fatalf("Ready() = %v, %q; want not ready, naming the failure", ok, reason)
	}
	if _, err := svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox}); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("create before the repair: %v, want ErrUnavailable", err)
	}
	// Nor does anything else that changes routes: the pass in progress
	// restores them from its snapshot.
	if err := svc.Destroy(ctx, admin, sb.ID); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("destroy before the repair: %v, want ErrUnavailable", err)
	}
	if _, err := svc.ExposePort(ctx, admin, sb.ID, 8081, "tcp", true); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("expose before the repair: %v, want ErrUnavailable", err)
	}

	rt.Clear(runtimetest.ListOurs) // the engine answers
	eventually(t, "the service becomes ready", func() bool { ok, _ := svc.Ready(); return ok })
	if router.Installed() != 1 {
		t.Errorf("routes after the repair: %d, want 1", router.Installed())
	}
	if !listening(ep.HostPort) {
		t.Errorf("TCP listener on %d not restored", ep.HostPort)
	}
	if used, _ := adm.Usage(); used != (admission.Request{MilliCPU: 500, MemoryMB: 256, DiskMB: service.DefaultDiskMB}) {
		t.Errorf("admission after the repair: %v, want the running sandbox's", used)
	}
}

// Regression: one failed read of a claim's sandbox was taken for "gone", and
// the retry created a second sandbox. Now only not-found counts.
func TestCreateOnce_TransientReadErrorIsNotGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	r := onceReq("fp-read-error", 2*time.Minute, time.Hour)
	first, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil {
		t.Fatal(err)
	}
	h.store.inject("GetSandbox")
	if c, err := h.svc.CreateOnce(ctx, alice, r); err == nil || !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("retry while reads fail: %+v %v; want ErrUnavailable", c, err)
	}
	h.store.clear("GetSandbox")
	again, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil || again.ID != first.ID || !again.Replayed {
		t.Fatalf("retry after: %+v %v; want %s replayed", again, err, first.ID)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("containers: %d, want 1", n)
	}
}

// Regression: E2B's dedupe counted a creating row as live, so a retry adopted a
// half-made sandbox that the reconciler later destroyed. Now a creating
// target is not an answer.
func TestCreateOnce_NeverAdoptsAHalfMadeSandbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const ttl = time.Minute
	// A holder that stalled mid-create: its claim's lock ran out while its
	// row is still creating.
	half := &store.Sandbox{ID: "sb-00000000000000dd", Owner: "alice", Image: busybox, State: store.StateCreating, CreatedAt: h.clock.Now()}
	if err := h.store.Store.CreateSandbox(ctx, half); err != nil {
		t.Fatal(err)
	}
	cl, err := h.store.Claim(ctx, store.ClaimRequest{Scope: "test.create", Fingerprint: "fp-half", PendingTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.AttachClaimTarget(ctx, cl, half.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * ttl)
	c, err := h.svc.CreateOnce(ctx, alice, onceReq("fp-half", ttl, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == half.ID || c.Replayed || c.State != store.StateRunning {
		t.Fatalf("got %s (replayed %v, %s); want a new running sandbox, not the half-made %s", c.ID, c.Replayed, c.State, half.ID)
	}
}

// Regression: a holder whose claim was taken over still reported its own
// sandbox as the answer, so one key gave two ids. Now a holder that lost
// its claim answers the key's settled sandbox and destroys its own.
func TestCreateOnce_LostClaimNeverGivesTwoIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const ttl = time.Minute
	r := onceReq("fp-lost", ttl, time.Hour)
	// The first holder stalls with its row still creating (its route
	// install blocks) and cannot extend its lock.
	h.store.inject("ExtendClaim")
	stalled, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	h.routes.onInstall = func() {
		if first.CompareAndSwap(false, true) {
			close(stalled)
			<-release
		}
	}
	type answer struct {
		c   *service.Created
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		c, err := h.svc.CreateOnce(ctx, alice, r)
		answered <- answer{c, err}
	}()
	recv(t, stalled)
	// Its lock runs out; a retry takes the claim over, finds the first
	// sandbox half-made and makes its own.
	h.clock.Advance(2 * ttl)
	second, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	got := recv(t, answered)
	if got.err != nil {
		t.Fatalf("first holder: %v", got.err)
	}
	if got.c.ID != second.ID {
		t.Fatalf("one key, two answers: first holder %s, retry %s", got.c.ID, second.ID)
	}
	eventually(t, "only the answered sandbox is left", func() bool { return h.containers(t) == 1 })
}

// Regression, the other half of the lost claim above: one failed extension used to stop the holder
// extending for good. Now it retries, and the claim holds.
func TestCreateOnce_FailedExtensionIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const ttl = 300 * time.Millisecond
	r := onceReq("fp-extend", ttl, time.Hour)
	failed := 0
	var mu sync.Mutex
	h.store.on("ExtendClaim", func() error {
		mu.Lock()
		defer mu.Unlock()
		if failed < 2 {
			failed++
			return errInjected
		}
		return nil
	})
	extended := make(chan struct{}, 1)
	h.store.on("ExtendClaim:done", func() error {
		select {
		case extended <- struct{}{}:
		default:
		}
		return nil
	})
	r.After = func(context.Context, service.Sandbox) error {
		recv(t, extended) // an extension succeeded after the failures
		return nil
	}
	c, err := h.svc.CreateOnce(t.Context(), alice, r)
	if err != nil || c.Replayed {
		t.Fatalf("%+v %v", c, err)
	}
	cl, err := h.store.PeekClaim(t.Context(), store.ClaimRequest{Scope: "test.create", Fingerprint: "fp-extend"})
	if err != nil || cl.Outcome != store.ClaimReady || cl.TargetID != c.ID {
		t.Fatalf("claim after: %+v %v; want ready with %s", cl, err, c.ID)
	}
}

// Regression: stale claims were never pruned. Now the periodic pass prunes
// them, keeping a pending claim whose sandbox a retry still has to adopt.
func TestReconcile_PrunesStaleClaimsButKeepsAdoptableOnes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	survivor, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(fp, target string, complete bool) {
		c, err := h.store.Claim(ctx, store.ClaimRequest{Scope: "test.create", Fingerprint: fp, PendingTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if target != "" {
			if err := h.store.AttachClaimTarget(ctx, c, target); err != nil {
				t.Fatal(err)
			}
		}
		if complete {
			if err := h.store.Complete(ctx, c, target, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim("fp-answered", survivor.ID, true)
	claim("fp-no-target", "", false)
	claim("fp-gone", "sb-00000000000000ee", false)
	claim("fp-adoptable", survivor.ID, false)
	h.clock.Advance(2 * time.Minute)
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	stale, err := h.store.ListStaleClaims(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 0 {
		t.Fatalf("prunable claims left: %+v; want none (fp-adoptable is kept, unlisted)", stale)
	}
	c, err := h.svc.CreateOnce(ctx, alice, onceReq("fp-adoptable", time.Minute, time.Hour))
	if err != nil || c.ID != survivor.ID || !c.Replayed {
		t.Fatalf("retry of the adoptable claim: %+v %v; want %s adopted", c, err, survivor.ID)
	}
}

// Regression: a destroy cut short (after its container went, before its row)
// was never finished: the reconciler marked the row error, kept its host
// ports and domains reserved, and startup re-opened its TCP listener. Now
// the destroy marks the row first and the reconciler finishes it.
func TestReconcile_FinishesAnInterruptedDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	lo := freePorts(t, 8)
	before, _, _, _ := restarted(t, h, lo)
	if err := before.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	sb, err := before.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := before.ExposePort(ctx, admin, sb.ID, 8080, "tcp", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := before.AddDomain(ctx, admin, sb.ID, "app.example.com", 8080); err != nil {
		t.Fatal(err)
	}
	h.store.inject("DeleteSandbox") // the daemon dies before the row goes
	if err := before.Destroy(ctx, admin, sb.ID); err != nil {
		t.Fatalf("destroy whose last step failed after its commit: %v, want nil (the reconciler finishes it)", err)
	}
	h.store.clear("DeleteSandbox")
	if _, err := before.Get(ctx, admin, sb.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("a sandbox whose destroy began: %v, want ErrNotFound", err)
	}

	svc, _, router, _ := restarted(t, h, lo)
	if err := svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Store.GetSandbox(ctx, sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("row after the repair: %v, want it deleted", err)
	}
	eps, _ := h.store.ListAllExposedPorts(ctx)
	ds, _ := h.store.ListAllCustomDomains(ctx)
	if len(eps) != 0 || len(ds) != 0 {
		t.Errorf("host ports %v and domains %v still reserved", eps, ds)
	}
	if router.Installed() != 0 {
		t.Errorf("routes: %d, want 0", router.Installed())
	}
	if listening(ep.HostPort) {
		t.Errorf("TCP listener on %d re-opened for a destroyed sandbox", ep.HostPort)
	}
	if n := h.containers(t); n != 0 {
		t.Errorf("containers: %d, want 0", n)
	}
}

// A container create the engine accepted from a process that then died can
// complete after the next process's startup pass looked: the pass rolls
// the row back (no container yet) and the container then appears with no
// row (seen in CI: TestCrashRecovery_KillDuringConcurrentCreates). The
// sweeps that follow such a startup destroy it.
func TestReconcile_LateContainerOfARolledBackCreateIsSwept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	lo := freePorts(t, 8)
	before, beforeRT, _, _ := restarted(t, h, lo)
	if err := before.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The old process's create reaches the engine, which holds it; the
	// process is dead by the time the engine acts (its undo cannot run).
	entered, release := make(chan struct{}), make(chan struct{})
	beforeRT.Inject(runtimetest.Create, runtimetest.Fault{
		Hook:  func() error { close(entered); <-release; return nil },
		Err:   errInjected,
		After: true,
	})
	beforeRT.Inject(runtimetest.Destroy, runtimetest.Fault{Err: errInjected})
	created := make(chan error, 1)
	go func() {
		_, err := before.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
		created <- err
	}()
	<-entered

	svc, rt, _, _ := restarted(t, h, lo)
	bg, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.RunBackground(bg, time.Hour, time.Hour) }()
	defer func() { stop(); <-done }()
	eventually(t, "the startup repair is done", func() bool { ok, _ := svc.Ready(); return ok })
	rows, _, err := h.store.ListSandboxes(ctx, store.ListFilter{IncludeDestroying: true})
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows after the startup pass: %v, %v; want the creating row rolled back", rows, err)
	}

	// Hold the sweeps while the late container is counted.
	gate := make(chan struct{})
	var open sync.Once
	defer open.Do(func() { close(gate) })
	rt.Inject(runtimetest.ListOurs, runtimetest.Fault{Hook: func() error { <-gate; return nil }})
	close(release) // the engine carries out the dead process's create
	if err := <-created; err == nil {
		t.Fatal("the old create succeeded despite the injected fault")
	}
	if n := h.containers(t); n != 1 {
		t.Fatalf("containers after the late create: %d, want the 1 orphan", n)
	}
	rt.Clear(runtimetest.ListOurs)
	open.Do(func() { close(gate) })
	eventually(t, "the late orphan is destroyed", func() bool { return h.containers(t) == 0 })
}

// TestStartupRepair_SkipsADomainThatIsNowAnAPIHost: a custom domain bound
// before the operator reserved its name (--api-host added since) is not
// routed again at startup: it would take the API's own traffic. Other
// domains are restored.
func TestStartupRepair_SkipsADomainThatIsNowAnAPIHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	lo := freePorts(t, 8)
	before, _, beforeRouter, _ := restarted(t, h, lo)
	if err := before.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	sb, err := before.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.Background(), admin, sb.ID) })
	if _, err := before.ExposePort(ctx, admin, sb.ID, 8080, "http", true); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.example.test", "app.example.test"} {
		if _, err := before.AddDomain(ctx, admin, sb.ID, host, 8080); err != nil {
			t.Fatal(err)
		}
	}
	beforeRouter.Close()

	after, _, router, _ := restarted(t, h, lo, "API.example.test")
	if err := after.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !router.Routable("app.example.test") {
		t.Error("app.example.test is not routed after the restart")
	}
	if router.Routable("api.example.test") {
		t.Error("api.example.test, now an API host, is routed to the sandbox after the restart")
	}
	if _, err := after.AddDomain(ctx, admin, sb.ID, "api.example.test", 8080); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("binding the API host again: %v, want ErrInvalidArgument", err)
	}
}

// A kill that lands while the reaper is destroying the sandbox used to
// answer success (E2B's Sandbox.kill returned true for a sandbox its
// timeout had already ended; seen in test/compat/e2b). The sandbox was
// already gone to every read: the kill finishes the work and says not
// found, so exactly one destroy wins.
func TestDestroy_OfASandboxTheReaperIsDestroyingIsNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Minute)
	inReap, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	h.store.on("DeleteSandbox", func() error {
		if first.CompareAndSwap(false, true) {
			close(inReap)
			<-release
		}
		return nil
	})
	reaped := make(chan error, 1)
	go func() { _, err := h.svc.Reap(ctx); reaped <- err }()
	<-inReap
	if err := h.svc.Destroy(ctx, admin, sb.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("destroy while the reaper destroys: %v, want ErrNotFound", err)
	}
	close(release)
	if err := <-reaped; err != nil {
		t.Fatal(err)
	}
	if n := h.containers(t); n != 0 {
		t.Errorf("containers: %d, want 0", n)
	}
}
