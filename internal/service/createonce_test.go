package service_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// onceReq is a keyed create of a busybox sandbox for alice.
func onceReq(fp string, ttl, window time.Duration) service.CreateOnceRequest {
	return service.CreateOnceRequest{
		Key:    service.OnceKey{Scope: "test.create", Fingerprint: fp, PendingTTL: ttl, ReplayWindow: window},
		Create: service.CreateRequest{Owner: "alice", Image: busybox},
	}
}

var alice = service.Caller{Owner: "alice"}

// containers is how many containers of this harness's node exist.
func (h *harness) containers(t *testing.T) int {
	t.Helper()
	ins, err := h.rt.ListOurs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(ins)
}

// TestCreateOnce_ConcurrentDuplicatesOneSandbox: N callers with one key get
// one sandbox; inside the window a retry is replayed; after it a call makes
// a new one.
func TestCreateOnce_ConcurrentDuplicatesOneSandbox(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := onceReq("fp-1", 2*time.Minute, 10*time.Second)
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.svc.CreateOnce(t.Context(), alice, r)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = c.ID
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("ids differ: %v", ids)
		}
	}
	if c, err := h.svc.CreateOnce(t.Context(), alice, r); err != nil || c.ID != ids[0] || !c.Replayed {
		t.Fatalf("inside the window: %+v %v; want %s replayed", c, err, ids[0])
	}
	h.clock.Advance(11 * time.Second)
	if c, err := h.svc.CreateOnce(t.Context(), alice, r); err != nil || c.ID == ids[0] || c.Replayed {
		t.Fatalf("after the window: %+v %v; want a new sandbox", c, err)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("containers: %d, want 2", n)
	}
}

// TestCreateOnce_FailedCreateLeavesNoClaim: a create that fails deletes its
// claim, so the retry creates.
func TestCreateOnce_FailedCreateLeavesNoClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	h.rt.Inject(runtimetest.Create, runtimetest.Fault{Err: errInjected, Times: 1})
	r := onceReq("fp-retry", time.Minute, 10*time.Second)
	if _, err := h.svc.CreateOnce(t.Context(), alice, r); !errors.Is(err, errInjected) {
		t.Fatalf("first attempt: got %v, want the injected fault", err)
	}
	c, err := h.svc.CreateOnce(t.Context(), alice, r)
	if err != nil || c.Replayed {
		t.Fatalf("retry: %+v %v", c, err)
	}
}

// TestCreateOnce_ClaimOfADeadProcess: a create that died under its claim
// leaves it pending with its target attached. After the startup reconcile
// a retry takes the claim over at once and adopts the sandbox when it
// survived, or creates one when it did not — never two.
func TestCreateOnce_ClaimOfADeadProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	dead := func(fp, target string) {
		c, err := h.store.Claim(ctx, store.ClaimRequest{Scope: "test.create", Fingerprint: fp, PendingTTL: 2 * time.Minute})
		if err != nil || c.Outcome != store.ClaimAcquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if err := h.store.AttachClaimTarget(ctx, c, target); err != nil {
			t.Fatal(err)
		}
	}
	survivor, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	dead("fp-survived", survivor.ID)
	dead("fp-rolled-back", "sb-00000000000000cc")
	if err := h.svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	retryCtx, cancel := context.WithTimeout(ctx, 20*time.Second) // far below the 2-minute lock
	defer cancel()
	c, err := h.svc.CreateOnce(retryCtx, alice, onceReq("fp-survived", 2*time.Minute, time.Hour))
	if err != nil || c.ID != survivor.ID || !c.Replayed {
		t.Errorf("retry of a create that survived: %+v %v; want %s adopted", c, err, survivor.ID)
	}
	c, err = h.svc.CreateOnce(retryCtx, alice, onceReq("fp-rolled-back", 2*time.Minute, time.Hour))
	if err != nil || c.Replayed || c.ID == "sb-00000000000000cc" {
		t.Errorf("retry of a create that was rolled back: %+v %v; want a new sandbox", c, err)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("containers: %d, want 2 (the survivor and the one retry)", n)
	}
}

// TestCreateOnce_SlowCreateKeepsItsClaim: a create that outlasts the pending
// TTL keeps its claim (the lock is extended while it runs), so a retry
// waits for it instead of taking the claim over.
func TestCreateOnce_SlowCreateKeepsItsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const ttl = 300 * time.Millisecond
	r := onceReq("fp-slow", ttl, time.Hour)
	extended := make(chan struct{}, 16)
	h.store.on("ExtendClaim:done", func() error {
		select {
		case extended <- struct{}{}:
		default:
		}
		return nil
	})
	retried := make(chan *service.Created, 1)
	pending := make(chan struct{}, 1)
	h.store.onClaimed(func(c store.Claim) {
		if c.Outcome == store.ClaimPending {
			select {
			case pending <- struct{}{}:
			default:
			}
		}
	})
	r.After = func(ctx context.Context, sb service.Sandbox) error {
		// Move the store's clock past the original lock, twice, each time
		// after the holder extended it: a retry now must find it pending.
		for len(extended) > 0 {
			<-extended // extensions made while the sandbox was created
		}
		for range 2 {
			recv(t, extended)
			h.clock.Advance(ttl * 2 / 3)
		}
		recv(t, extended)
		go func() {
			retry := r
			retry.After = func(context.Context, service.Sandbox) error {
				return errors.New("the retry ran the create a second time")
			}
			c, err := h.svc.CreateOnce(ctx, alice, retry)
			if err != nil {
				t.Error(err)
			}
			retried <- c
		}()
		recv(t, pending) // the retry found the claim still held
		return nil
	}
	c, err := h.svc.CreateOnce(t.Context(), alice, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, retried); got == nil || got.ID != c.ID {
		t.Fatalf("retry got %+v, want %s", got, c.ID)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("containers: %d, want 1", n)
	}
}

