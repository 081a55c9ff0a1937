package ui

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
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

// testSession is a session as the dashboard's script holds it: its
// cookie and its CSRF token.
type testSession struct{ cookie, csrf string }

// openLocal opens a session of token (a user of owner) as a login at host
// from this machine would.
func openLocal(t *testing.T, h *Handler, token, owner, host string) testSession {
	t.Helper()
	c, sess, err := h.sessions.open(token, auth.Principal{Role: auth.RoleUser, Owner: owner}, localBinding(host))
	if err != nil {
		t.Fatal(err)
	}
	return testSession{c, sess.csrf}
}

// liveRequest is a GET of a live route as the dashboard's script makes
// it: same-origin, with the session's cookie and X-CSRF-Token.
func liveRequest(s testSession, target string) *http.Request {
	r := localRequest(http.MethodGet, target)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.Header.Set("X-CSRF-Token", s.csrf)
	r.AddCookie(&http.Cookie{Name: cookieName, Value: s.cookie})
	return r
}

func usageRequest(s testSession, n, from int) *http.Request {
	var q []string
	for i := range n {
		q = append(q, fmt.Sprintf("id=sb-%016x", from+i))
	}
	return liveRequest(s, "http://127.0.0.1:7070/ui/usage?"+strings.Join(q, "&"))
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
	c1 := openLocal(t, h, "sbx_one", "one", "127.0.0.1:7070")
	c2 := openLocal(t, h, "sbx_two", "two", "127.0.0.1:7070")

	w := httptest.NewRecorder()
	h.ServeHTTP(w, usageRequest(c1, maxUsageBatch+1, 0))
	if w.Code != http.StatusBadRequest {
		t.Fatalf("%d sandboxes in one request: %d %s, want 400", maxUsageBatch+1, w.Code, w.Body)
	}

	answers := make(chan *httptest.ResponseRecorder, 2)
	for i, c := range []testSession{c1, c2} {
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
	c := openLocal(t, h, "sbx_one", "one", "localhost:7070")
	for _, path := range []string{"/ui/usage?id=sb-0123456789abcdef", "/ui/sandbox/sb-0123456789abcdef/logs"} {
		for _, hd := range []http.Header{
			{"Origin": {"http://8080-sb-0123456789abcdef.localhost:7070"}},
			{"Sec-Fetch-Site": {"same-site"}},
		} {
			r := liveRequest(c, "http://localhost:7070"+path)
			r.Header.Del("Sec-Fetch-Site")
			maps.Copy(r.Header, hd)
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
	c := openLocal(t, h, "sbx_gone", "one", "127.0.0.1:7070")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, usageRequest(c, 2, 0))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("usage with a revoked token: %d %s, want 401", w.Code, w.Body)
	}
	if h.sessions.get(c.cookie) != nil {
		t.Fatal("the revoked token's session lives on")
	}
}

// TestLive_ImgOfASiblingRefused: over plain HTTP on a name, a sandbox's
// preview page (8080-<id>.sandboxd.example.com, the same site as the
// dashboard at sandboxd.example.com, so the SameSite cookie goes along)
// puts <img> tags that GET the live routes: the browser sends neither
// Origin nor Sec-Fetch-Site (it sends Sec-Fetch-* to secure origins
// only), so only the missing X-CSRF-Token stops them. Nothing is asked of
// the API; the dashboard's own script, which sends the header, is served.
func TestLive_ImgOfASiblingRefused(t *testing.T) {
	const id = "sb-0123456789abcdef"
	var mu sync.Mutex
	var calls []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/logs"):
		case strings.HasSuffix(r.URL.Path, "/metrics"):
			fmt.Fprint(w, `{"cpu_percent": 1}`)
		default:
			fmt.Fprintf(w, `{"id": %q, "state": "running"}`, id)
		}
	})
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, sess, err := h.sessions.open("sbx_victim", auth.Principal{Role: auth.RoleUser, Owner: "victim"},
		binding{host: "sandboxd.example.com", class: addrPrivate})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, csrf string) int {
		r := httptest.NewRequest(http.MethodGet, "http://sandboxd.example.com"+path, nil)
		r.RemoteAddr = "192.168.1.9:50000"
		r.Header.Set("Referer", "http://8080-"+id+".sandboxd.example.com/")
		if csrf != "" {
			r.Header.Set("X-CSRF-Token", csrf)
		}
		r.AddCookie(&http.Cookie{Name: httpCookieName, Value: c})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	paths := []string{"/ui/usage?id=" + id, "/ui/sandbox/" + id + "/logs?tail=5"}
	for _, path := range paths {
		if got := get(path, ""); got != http.StatusForbidden {
			t.Errorf("an <img> GET %s: %d, want 403", path, got)
		}
		if got := get(path, "not-the-token"); got != http.StatusForbidden {
			t.Errorf("GET %s with a wrong X-CSRF-Token: %d, want 403", path, got)
		}
	}
	mu.Lock()
	spent := len(calls)
	mu.Unlock()
	if spent != 0 {
		t.Fatalf("refused requests made %d API calls: %v", spent, calls)
	}
	for _, path := range paths {
		if got := get(path, sess.csrf); got != http.StatusOK {
			t.Errorf("the dashboard's script's GET %s: %d, want 200", path, got)
		}
	}
}

// TestLogs_TailBounded: a logs pane's request without a tail, with tail=0
// or past maxLogTail, and a reconnect (since=) each ask the API for a
// bounded tail, never every line it keeps.
func TestLogs_TailBounded(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/logs") {
			mu.Lock()
			queries = append(queries, r.URL.Query().Get("tail"))
			mu.Unlock()
			return
		}
		fmt.Fprint(w, `{"id": "sb-0123456789abcdef", "state": "running"}`)
	})
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := openLocal(t, h, "sbx_one", "one", "127.0.0.1:7070")
	since := url.QueryEscape(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	cases := []struct{ query, want string }{
		{"", strconv.Itoa(defaultLogTail)},
		{"?tail=0", strconv.Itoa(defaultLogTail)},
		{"?tail=-3", "1"},
		{"?tail=50", "50"},
		{"?tail=5000", strconv.Itoa(maxLogTail)},
		{"?since=" + since, strconv.Itoa(maxLogTail)},
		{"?since=" + since + "&tail=20", "20"},
	}
	for _, tc := range cases {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, liveRequest(s, "http://127.0.0.1:7070/ui/sandbox/sb-0123456789abcdef/logs"+tc.query))
		if w.Code != http.StatusOK {
			t.Fatalf("logs%s: %d %s", tc.query, w.Code, w.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != len(cases) {
		t.Fatalf("the API got %d logs calls, want %d", len(queries), len(cases))
	}
	for i, tc := range cases {
		if queries[i] != tc.want {
			t.Errorf("logs%s: the API was asked for tail=%q, want %q", tc.query, queries[i], tc.want)
		}
	}
}
