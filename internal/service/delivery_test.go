package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
)

const deliveryScope = "test.delivery"

// deliveryReq is an unkeyed create under the delivery rule (E2B's
// identical bodies): fp stands for the body's fingerprint.
func deliveryReq(fp string, window time.Duration) service.CreateOnceRequest {
	return service.CreateOnceRequest{
		Key:    service.OnceKey{Scope: deliveryScope, Fingerprint: fp, PendingTTL: 2 * time.Minute, ReplayWindow: window, Delivery: true},
		Create: service.CreateRequest{Owner: "alice", Image: busybox},
	}
}

// deliveredCreate is a create whose client receives the answer.
func deliveredCreate(t *testing.T, svc *service.Service, r service.CreateOnceRequest) *service.Created {
	t.Helper()
	c, err := svc.CreateOnce(t.Context(), alice, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delivery.HandOver(t.Context()); err != nil {
		t.Fatalf("HandOver(%s) = %v", c.ID, err)
	}
	return c
}

// abandonedCreate is a create whose client goes away once the sandbox is
// made, before the answer is written. It returns once the create is
// offered to retries.
func abandonedCreate(t *testing.T, h *harness, r service.CreateOnceRequest) *service.Created {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := c.Delivery.HandOver(ctx); !errors.Is(err, service.ErrUndelivered) {
		t.Fatalf("HandOver after the client left = %v, want ErrUndelivered", err)
	}
	h.waitUndelivered(t, r.Key.Fingerprint)
	return c
}

func (h *harness) waitUndelivered(t *testing.T, fp string) {
	t.Helper()
	eventually(t, "the create is offered to retries", func() bool {
		ok, err := h.store.HasUndelivered(t.Context(), deliveryScope, fp)
		return err == nil && ok
	})
}

// TestCreateOnce_Delivery_IdenticalCreatesAreNeverCollapsed: eight
// identical creates at once give eight sandboxes, five in a row five more:
// none waits on, nor is answered with, another whose client is connected.
func TestCreateOnce_Delivery_IdenticalCreatesAreNeverCollapsed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-fanout", 10*time.Second)
	ids := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c := deliveredCreate(t, h.svc, r)
			mu.Lock()
			ids[c.ID] = true
			mu.Unlock()
			if c.Replayed {
				t.Errorf("%s replayed", c.ID)
			}
		})
	}
	wg.Wait()
	for range 5 {
		c := deliveredCreate(t, h.svc, r)
		if ids[c.ID] || c.Replayed {
			t.Fatalf("a sequential identical create got %s again (replayed %v)", c.ID, c.Replayed)
		}
		ids[c.ID] = true
	}
	if len(ids) != 13 {
		t.Errorf("%d sandboxes, want 13", len(ids))
	}
	if n := h.containers(t); n != 13 {
		t.Errorf("%d containers, want 13", n)
	}
}

// TestCreateOnce_Delivery_DeliveredIsNeverReplayed: once the answer is
// handed over, the sandbox is its client's: the request's context ending
// afterwards offers it to nobody, and identical creates inside the window
// make their own.
func TestCreateOnce_Delivery_DeliveredIsNeverReplayed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-delivered", 10*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	first, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Delivery.HandOver(ctx); err != nil {
		t.Fatal(err)
	}
	cancel() // the request ends, as every request does
	if next := deliveredCreate(t, h.svc, r); next.ID == first.ID {
		t.Fatalf("a delivered sandbox %s was given out again", first.ID)
	}
	h.clock.Advance(time.Hour)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 0 {
		t.Fatalf("ExpireUndelivered = %d, %v; want nothing (both were delivered)", n, err)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
}

