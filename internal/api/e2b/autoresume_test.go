package e2b_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// pauseE2B pauses sandbox id through the facade (memory absent: frozen).
func (h *harness) pauseE2B(t *testing.T, id string) {
	t.Helper()
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+id+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
}

// state is sandbox id's state in the service.
func (h *harness) state(t *testing.T, id string) service.State {
	t.Helper()
	sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.State
}

// TestAutoResume_EnvdRequestWakesAPausedSandbox: with autoResume enabled,
// the first envd request to a paused sandbox resumes it and is served;
// the sandbox runs again with a timeout, and its detail says autoResume.
func TestAutoResume_EnvdRequestWakesAPausedSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	h.pauseE2B(t, c.SandboxID)

	_, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)
	if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/etc/hostname"})); err != nil {
		t.Fatalf("stat of a paused sandbox with autoResume: %v, want it served", err)
	}
	sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, c.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != service.StateRunning || sb.ExpiresAt.IsZero() {
		t.Errorf("after the wake: state %s, expires %v; want running with a timeout", sb.State, sb.ExpiresAt)
	}
	var detail struct {
		Lifecycle struct {
			OnTimeout  string `json:"onTimeout"`
			AutoResume bool   `json:"autoResume"`
		} `json:"lifecycle"`
	}
	decode(t, h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID, nil).body, &detail)
	if detail.Lifecycle.OnTimeout != "pause" || !detail.Lifecycle.AutoResume {
		t.Errorf("lifecycle %+v, want pause and autoResume", detail.Lifecycle)
	}
}

// TestAutoResume_OnlyWithItsCredentials: requests to a paused sandbox
// with autoResume that lack its envd access token (none, a wrong one,
// another sandbox's, or the token-free /health) never wake it: they get
// today's "not running" answer and it stays paused. A sandbox without
// autoResume is not woken by a request with its token.
func TestAutoResume_OnlyWithItsCredentials(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	plain := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"plain": "1"}})
	h.pauseE2B(t, c.SandboxID)
	h.pauseE2B(t, plain.SandboxID)
	resumes := h.rt.Calls(runtimetest.Resume)

	for name, token := range map[string]string{"no": "", "a wrong": "x", "another sandbox's": plain.EnvdAccessToken} {
		_, fs := envdClients(h, c.SandboxID, token)
		if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"})); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%s token: %v, want unavailable (not running)", name, err)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
	if resp := doReq(t, req); resp.status != http.StatusBadGateway {
		t.Errorf("health without a token: %d, want 502", resp.status)
	}
	_, fs := envdClients(h, plain.SandboxID, plain.EnvdAccessToken)
	if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("without autoResume: %v, want unavailable", err)
	}
	if got := h.rt.Calls(runtimetest.Resume) - resumes; got != 0 {
		t.Errorf("%d resumes, want none", got)
	}
	for _, id := range []string{c.SandboxID, plain.SandboxID} {
		if st := h.state(t, id); st != service.StatePaused {
			t.Errorf("%s is %s, want paused", id, st)
		}
	}
}

// TestAutoResume_ConcurrentFirstRequestsResumeOnce: N requests at once to
// a paused sandbox with autoResume are all served, and the engine is
// asked to resume it once.
func TestAutoResume_ConcurrentFirstRequestsResumeOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	h.pauseE2B(t, c.SandboxID)
	resumes := h.rt.Calls(runtimetest.Resume)

	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)
			<-start
			_, errs[i] = fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"}))
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("concurrent first requests: %v", err)
	}
	if got := h.rt.Calls(runtimetest.Resume) - resumes; got != 1 {
		t.Errorf("%d resumes for %d concurrent requests, want 1", got, n)
	}
}

// TestAutoResume_FailedWakeAnswersItsError: a wake the engine refuses
// answers the typed error at once (503 unavailable), not a hang, and the
// sandbox stays paused; once the engine answers, the next request wakes it.
func TestAutoResume_FailedWakeAnswersItsError(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	h.pauseE2B(t, c.SandboxID)

	h.rt.Inject(runtimetest.Resume, runtimetest.Fault{Err: errors.New("engine down")})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/files?path=/etc/hostname", nil)
	req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
	req.Header.Set("X-Access-Token", c.EnvdAccessToken)
	resp := doReq(t, req)
	wantError(t, resp, http.StatusServiceUnavailable)
	if st := h.state(t, c.SandboxID); st != service.StatePaused {
		t.Errorf("after a failed wake: %s, want paused", st)
	}
	h.rt.Clear(runtimetest.Resume)
	_, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)
	// The failure is the answer for a few seconds (Service.Wake), then
	// a request wakes it.
	testenv.WaitFor(t, "a wake once the engine is back", func() error {
		_, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"}))
		return err
	})
}

