package e2b_test

import (
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestCreate_BodyRule_ConcurrentIdenticalBodiesMakeOneSandbox: the old
// rule, still what --e2b-body-dedupe=body selects.
func TestCreate_BodyRule_ConcurrentIdenticalBodiesMakeOneSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{dedupe: e2b.DedupeBody})
	body := map[string]any{
		"templateID": "base",
		"metadata":   map[string]string{"test": "dedupe"},
		"envVars":    map[string]string{"DEDUPE": "yes"},
	}
	const callers = 50
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]int{}
	)
	for range callers {
		wg.Go(func() {
			resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", body)
			if resp.status != http.StatusCreated {
				t.Errorf("create: %d %s", resp.status, resp.body)
				return
			}
			var c created
			decode(t, resp.body, &c)
			mu.Lock()
			ids[c.SandboxID]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("%d identical creates gave %d sandboxes: %v", callers, len(ids), ids)
	}
	if n := h.containers(t); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	var first string
	for id := range ids {
		first = id
	}

	// Within the replay window the same body still answers the same sandbox.
	h.clock.Advance(5 * time.Second)
	var c created
	decode(t, h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", body).body, &c)
	if c.SandboxID != first {
		t.Errorf("inside the window: %s, want %s", c.SandboxID, first)
	}

	// After it, a new one.
	h.clock.Advance(6 * time.Second)
	later := h.create(t, body)
	if later.SandboxID == first {
		t.Fatalf("after the replay window the same body answered the same sandbox %s", first)
	}
	if n := h.containers(t); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
}

func TestCreate_DifferentBodiesOrOwnersAreNotDeduped(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	a := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"n": "1"}})
	b := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"n": "2"}})
	resp := h.do(t, h.user, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"n": "1"}})
	if resp.status != http.StatusCreated {
		t.Fatalf("create as user: %d %s", resp.status, resp.body)
	}
	var c created
	decode(t, resp.body, &c)
	h.cleanup(t, c.SandboxID)
	if a.SandboxID == b.SandboxID || a.SandboxID == c.SandboxID {
		t.Errorf("distinct creates shared a sandbox: %s %s %s", a.SandboxID, b.SandboxID, c.SandboxID)
	}
}

func TestCreate_BodyDedupeOff(t *testing.T) {
	h := newHarness(t, harnessOptions{dedupe: e2b.DedupeOff})
	body := map[string]any{"templateID": "base"}
	a, b := h.create(t, body), h.create(t, body)
	if a.SandboxID == b.SandboxID {
		t.Fatalf("with body dedupe off, two creates gave one sandbox %s", a.SandboxID)
	}
}

func TestCreate_RuntimeFailureLeavesNoClaim(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"test": "fault"}}
	h.rt.Inject(runtimetest.Create, runtimetest.Fault{Err: errInjected, Times: 1})

	wantError(t, h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", body), http.StatusInternalServerError)
	if n := h.containers(t); n != 0 {
		t.Fatalf("%d containers after a failed create", n)
	}
	// No claim is left: the same body is free to claim again at once.
	rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{})
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows after a failed create: %d (%v)", len(rows), err)
	}
	c := h.create(t, body)
	if c.SandboxID == "" {
		t.Fatal("the retry made no sandbox")
	}
	if n := h.containers(t); n != 1 {
		t.Errorf("%d containers after the retry, want 1", n)
	}
}

func TestCreate_IdempotencyKey(t *testing.T) {
	h := newHarness(t, harnessOptions{dedupe: e2b.DedupeOff})
	send := func(body map[string]any) response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/v2/sandboxes", jsonBody(t, body))
		req.Header.Set("X-API-KEY", h.admin)
		req.Header.Set("Idempotency-Key", "key-1")
		return doReq(t, req)
	}
	first := send(map[string]any{"templateID": "base"})
	if first.status != http.StatusCreated {
		t.Fatalf("create: %d %s", first.status, first.body)
	}
	var a, b created
	decode(t, first.body, &a)
	h.cleanup(t, a.SandboxID)
	decode(t, send(map[string]any{"templateID": "base"}).body, &b)
	if a.SandboxID != b.SandboxID {
		t.Errorf("same key, same body: %s then %s", a.SandboxID, b.SandboxID)
	}
	wantError(t, send(map[string]any{"templateID": "base", "metadata": map[string]string{"x": "y"}}), http.StatusUnprocessableEntity)
}

// TestCreate_HostileTemplateOrMountIs4xxAndLeavesNothing: a template id
// that is no image reference is a 400 (it reached the engine: a 500), one
// that names no image on the host a 404, a volume at the agent's or the
// kernel's paths a 400; none leaves a row, a container or a volume
// directory.
func TestCreate_HostileTemplateOrMountIs4xxAndLeavesNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{dedupe: e2b.DedupeOff})
	body := func(template, path string) map[string]any {
		return map[string]any{"templateID": template, "volumeMounts": []map[string]string{{"name": "v", "path": path}}}
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
	}{
		{"template path traversal", body("../../etc/passwd", "/data"), http.StatusBadRequest},
		{"template uppercase", body("Base", "/data"), http.StatusBadRequest},
		{"template not built", body("sandboxd/not-built:never", "/data"), http.StatusNotFound},
		{"mount at the agent's socket", body("base", "/run/sandboxd"), http.StatusBadRequest},
		{"mount above the agent's binary", body("base", "/opt"), http.StatusBadRequest},
		{"mount at /proc/sys", body("base", "/proc/sys"), http.StatusBadRequest},
		{"mount at /sys/fs/cgroup", body("base", "/sys/fs/cgroup"), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", tc.body), tc.status)
			if n := h.containers(t); n != 0 {
				t.Errorf("%d containers left", n)
			}
			rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{})
			if err != nil || len(rows) != 0 {
				t.Errorf("rows left: %d (%v)", len(rows), err)
			}
			if left, err := os.ReadDir(h.volRoot); err != nil || len(left) != 0 {
				t.Errorf("volume directories left: %v (%v)", left, err)
			}
		})
	}
}