// TestCreateOnce_Delivery_RacingRetriesOneAdopter: of eight identical
// retries racing for one undelivered create, exactly one adopts it; the
// others create their own.
func TestCreateOnce_Delivery_RacingRetriesOneAdopter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-race", 10*time.Second)
	lost := abandonedCreate(t, h, r)
	var (
		mu       sync.Mutex
		adopters int
		ids      = map[string]bool{}
		start    = make(chan struct{})
		wg       sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			<-start
			c := deliveredCreate(t, h.svc, r)
			mu.Lock()
			defer mu.Unlock()
			ids[c.ID] = true
			if c.ID == lost.ID {
				adopters++
				if !c.Replayed {
					t.Errorf("the adopter's answer is not marked replayed")
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if adopters != 1 || len(ids) != 8 {
		t.Fatalf("%d adopters of %s and %d sandboxes; want 1 and 8", adopters, lost.ID, len(ids))
	}
	if n := h.containers(t); n != 8 {
		t.Errorf("%d containers, want 8", n)
	}
}

// TestCreateOnce_Delivery_UndeliveredIsDestroyedAfterTheWindow: a create
// nobody receives or adopts stays inside the window and is destroyed after
// it, leaving nothing.
func TestCreateOnce_Delivery_UndeliveredIsDestroyedAfterTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const window = 10 * time.Second
	lost := abandonedCreate(t, h, deliveryReq("fp-expire", window))
	h.clock.Advance(window - time.Second)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 0 {
		t.Fatalf("inside the window: ExpireUndelivered = %d, %v", n, err)
	}
	if n := h.containers(t); n != 1 {
		t.Fatalf("inside the window: %d containers, want 1", n)
	}
	h.clock.Advance(2 * time.Second)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 1 {
		t.Fatalf("after the window: ExpireUndelivered = %d, %v; want 1", n, err)
	}
	if _, err := h.svc.Get(t.Context(), alice, lost.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("the expired sandbox: %v, want not found", err)
	}
	h.assertNothingLeft(t)
	// And a retry after the window makes a new one.
	if c := deliveredCreate(t, h.svc, deliveryReq("fp-expire", window)); c.ID == lost.ID || c.Replayed {
		t.Errorf("after the window a retry got %s (replayed %v)", c.ID, c.Replayed)
	}
}

// TestCreateOnce_Delivery_AdopterWhoLeavesOffersItAgain: an adopter whose
// own client goes away leaves the sandbox undelivered again; the next
// retry adopts it.
func TestCreateOnce_Delivery_AdopterWhoLeavesOffersItAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-again", 10*time.Second)
	lost := abandonedCreate(t, h, r)
	ctx, cancel := context.WithCancel(t.Context())
	a, err := h.svc.CreateOnce(ctx, alice, r)
	if err != nil || a.ID != lost.ID {
		t.Fatalf("first retry: %v %v, want %s", a, err, lost.ID)
	}
	cancel()
	if err := a.Delivery.HandOver(ctx); !errors.Is(err, service.ErrUndelivered) {
		t.Fatalf("HandOver = %v, want ErrUndelivered", err)
	}
	h.waitUndelivered(t, "fp-again")
	if b := deliveredCreate(t, h.svc, r); b.ID != lost.ID {
		t.Fatalf("second retry got %s, want %s", b.ID, lost.ID)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("%d containers, want 1", n)
	}
}

// TestCreateOnce_Delivery_FailedWriteOffersIt: an answer handed over whose
// write then failed is offered to the retry.
func TestCreateOnce_Delivery_FailedWriteOffersIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-write", 10*time.Second)
	c := deliveredCreate(t, h.svc, r)
	c.Delivery.Failed(t.Context())
	if got := deliveredCreate(t, h.svc, r); got.ID != c.ID {
		t.Fatalf("retry after a failed write got %s, want %s", got.ID, c.ID)
	}
}

// TestCreateOnce_Delivery_ClientLeavesMidCreate: a client that goes away
// while its sandbox is still being made does not stop the work; its retry,
// arriving meanwhile, waits for that sandbox instead of making another.
func TestCreateOnce_Delivery_ClientLeavesMidCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	r := deliveryReq("fp-mid", 10*time.Second)
	entered, release := make(chan struct{}), make(chan struct{})
	h.rt.Inject(runtimetest.Create, runtimetest.Fault{Times: 1, Hook: func() error {
		close(entered)
		<-release
		return nil
	}})
	ctx, cancel := context.WithCancel(t.Context())
	type result struct {
		c   *service.Created
		err error
	}
	first := make(chan result, 1)
	go func() {
		c, err := h.svc.CreateOnce(ctx, alice, r)
		first <- result{c, err}
	}()
	<-entered
	cancel() // the client gives up while the engine works
	h.waitUndelivered(t, "fp-mid")
	retry := make(chan result, 1)
	go func() {
		c, err := h.svc.CreateOnce(t.Context(), alice, r)
		retry <- result{c, err}
	}()
	close(release)
	f := <-first
	if f.err != nil {
		t.Fatalf("the abandoned create failed: %v", f.err)
	}
	if err := f.c.Delivery.HandOver(ctx); !errors.Is(err, service.ErrUndelivered) {
		t.Fatalf("abandoned create's HandOver = %v, want ErrUndelivered", err)
	}
	g := <-retry
	if g.err != nil || g.c.ID != f.c.ID {
		t.Fatalf("retry: %v %v, want %s", g.c, g.err, f.c.ID)
	}
	if err := g.c.Delivery.HandOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("%d containers, want 1", n)
	}
}

