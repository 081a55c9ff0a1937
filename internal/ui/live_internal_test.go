package ui

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// slowMetrics is an API whose metrics route blocks until release is
// closed (an engine slow to answer), counting the calls in flight.
type slowMetrics struct {
	release chan struct{}

	mu            sync.Mutex
	inFlight, max int
	calls         int
}

func (f *slowMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/metrics") {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.inFlight++
	f.calls++
	f.max = max(f.max, f.inFlight)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFlight--; f.mu.Unlock() }()
	select {
	case <-f.release:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"cpu_percent": 12.5, "memory_bytes": 1048576, "memory_limit_bytes": 268435456, "disk_bytes": 2048}`)
}

func (f *slowMetrics) state() (inFlight, maxInFlight, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, f.max, f.calls
}

// localBinding is what a login at host from a browser on this machine
// binds its session to.
func localBinding(host string) binding {
	return binding{host: host, class: addrLoopback}
}

// localRequest is a request from a client on this machine (httptest's
// own RemoteAddr is another machine's).
func localRequest(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "127.0.0.1:40404"
	return r
}

func usageRequest(cookie string, n, from int) *http.Request {
	var q []string
	for i := range n {
		q = append(q, fmt.Sprintf("id=sb-%016x", from+i))
	}
	r := localRequest(http.MethodGet, "http://127.0.0.1:7070/ui/usage?"+strings.Join(q, "&"))
	r.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
	return r
}

// TestUsage_Bounded: however many sandboxes the pages ask about and
// however many sessions ask, the dashboard has at most maxUsageCalls
// metrics calls in flight; a request names at most maxUsageBatch
// sandboxes (400 past it), and a session has one request at a time (429).
func TestUsage_Bounded(t *testing.T) {
	api := &slowMetrics{release: make(chan struct{})}
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c1, _, _ := h.sessions.open("sbx_one", auth.Principal{Role: auth.RoleUser, Owner: "one"}, localBinding("127.0.0.1:7070"))
	c2, _, _ := h.sessions.open("sbx_two", auth.Principal{Role: auth.RoleUser, Owner: "two"}, localBinding("127.0.0.1:7070"))

	w := httptest.NewRecorder()
	h.ServeHTTP(w, usageRequest(c1, maxUsageBatch+1, 0))
	if w.Code != http.StatusBadRequest {
		t.Fatalf("%d sandboxes in one request: %d %s, want 400", maxUsageBatch+1, w.Code, w.Body)
	}

	answers := make(chan *httptest.ResponseRecorder, 2)
	for i, c := range []string{c1, c2} {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, usageRequest(c, maxUsageBatch, i*maxUsageBatch))
			answers <- w
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n, _, _ := api.state(); n == maxUsageCalls {
			break
		}
		if time.Now().After(deadline) {
			n, _, _ := api.state()
			t.Fatalf("metrics calls in flight: %d, want %d", n, maxUsageCalls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// One request at a time per session, while its first waits.
	for deadline := time.Now().Add(30 * time.Second); ; {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, usageRequest(c1, 1, 100))
		if w.Code == http.StatusTooManyRequests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second usage request of a busy session: %d %s, want 429", w.Code, w.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(api.release)
	for range 2 {
		w := <-answers
		if w.Code != http.StatusOK {
			t.Fatalf("usage: %d %s", w.Code, w.Body)
		}
		var body struct {
			Items map[string]usageJSON `json:"items"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Items) != maxUsageBatch {
			t.Fatalf("usage answer: %v, %d items: %s", err, len(body.Items), w.Body)
		}
		for id, u := range body.Items {
			if u.Error != "" || u.Shown["cpu"] != "12.5%" || u.Shown["memory"] != "1.0 MiB of 256.0 MiB" {
				t.Fatalf("usage of %s: %+v", id, u)
			}
		}
	}
	if _, maxIn, calls := api.state(); maxIn > maxUsageCalls || calls != 2*maxUsageBatch {
		t.Fatalf("metrics calls: %d, at most %d at once; want %d, at most %d", calls, maxIn, 2*maxUsageBatch, maxUsageCalls)
	}
}

// TestLive_SiblingOriginRefused: a page of another origin (a sandbox's
// preview on a sibling host, whose requests carry the SameSite cookie)
// gets neither samples nor a log stream.
func TestLive_SiblingOriginRefused(t *testing.T) {
	api := &slowMetrics{release: make(chan struct{})}
	close(api.release)
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, _, _ := h.sessions.open("sbx_one", auth.Principal{Role: auth.RoleUser, Owner: "one"}, localBinding("localhost:7070"))
	for _, path := range []string{"/ui/usage?id=sb-0123456789abcdef", "/ui/sandbox/sb-0123456789abcdef/logs"} {
		for _, hd := range []http.Header{
			{"Origin": {"http://8080-sb-0123456789abcdef.localhost:7070"}},
			{"Sec-Fetch-Site": {"same-site"}},
		} {
			r := localRequest(http.MethodGet, "http://localhost:7070"+path)
			maps.Copy(r.Header, hd)
			r.AddCookie(&http.Cookie{Name: cookieName, Value: c})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusForbidden {
				t.Errorf("GET %s with %v: %d %s, want 403", path, hd, w.Code, w.Body)
			}
		}
	}
	if _, _, calls := api.state(); calls != 0 {
		t.Fatalf("refused requests made %d metrics calls", calls)
	}
}

// TestUsage_RevokedTokenEndsTheSession: a token revoked since the login
// (the API answers 401) ends its sessions, as the pages do.
func TestUsage_RevokedTokenEndsTheSession(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error": {"code": "unauthenticated", "message": "invalid token", "retryable": false}}`)
	})
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, _, _ := h.sessions.open("sbx_gone", auth.Principal{Role: auth.RoleUser, Owner: "one"}, localBinding("127.0.0.1:7070"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, usageRequest(c, 2, 0))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("usage with a revoked token: %d %s, want 401", w.Code, w.Body)
	}
	if h.sessions.get(c) != nil {
		t.Fatal("the revoked token's session lives on")
	}
}
