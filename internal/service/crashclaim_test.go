package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestIdempotent_ClaimOfADeadProcess: a create that died under its claim
// leaves it pending with its target attached. After the startup reconcile
// a retry takes the claim over at once and adopts the sandbox when it
// survived, or creates one when it did not — never two.
func TestIdempotent_ClaimOfADeadProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	once := func(fp string) service.Once {
		return service.Once{Scope: "test.create", Fingerprint: fp, PendingTTL: 2 * time.Minute, ReplayWindow: time.Hour}
	}
	work := func(ctx context.Context) (string, error) {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
		if err != nil {
			return "", err
		}
		return c.ID, nil
	}
	// The dead process's state: a pending claim whose target is attached.
	dead := func(fp, target string) {
		c, err := h.store.Claim(ctx, store.ClaimRequest{Scope: "test.create", Fingerprint: fp, PendingTTL: 2 * time.Minute})
		if err != nil || c.Outcome != store.ClaimAcquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if err := h.store.AttachClaimTarget(ctx, c, target); err != nil {
			t.Fatal(err)
		}
	}

	survivor, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
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

	id, replayed, err := h.svc.Idempotent(retryCtx, once("fp-survived"), work)
	if err != nil || id != survivor.ID || !replayed {
		t.Errorf("retry of a create that survived: id %s replayed %v err %v; want %s adopted", id, replayed, err, survivor.ID)
	}
	id, replayed, err = h.svc.Idempotent(retryCtx, once("fp-rolled-back"), work)
	if err != nil || replayed || id == "" || id == "sb-00000000000000cc" {
		t.Errorf("retry of a create that was rolled back: id %s replayed %v err %v; want a new sandbox", id, replayed, err)
	}
	ins, _ := h.rt.ListOurs(ctx)
	if len(ins) != 2 {
		t.Errorf("containers: %d, want 2 (the survivor and the one retry)", len(ins))
	}
}

// TestIdempotent_SlowWorkKeepsItsClaim: work that outlasts the pending TTL
// keeps its claim (the lock is extended while it runs), so a retry waits
// for it instead of taking the claim over and creating a second sandbox.
func TestIdempotent_SlowWorkKeepsItsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	once := service.Once{Scope: "test.slow", Fingerprint: "fp", PendingTTL: ttl, ReplayWindow: time.Hour}
	retried := make(chan string, 1)
	works := 0
	work := func(ctx context.Context) (string, error) {
		works++
		h.clock.Advance(200 * time.Millisecond)
		time.Sleep(2 * ttl / 3) // the holder extends the lock meanwhile
		h.clock.Advance(200 * time.Millisecond)
		// Past the original lock: a retry now must still find it pending.
		go func() {
			id, _, err := h.svc.Idempotent(ctx, once, func(context.Context) (string, error) {
				return "", errors.New("the retry ran the work a second time")
			})
			if err != nil {
				id = "error: " + err.Error()
			}
			retried <- id
		}()
		time.Sleep(ttl / 2)
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
		if err != nil {
			return "", err
		}
		return c.ID, nil
	}
	id, _, err := h.svc.Idempotent(ctx, once, work)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-retried; got != id || works != 1 {
		t.Fatalf("retry got %q, want %q; work ran %d times", got, id, works)
	}
}