// TestCreateOnce_Delivery_DaemonKilledBeforeHandOver: a process that dies
// after the create but before the hand-over (SIGKILL) leaves an inflight
// claim; the next start offers it: a retry adopts it, or it is destroyed
// after the window.
func TestCreateOnce_Delivery_DaemonKilledBeforeHandOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const window = 10 * time.Second
	// The dead process: creates made, nothing handed over, and its
	// requests' contexts never end (it is gone, not cancelling).
	adopted, err := h.svc.CreateOnce(context.WithoutCancel(t.Context()), alice, deliveryReq("fp-kill-a", window))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := h.svc.CreateOnce(context.WithoutCancel(t.Context()), alice, deliveryReq("fp-kill-b", window))
	if err != nil {
		t.Fatal(err)
	}

	svc, _, _, _ := restarted(t, h, 47100)
	if err := svc.Reconcile(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if got := deliveredCreate(t, svc, deliveryReq("fp-kill-a", window)); got.ID != adopted.ID {
		t.Fatalf("retry after the restart got %s, want %s", got.ID, adopted.ID)
	}
	h.clock.Advance(window + time.Second)
	if n, err := svc.ExpireUndelivered(t.Context()); err != nil || n != 1 {
		t.Fatalf("ExpireUndelivered after the restart = %d, %v; want 1 (%s)", n, err, orphan.ID)
	}
	if _, err := svc.Get(t.Context(), alice, orphan.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("the unadopted sandbox: %v, want not found", err)
	}
	if _, err := svc.Get(t.Context(), alice, adopted.ID); err != nil {
		t.Errorf("the adopted sandbox: %v", err)
	}
}

// TestCreateOnce_Delivery_ReconcileExpires: the periodic reconcile is the
// expiry's backstop.
func TestCreateOnce_Delivery_ReconcileExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	abandonedCreate(t, h, deliveryReq("fp-reconcile", time.Second))
	h.clock.Advance(2 * time.Second)
	if err := h.svc.Reconcile(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestCreateOnce_Delivery_HandOverRacesTheClientLeaving: a client leaving
// just as the answer is handed over either gets it (and the sandbox is
// never offered) or does not (and it is offered): never both, never
// neither.
func TestCreateOnce_Delivery_HandOverRacesTheClientLeaving(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	for i := range 8 {
		fp := "fp-handover-" + string(rune('a'+i))
		r := deliveryReq(fp, 10*time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		c, err := h.svc.CreateOnce(ctx, alice, r)
		if err != nil {
			t.Fatal(err)
		}
		var herr error
		var wg sync.WaitGroup
		wg.Go(func() { herr = c.Delivery.HandOver(ctx) })
		wg.Go(cancel)
		wg.Wait()
		switch {
		case herr == nil:
			// Handed over: nothing may ever offer it.
			if got := deliveredCreate(t, h.svc, r); got.ID == c.ID {
				t.Fatalf("run %d: a handed-over sandbox was adopted", i)
			}
		case errors.Is(herr, service.ErrUndelivered):
			h.waitUndelivered(t, fp)
			if got := deliveredCreate(t, h.svc, r); got.ID != c.ID {
				t.Fatalf("run %d: the undelivered sandbox %s was not adopted (got %s)", i, c.ID, got.ID)
			}
		default:
			t.Fatalf("run %d: HandOver = %v", i, herr)
		}
	}
}
