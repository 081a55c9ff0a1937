package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Identical creates are never collapsed; only a create whose
// client went away before its answer is adopted, by one identical retry
// inside the window, and destroyed after it.

// rows is how many sandbox rows exist (any state).
func (h *harness) rows(t *testing.T) int {
	t.Helper()
	rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// waitUndelivered waits until the create of body by the admin is offered
// to retries.
func (h *harness) waitUndelivered(t *testing.T, body map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	fp, err := e2b.BodyFingerprint("admin", b)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := h.store.HasUndelivered(t.Context(), e2b.DeliveryScope, fp)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute the abandoned create is not offered to retries")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// abortMidCreate sends a create of body and gives up while the engine is
// creating its sandbox, once the server has offered it to retries. The
// engine is held until release is closed.
func (h *harness) abortMidCreate(t *testing.T, body map[string]any) (release func()) {
	t.Helper()
	entered, held := make(chan struct{}), make(chan struct{})
	h.rt.Inject(runtimetest.Create, runtimetest.Fault{Times: 1, Hook: func() error {
		close(entered)
		<-held
		return nil
	}})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v2/sandboxes", jsonBody(t, body))
	req.Header.Set("X-API-KEY", h.admin)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the aborted create answered: %v", err)
	}
	h.waitUndelivered(t, body)
	return func() { close(held) }
}

// TestCreate_IdenticalCreatesAreNeverCollapsed: five identical creates in a
// row give five sandboxes, eight at once eight more (today's SDK loops and
// Promise.all); none is answered with another's.
func TestCreate_IdenticalCreatesAreNeverCollapsed(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"test": "fanout"}}
	ids := map[string]bool{}
	for range 5 {
		c := h.create(t, body)
		if ids[c.SandboxID] {
			t.Fatalf("sequential identical creates: %s twice", c.SandboxID)
		}
		ids[c.SandboxID] = true
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			c := h.create(t, body)
			mu.Lock()
			defer mu.Unlock()
			if ids[c.SandboxID] {
				t.Errorf("concurrent identical creates: %s twice", c.SandboxID)
			}
			ids[c.SandboxID] = true
		})
	}
	wg.Wait()
	if len(ids) != 13 {
		t.Errorf("%d sandboxes, want 13", len(ids))
	}
	if n := h.containers(t); n != 13 {
		t.Errorf("%d containers, want 13", n)
	}
}

// TestCreate_AbortedCreateIsAdoptedByItsRetry: a client that gives up
// while the server creates its sandbox does not stop the work; its retry
// gets that sandbox (one sandbox in all); a later identical create gets its
// own, and once the window passes nothing more is destroyed or left.
func TestCreate_AbortedCreateIsAdoptedByItsRetry(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"test": "abort"}}
	release := h.abortMidCreate(t, body)
	retry := make(chan created, 1)
	go func() {
		resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", body)
		var c created
		if resp.status == http.StatusCreated {
			decode(t, resp.body, &c)
		} else {
			t.Errorf("retry: %d %s", resp.status, resp.body)
		}
		retry <- c
	}()
	release()
	adopted := <-retry
	h.cleanup(t, adopted.SandboxID)
	if n := h.rows(t); n != 1 {
		t.Fatalf("%d sandboxes after an aborted create and its retry, want 1", n)
	}
	if n := h.containers(t); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	// Delivered now: never replayed.
	if later := h.create(t, body); later.SandboxID == adopted.SandboxID {
		t.Fatalf("an identical create after the retry got the retry's sandbox %s", adopted.SandboxID)
	}
	h.clock.Advance(11 * time.Second)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 0 {
		t.Fatalf("ExpireUndelivered = %d, %v; want nothing to expire", n, err)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("%d containers, want the two delivered ones", n)
	}
}

// TestCreate_AbortedCreateNobodyAdoptsIsDestroyed: with no retry, the
// abandoned sandbox lives out the window and then goes.
func TestCreate_AbortedCreateNobodyAdoptsIsDestroyed(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"test": "orphan"}}
	release := h.abortMidCreate(t, body)
	release()
	deadline := time.Now().Add(time.Minute)
	for h.containers(t) != 1 || h.runningRows(t) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned create never finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.clock.Advance(9 * time.Second)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 0 {
		t.Fatalf("inside the window: ExpireUndelivered = %d, %v", n, err)
	}
	h.clock.Advance(2 * time.Second)
	if n, err := h.svc.ExpireUndelivered(t.Context()); err != nil || n != 1 {
		t.Fatalf("after the window: ExpireUndelivered = %d, %v; want 1", n, err)
	}
	if n, c := h.rows(t), h.containers(t); n != 0 || c != 0 {
		t.Errorf("left after the window: %d rows, %d containers", n, c)
	}
}

// TestCreate_BodyRuleStillCollapses: --e2b-body-dedupe=body keeps the old
// behaviour: an identical body inside the window answers the first sandbox.
func TestCreate_BodyRuleStillCollapses(t *testing.T) {
	h := newHarness(t, harnessOptions{dedupe: e2b.DedupeBody})
	body := map[string]any{"templateID": "base"}
	if a, b := h.create(t, body), h.create(t, body); a.SandboxID != b.SandboxID {
		t.Fatalf("body rule: %s then %s, want one sandbox", a.SandboxID, b.SandboxID)
	}
}

// runningRows is how many sandbox rows are running.
func (h *harness) runningRows(t *testing.T) int {
	t.Helper()
	rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{States: []store.SandboxState{store.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// failingWriter passes the status line through and fails every body write,
// like a connection that broke under the answer.
type failingWriter struct{ http.ResponseWriter }

func (w failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken connection") }

func (w failingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestCreate_FailedWriteIsAdoptedByTheRetry: an answer whose write fails
// never reached its client: the identical retry gets that sandbox.
func TestCreate_FailedWriteIsAdoptedByTheRetry(t *testing.T) {
	var failed atomic.Bool
	h := newHarness(t, harnessOptions{wrap: func(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
		if r.Method == http.MethodPost && failed.CompareAndSwap(false, true) {
			return failingWriter{w}
		}
		return w
	}})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"test": "write"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/v2/sandboxes", jsonBody(t, body))
	req.Header.Set("X-API-KEY", h.admin)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("the first answer arrived whole: %d", resp.StatusCode)
		}
	}
	h.waitUndelivered(t, body)
	retry := h.create(t, body)
	if n := h.rows(t); n != 1 {
		t.Fatalf("%d sandboxes after a failed answer and its retry (%s), want 1", n, retry.SandboxID)
	}
}