// recv waits for a value on ch, failing the test after a generous deadline.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no value on %T after a minute", ch)
		panic("unreachable")
	}
}

// onceAnswer is what one CreateOnce call returned.
type onceAnswer struct {
	c   *service.Created
	err error
}

// A holder that lost its claim and then ended (its caller went away)
// destroyed its sandbox even while the holder that took the claim over
// could still adopt it (and might have answered it already). Now it
// destroys only a sandbox the key can no longer settle on.
func TestCreateOnce_CancelledLoserKeepsASandboxTheNewHolderMayAdopt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const ttl = time.Minute
	r := onceReq("fp-cancelled-loser", ttl, time.Hour)
	// The first holder stalls while its sandbox is half-made, unable to
	// extend its lock.
	h.store.inject("ExtendClaim")
	stalled, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	h.routes.onInstall = func() {
		if first.CompareAndSwap(false, true) {
			close(stalled)
			<-release
		}
	}
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	aDone := make(chan error, 1)
	go func() { _, err := h.svc.CreateOnce(actx, alice, r); aDone <- err }()
	recv(t, stalled)
	h.clock.Advance(2 * ttl) // its lock runs out

	// A retry takes the claim over and stalls before it reads the first
	// holder's sandbox.
	bIn, bGo := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	h.store.on("GetSandbox", func() error {
		if armed.CompareAndSwap(true, false) {
			close(bIn)
			<-bGo
		}
		return nil
	})
	pending := make(chan struct{}, 1)
	h.store.onClaimed(func(c store.Claim) {
		if c.Outcome == store.ClaimPending {
			select {
			case pending <- struct{}{}:
			default:
			}
		}
	})
	bDone := make(chan onceAnswer, 1)
	go func() { c, err := h.svc.CreateOnce(ctx, alice, r); bDone <- onceAnswer{c, err} }()
	recv(t, bIn)

	// The first holder finishes its sandbox, finds its claim lost, waits
	// for the new holder, and its caller goes away.
	close(release)
	recv(t, pending)
	cancelA()
	if err := recv(t, aDone); !errors.Is(err, context.Canceled) {
		t.Fatalf("first holder: %v, want context.Canceled", err)
	}
	close(bGo)
	b := recv(t, bDone)
	if b.err != nil || !b.c.Replayed {
		t.Fatalf("retry: %v; replayed %v; want the first holder's sandbox adopted", b.err, b.c != nil && b.c.Replayed)
	}
	if sb, err := h.svc.Get(ctx, alice, b.c.ID); err != nil || sb.State != service.StateRunning {
		t.Errorf("the adopted sandbox: %+v, %v; want running", sb, err)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("containers: %d, want 1", n)
	}
}

// A holder whose lock lapsed while its After ran destroyed its sandbox
// when After then failed, though a retry had taken the claim over and
// adopted the sandbox; and the adopter never ran After on it. Now the
// adopter finishes what it adopts, and the failed holder destroys only
// after its fenced claim delete says the claim was still its own.
func TestCreateOnce_AdopterFinishesWhatItAdoptsAndTheLapsedHolderKeepsIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const ttl = time.Minute
	r := onceReq("fp-after-lapsed", ttl, time.Hour)
	h.store.inject("ExtendClaim") // the first holder cannot extend its lock
	inAfter, failAfter := make(chan string, 1), make(chan struct{})
	r.After = func(_ context.Context, sb service.Sandbox) error {
		inAfter <- sb.ID
		<-failAfter
		return errors.New("the first holder's finish failed")
	}
	aDone := make(chan onceAnswer, 1)
	go func() { c, err := h.svc.CreateOnce(ctx, alice, r); aDone <- onceAnswer{c, err} }()
	made := recv(t, inAfter)
	h.clock.Advance(2 * ttl) // its lock runs out while After runs

	retry := r
	var finished atomic.Value
	retry.After = func(_ context.Context, sb service.Sandbox) error {
		finished.Store(sb.ID)
		return nil
	}
	second, err := h.svc.CreateOnce(ctx, alice, retry)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != made || !second.Replayed {
		t.Fatalf("retry: %s (replayed %v), want %s adopted", second.ID, second.Replayed, made)
	}
	if got, _ := finished.Load().(string); got != made {
		t.Errorf("the adopter's After ran on %q, want %s", got, made)
	}

	close(failAfter)
	a := recv(t, aDone)
	if a.err != nil || a.c.ID != made {
		t.Fatalf("first holder: %v; want %s (the key settled on it)", a.err, made)
	}
	if sb, err := h.svc.Get(ctx, alice, made); err != nil || sb.State != service.StateRunning {
		t.Errorf("the adopted sandbox: %+v, %v; want running", sb, err)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("containers: %d, want 1", n)
	}
}