// TestAutoResume_SignedURLGetsOnlyTheClass: a failed wake answers a
// request authorized by a signed /files URL (no access token: whoever
// holds the link) with the error's class only (the status's text), not
// the message the facade gives the access token's holder (which names
// the owner's quota, for a quota refusal).
func TestAutoResume_SignedURLGetsOnlyTheClass(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	h.pauseE2B(t, c.SandboxID)

	h.rt.Inject(runtimetest.Resume, runtimetest.Fault{Err: errors.New("engine down")})
	defer h.rt.Clear(runtimetest.Resume)
	const path = "/etc/hostname"
	get := func(signed bool) response {
		t.Helper()
		u := h.url + "/files?path=" + path
		if signed {
			u = h.url + "/files?" + url.Values{"path": {path}, "signature": {sdkSignature(path, "read", "", c.EnvdAccessToken, "")}}.Encode()
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
		if !signed {
			req.Header.Set("X-Access-Token", c.EnvdAccessToken)
		}
		return doReq(t, req)
	}
	var full, signed struct{ Message string }
	tokenResp := get(false)
	wantError(t, tokenResp, http.StatusServiceUnavailable)
	decode(t, tokenResp.body, &full)
	signedResp := get(true)
	wantError(t, signedResp, http.StatusServiceUnavailable)
	decode(t, signedResp.body, &signed)
	if want := "auto-resume of sandbox " + c.SandboxID + " failed: " + http.StatusText(http.StatusServiceUnavailable); signed.Message != want {
		t.Errorf("a signed URL's failed wake says %q; want the class only, %q", signed.Message, want)
	}
	if full.Message == signed.Message {
		t.Errorf("the access token's holder got %q, the class only; want the facade's message", full.Message)
	}
}

// TestAutoResume_PortHostWakesAPausedSandbox: a request to a port's host
// (<port>-<id>.<domain>, E2B's getHost) of a paused sandbox with
// autoResume resumes it, and the server that ran in it answers; without
// the traffic token of a sandbox that wants one, it stays paused.
func TestAutoResume_PortHostWakesAPausedSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	private := h.create(t, map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}, "network": map[string]any{"allowPublicTraffic": false}})
	srv := portHosts(h)
	defer srv.Close()
	for _, id := range []string{c.SandboxID, private.SandboxID} {
		startHostEcho(t, h, id, 8080)
		testenv.WaitFor(t, "the server in the sandbox", func() error {
			hdr := map[string]string{"E2B-Traffic-Access-Token": *private.TrafficAccessToken}
			if code, b := getAs(t, srv, "8080-"+id+".e2b.test", "/", hdr); code != http.StatusOK {
				return fmt.Errorf("%d %s", code, b)
			}
			return nil
		})
		h.pauseE2B(t, id)
	}

	if code, _ := getAs(t, srv, "8080-"+private.SandboxID+".e2b.test", "/", nil); code != http.StatusBadGateway {
		t.Errorf("a private port without its token: %d, want 502 (not running, as without autoResume)", code)
	}
	if st := h.state(t, private.SandboxID); st != service.StatePaused {
		t.Errorf("after a request without the traffic token: %s, want paused", st)
	}
	host := "8080-" + c.SandboxID + ".e2b.test"
	code, body := getAs(t, srv, host, "/x", nil)
	if code != http.StatusOK || body != "host="+host+" path=/x" {
		t.Errorf("port host of the paused sandbox: %d %q, want the server's answer", code, body)
	}
	if st := h.state(t, c.SandboxID); st != service.StateRunning {
		t.Errorf("after the request: %s, want running", st)
	}
}

// TestAutoPause_MemoryFlag: autoPause pauses at the timeout as pause does
// with autoPauseMemory as its memory: absent freezes, false stops the
// sandbox keeping its file system (true hibernates where the runtime
// can: under Docker it freezes, as absent).
func TestAutoPause_MemoryFlag(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	want := map[string]service.State{"absent": service.StatePaused, "true": service.StatePaused, "false": service.StateStopped}
	ids := map[string]string{}
	for memory := range want {
		body := map[string]any{"templateID": "base", "autoPause": true, "timeout": 60, "metadata": map[string]string{"m": memory}}
		if memory != "absent" {
			body["autoPauseMemory"] = memory == "true"
		}
		ids[memory] = h.create(t, body).SandboxID
	}
	h.clock.Advance(2 * time.Minute)
	if _, err := h.svc.Reap(t.Context()); err != nil {
		t.Fatal(err)
	}
	for memory, id := range ids {
		if st := h.state(t, id); st != want[memory] {
			t.Errorf("autoPauseMemory %s: %s after the timeout, want %s", memory, st, want[memory])
		}
	}
}
