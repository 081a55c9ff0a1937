package forward_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// locator is a scripted forward.Locator that records what it was asked.
type locator struct {
	locate func(ref forward.Ref) (forward.Target, bool, error)

	mu    sync.Mutex
	asked []forward.Ref
}

func (l *locator) Locate(_ context.Context, _ *http.Request, ref forward.Ref) (forward.Target, bool, error) {
	l.mu.Lock()
	l.asked = append(l.asked, ref)
	l.mu.Unlock()
	if l.locate == nil {
		return forward.Target{}, false, nil
	}
	return l.locate(ref)
}

func (l *locator) calls() []forward.Ref {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]forward.Ref(nil), l.asked...)
}

// always sends everything to t.
func always(t forward.Target) *locator {
	return &locator{
		locate: func(forward.Ref) (forward.Target, bool, error) { return t, true, nil },
	}
}

// seen is what a node's edges saw of a request.
type seen struct {
	Method, Host, RequestURI, Body string
	Auth, Node, XFF                string
	MACFrom                        string // who a fresh Signer of the node says signed it
}

// node is one sandboxd node under test: its middleware in front of a
// handler that records what reached the edges.
type node struct {
	name string
	srv  *httptest.Server
	mw   *forward.Handler
	loc  *locator

	mu   sync.Mutex
	seen []seen
}

func (n *node) target() forward.Target { return forward.Target{Node: n.name, URL: n.srv.URL} }

func (n *node) requests() []seen {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]seen(nil), n.seen...)
}

// newNode starts a node whose edges answer with handler (nil: record and
// answer "served by <name>"). Options may be adjusted by opt.
func newNode(t *testing.T, name string, loc *locator, handler http.HandlerFunc, opt func(*forward.Options)) *node {
	t.Helper()
	n := &node{name: name, loc: loc}
	signer := forward.Signer{Node: name, Secret: secret}
	edges := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, _ := signer.Verify(r)
		s := seen{
			Method: r.Method, Host: r.Host, RequestURI: r.RequestURI,
			Auth: r.Header.Get("Authorization"), Node: r.Header.Get(forward.HeaderNode),
			XFF: r.Header.Get("X-Forwarded-For"), MACFrom: from,
		}
		if handler == nil {
			b, _ := io.ReadAll(r.Body)
			s.Body = string(b)
		}
		n.mu.Lock()
		n.seen = append(n.seen, s)
		n.mu.Unlock()
		if handler != nil {
			handler(w, r)
			return
		}
		_, _ = io.WriteString(w, "served by "+name)
	})
	tr := forward.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	o := forward.Options{Signer: signer, Locator: loc, Domain: domain, APIHosts: apiHosts, Route: testRoute, Transport: tr}
	if opt != nil {
		opt(&o)
	}
	n.mw = forward.Middleware(edges, o)
	n.srv = httptest.NewServer(n.mw)
	t.Cleanup(n.srv.Close)
	return n
}

// client returns an HTTP client whose idle connections close with the test.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, url, host, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return res.StatusCode, string(b)
}

func TestMiddleware_ForwardsToOwner(t *testing.T) {
	b := newNode(t, "b", &locator{}, nil, nil)
	aLoc := always(b.target())
	a := newNode(t, "a", aLoc, nil, nil)
	c := client(t)
	port := a.srv.Listener.Addr().(*net.TCPAddr).Port
	auth := http.Header{"Authorization": {"Bearer sbx_user_token"}}

	for _, tc := range []struct {
		name, method, target, host, body string
	}{
		{"upload by id", "PUT", "/v1/sandboxes/" + id + "/files?path=%2Fa%20b&x=1", "api.example.com", "file bytes"},
		{"by name", "POST", "/v1/sandboxes/my-box/exec", "", `{"command":"echo hi"}`},
		{"preview host", "GET", "/some/app/path?q=1", "8080-" + id + "." + domain + ":" + strconv.Itoa(port), ""},
		{"custom domain", "POST", "/hook", "app.example.org", "payload"},
		{"by header", "POST", "/process.Process/Start", "", "\x00\x00\x00\x00\x02{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(b.requests())
			h := auth.Clone()
			if tc.name == "by header" {
				h.Set("X-Sandbox", id)
			}
			status, body := do(t, c, tc.method, a.srv.URL+tc.target, tc.host, tc.body, h)
			if status != http.StatusOK || body != "served by b" {
				t.Fatalf("answer = %d %q, want 200 from b", status, body)
			}
			got := b.requests()[before:]
			wantHost := tc.host
			if wantHost == "" {
				wantHost = a.srv.Listener.Addr().String()
			}
			want := []seen{{
				Method: tc.method, Host: wantHost, RequestURI: tc.target, Body: tc.body,
				Auth: "Bearer sbx_user_token", Node: "a", XFF: "127.0.0.1", MACFrom: "a",
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("b's edges saw (-want +got):\n%s", diff)
			}
		})
	}
	if got := a.requests(); len(got) != 0 {
		t.Errorf("a's own edges served %d requests: %+v", len(got), got)
	}
	if got := b.loc.calls(); len(got) != 0 {
		t.Errorf("b asked its locator about forwarded requests: %+v", got)
	}
}

func TestMiddleware_ServesLocally(t *testing.T) {
	far := newNode(t, "far", &locator{}, nil, nil)
	for _, tc := range []struct {
		name, method, target string
		loc                  *locator
	}{
		{"list", "GET", "/v1/sandboxes", always(far.target())},
		{"health", "GET", "/healthz", always(far.target())},
		{"owned here", "GET", "/v1/sandboxes/" + id, &locator{}},
		{"create", "POST", "/v1/sandboxes", always(far.target())}, // its edge places it
		{"target is self", "GET", "/v1/sandboxes/" + id, always(forward.Target{Node: "a", URL: "http://127.0.0.1:1"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newNode(t, "a", tc.loc, nil, nil)
			status, body := do(t, client(t), tc.method, a.srv.URL+tc.target, "", "", nil)
			if status != http.StatusOK || body != "served by a" {
				t.Errorf("answer = %d %q, want 200 from a", status, body)
			}
		})
	}
	if got := far.requests(); len(got) != 0 {
		t.Errorf("far served %d requests that were a's", len(got))
	}
}

// TestMiddleware_LoopGuard: a request a node forwarded is served by its
// receiver even when the receiver's view says a third node owns it.
func TestMiddleware_LoopGuard(t *testing.T) {
	c3 := newNode(t, "c", &locator{}, nil, nil)
	b := newNode(t, "b", always(c3.target()), nil, nil)
	a := newNode(t, "a", always(b.target()), nil, nil)

	status, body := do(t, client(t), "DELETE", a.srv.URL+"/v1/sandboxes/"+id, "", "", nil)
	if status != http.StatusOK || body != "served by b" {
		t.Fatalf("answer = %d %q, want 200 from b", status, body)
	}
	if got := c3.requests(); len(got) != 0 {
		t.Errorf("b forwarded a forwarded request again: c saw %+v", got)
	}
	if got := b.loc.calls(); len(got) != 0 {
		t.Errorf("b asked its locator about a forwarded request: %+v", got)
	}
}

// TestMiddleware_Arrived: a request another node sent here for a sandbox
// is checked by Arrived before the edges see it; its error is OnError's
// answer, and a nil leaves the request to the edges. Only a request that
// names a sandbox is checked.
func TestMiddleware_Arrived(t *testing.T) {
	errTakingOver := errors.New("being taken over here")
	var mu sync.Mutex
	var checked []forward.Ref
	refuse := true
	b := newNode(t, "b", &locator{}, nil, func(o *forward.Options) {
		o.Arrived = func(_ *http.Request, ref forward.Ref) error {
			mu.Lock()
			defer mu.Unlock()
			checked = append(checked, ref)
			if refuse {
				return errTakingOver
			}
			return nil
		}
		o.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
			if !errors.Is(err, errTakingOver) {
				t.Errorf("OnError got %v, want Arrived's error wrapped", err)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	a := newNode(t, "a", always(b.target()), nil, nil)

	if status, _ := do(t, client(t), "POST", a.srv.URL+"/v1/sandboxes/"+id+"/exec", "", "{}", nil); status != http.StatusServiceUnavailable {
		t.Errorf("refused by Arrived: status %d, want OnError's 503", status)
	}
	if got := b.requests(); len(got) != 0 {
		t.Errorf("the edges saw a request Arrived refused: %+v", got)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	if status, body := do(t, client(t), "POST", a.srv.URL+"/v1/sandboxes/"+id+"/exec", "", "{}", nil); status != http.StatusOK || body != "served by b" {
		t.Errorf("let through by Arrived: %d %q, want 200 from b", status, body)
	}
	// A request made on b itself is its locator's, not Arrived's.
	if status, _ := do(t, client(t), "GET", b.srv.URL+"/v1/sandboxes/"+id, "", "", nil); status != http.StatusOK {
		t.Errorf("a call made on b: status %d, want 200", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(checked) != 2 || checked[0].ID != id || checked[0].Kind != forward.Sandbox {
		t.Errorf("Arrived checked %+v, want the two forwarded calls naming %s", checked, id)
	}
}

// TestMiddleware_UntrustedNodeHeaders: node headers without a valid MAC
// are stripped before the edges or the locator see them, and do not stop
// forwarding.
func TestMiddleware_UntrustedNodeHeaders(t *testing.T) {
	staleOut := httptest.NewRequest("GET", "http://b/v1/sandboxes/"+id, nil)
	staleOut.RequestURI = ""
	forward.Signer{Node: "a", Secret: secret, Clock: fixed(time.Now().Add(-2 * forward.MaxSkew))}.Sign(staleOut)
	wrongKey := httptest.NewRequest("GET", "http://b/v1/sandboxes/"+id, nil)
	wrongKey.RequestURI = ""
	forward.Signer{Node: "a", Secret: []byte("guessed")}.Sign(wrongKey)

	for name, h := range map[string]http.Header{
		"forged":         {forward.HeaderNode: {"a"}, forward.HeaderAuth: {"t=1,mac=00"}, "X-Sandboxd-Node-Extra": {"x"}},
		"stale":          staleOut.Header,
		"guessed secret": wrongKey.Header,
	} {
		t.Run(name, func(t *testing.T) {
			c3 := newNode(t, "c", &locator{}, nil, nil)
			local := newNode(t, "b", &locator{}, nil, nil)
			forwarding := newNode(t, "b", always(c3.target()), nil, nil)

			// Served locally: the edges see no node header.
			if status, _ := do(t, client(t), "GET", local.srv.URL+"/v1/sandboxes/"+id, "", "", h); status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			want := []seen{{Method: "GET", Host: local.srv.Listener.Addr().String(), RequestURI: "/v1/sandboxes/" + id}}
			if diff := cmp.Diff(want, local.requests()); diff != "" {
				t.Errorf("edges saw (-want +got):\n%s", diff)
			}

			// Not trusted as a node's: forwarded, signed by b alone.
			status, body := do(t, client(t), "GET", forwarding.srv.URL+"/v1/sandboxes/"+id, "", "", h)
			if status != http.StatusOK || body != "served by c" {
				t.Fatalf("answer = %d %q, want 200 from c", status, body)
			}
			if got := c3.requests(); len(got) != 1 || got[0].Node != "b" || got[0].MACFrom != "b" {
				t.Errorf("c saw %+v, want one request signed by b", got)
			}
			if got := forwarding.requests(); len(got) != 0 {
				t.Errorf("b's edges served a request with untrusted node headers: %+v", got)
			}
		})
	}
}

func TestMiddleware_Streams(t *testing.T) {
	release := make(chan struct{})
	b := newNode(t, "b", &locator{}, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second\n")
	}, nil)
	a := newNode(t, "a", always(b.target()), nil, nil)

	req, _ := http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+"/v1/sandboxes/"+id+"/exec", strings.NewReader("{}"))
	res, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		if l != "first" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first chunk did not arrive while the handler was still running")
	}
	close(release)
	if l := <-lines; l != "second" {
		t.Errorf("second line %q", l)
	}
	for range lines {
	}
}

func TestMiddleware_WebSocket(t *testing.T) {
	b := newNode(t, "b", &locator{}, func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		for {
			typ, msg, err := conn.Read(r.Context())
			if err != nil {
				return
			}
			if err := conn.Write(r.Context(), typ, append([]byte("b:"), msg...)); err != nil {
				return
			}
		}
	}, nil)
	a := newNode(t, "a", always(b.target()), nil, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.srv.URL, "http")+"/v1/sandboxes/"+id+"/exec/stream",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sbx_user_token"}}, HTTPClient: client(t)})
	if err != nil {
		t.Fatalf("dial through a: %v", err)
	}
	defer conn.CloseNow()
	for _, msg := range []string{"hello", "again"} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "b:"+msg {
			t.Errorf("echo %q, want %q", got, "b:"+msg)
		}
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	if got := b.requests(); len(got) != 1 || got[0].MACFrom != "a" || got[0].Auth != "Bearer sbx_user_token" {
		t.Errorf("b saw %+v, want one upgrade signed by a with the caller's token", got)
	}
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr
}

func TestMiddleware_UnreachableNode(t *testing.T) {
	a := newNode(t, "a", always(forward.Target{Node: "b", URL: closedURL(t)}), nil, nil)
	start := time.Now()
	status, body := do(t, client(t), "POST", a.srv.URL+"/v1/sandboxes/"+id+"/exec", "", "{}", nil)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("answered after %v", elapsed)
	}
	if status != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", status)
	}
	var e struct {
		Error struct {
			Code      string `json:"code"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "unavailable" || !e.Error.Retryable {
		t.Errorf("body %q (%v), want a retryable unavailable error", body, err)
	}
	if got := a.requests(); len(got) != 0 {
		t.Errorf("a served it locally: %+v", got)
	}
}

func TestMiddleware_OnError(t *testing.T) {
	errMoving := errors.New("placement moving")
	for _, tc := range []struct {
		name string
		loc  *locator
	}{
		{"locator fails", &locator{locate: func(forward.Ref) (forward.Target, bool, error) {
			return forward.Target{}, false, errMoving
		}}},
		{"bad node URL", always(forward.Target{Node: "b", URL: "b.internal:7070"})},
		{"unreachable", always(forward.Target{Node: "b", URL: closedURL(t)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got error
			a := newNode(t, "a", tc.loc, nil, func(o *forward.Options) {
				o.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
					got = err
					w.WriteHeader(http.StatusBadGateway)
				}
			})
			if status, _ := do(t, client(t), "GET", a.srv.URL+"/v1/sandboxes/"+id, "", "", nil); status != http.StatusBadGateway {
				t.Errorf("status %d, want OnError's 502", status)
			}
			if got == nil {
				t.Error("OnError got no error")
			}
			if tc.name == "locator fails" && !errors.Is(got, errMoving) {
				t.Errorf("OnError got %v, want the locator's error wrapped", got)
			}
		})
	}
}

func TestMiddleware_NoLocator(t *testing.T) {
	a := newNode(t, "a", nil, nil, func(o *forward.Options) { o.Locator = nil })
	h := http.Header{forward.HeaderNode: {"z"}, forward.HeaderAuth: {"t=1,mac=00"}}
	if status, body := do(t, client(t), "GET", a.srv.URL+"/v1/sandboxes/"+id, "", "", h); status != http.StatusOK || body != "served by a" {
		t.Fatalf("answer = %d %q", status, body)
	}
	if got := a.requests(); len(got) != 1 || got[0].Node != "" {
		t.Errorf("edges saw %+v, want no node header", got)
	}
}

// placingNode is a node whose edges, like a facade's create, read the
// whole body (through a limit, as the edges wrap it), then Forward the
// request to to(); a forwarded request's receiver records it.
func placingNode(t *testing.T, name string, to func() forward.Target, opt func(*forward.Options)) *node {
	t.Helper()
	var n *node
	n = newNode(t, name, &locator{}, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 8<<20)
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("%s: read the body: %v", name, err)
		}
		n.mw.Forward(w, r, to())
	}, opt)
	return n
}

// TestMiddleware_ForwardPlacedCreate: an edge that decoded a create and
// placed it on another node Forwards it there whole (the body it read
// included), signed by this node; the receiver's edges see it marked as a
// node's (FromNode), so they do not place it again, and its locator is
// not asked.
func TestMiddleware_ForwardPlacedCreate(t *testing.T) {
	var fromNode []string
	var mu sync.Mutex
	b := newNode(t, "b", always(forward.Target{Node: "c", URL: closedURL(t)}), func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		node, _ := forward.FromNode(r)
		mu.Lock()
		fromNode = append(fromNode, node)
		mu.Unlock()
		_, _ = io.WriteString(w, "created by b: "+string(body))
	}, nil)
	a := placingNode(t, "a", b.target, nil)
	body := `{"image":"alpine","env":{"A":"` + strings.Repeat("x", 200<<10) + `"}}`
	status, got := do(t, client(t), "POST", a.srv.URL+"/v1/sandboxes", "", body, http.Header{"Authorization": {"Bearer sbx_user_token"}})
	if status != http.StatusOK || got != "created by b: "+body {
		t.Fatalf("answer = %d, %d bytes; want 200 from b with the whole body", status, len(got))
	}
	seen := b.requests()
	if len(seen) != 1 || seen[0].MACFrom != "a" || seen[0].Auth != "Bearer sbx_user_token" {
		t.Errorf("b saw %+v, want one create signed by a with the caller's credential", seen)
	}
	if !cmp.Equal(fromNode, []string{"a"}) {
		t.Errorf("FromNode on b = %v, want [a]", fromNode)
	}
	if got := b.loc.calls(); len(got) != 0 {
		t.Errorf("b asked its locator about a placed create: %+v", got)
	}
	// A request straight from a client is no node's, whatever it claims.
	h := http.Header{forward.HeaderNode: {"z"}, forward.HeaderAuth: {"t=1,mac=00"}}
	if status, got := do(t, client(t), "POST", b.srv.URL+"/v1/sandboxes", "", "{}", h); status != http.StatusOK || !strings.HasPrefix(got, "created by b") {
		t.Fatalf("answer = %d %q", status, got)
	}
	if !cmp.Equal(fromNode, []string{"a", ""}) {
		t.Errorf("FromNode on b = %v, want [a, \"\"]: a client's request is no node's", fromNode)
	}
}

// TestMiddleware_ForwardRefusesWhatItCannotSendWhole: a body the
// middleware did not keep (no create the edges registered), or kept only
// in part (past its bound), is never forwarded cut short: OnError.
func TestMiddleware_ForwardRefusesWhatItCannotSendWhole(t *testing.T) {
	b := newNode(t, "b", &locator{}, nil, nil)
	for name, tc := range map[string]struct{ path, body string }{
		"not a create": {"/v1/sandboxes/" + id + "/exec", `{"command":"true"}`},
		"too large":    {"/v1/sandboxes", strings.Repeat("x", 5<<20)},
	} {
		t.Run(name, func(t *testing.T) {
			var got error
			a := placingNode(t, "a", b.target, func(o *forward.Options) {
				o.Locator = &locator{} // served here, as a create is
				o.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
					got = err
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			})
			if status, _ := do(t, client(t), "POST", a.srv.URL+tc.path, "", tc.body, nil); status != http.StatusServiceUnavailable {
				t.Errorf("status %d, want OnError's 503", status)
			}
			if got == nil {
				t.Error("OnError got no error")
			}
		})
	}
	if got := b.requests(); len(got) != 0 {
		t.Errorf("b was sent %d request(s) cut short", len(got))
	}
}

// TestMiddleware_KeepsNoBodyForABoundHost: a create's path under a custom
// domain is kept for its edge only while the Locator says the host is
// bound to nothing (an API host the node was not told of); a host bound
// to a sandbox, this node's included, is its app's, whose body is never
// kept (so it cannot be forwarded as a create either).
func TestMiddleware_KeepsNoBodyForABoundHost(t *testing.T) {
	b := newNode(t, "b", &locator{}, nil, nil)
	for name, tc := range map[string]struct {
		loc     *locator
		wantFwd bool
	}{
		"unbound host": {&locator{}, true},
		"bound here":   {always(forward.Target{Node: "a"}), false},
	} {
		t.Run(name, func(t *testing.T) {
			var got error
			a := placingNode(t, "a", b.target, func(o *forward.Options) {
				o.Locator = tc.loc
				o.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
					got = err
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			})
			status, _ := do(t, client(t), "POST", a.srv.URL+"/v1/sandboxes", "app.example.org", `{"image":"alpine"}`, nil)
			if tc.wantFwd && (status != http.StatusOK || got != nil) {
				t.Errorf("status %d (%v), want b's 200", status, got)
			}
			if !tc.wantFwd && (status != http.StatusServiceUnavailable || got == nil) {
				t.Errorf("status %d, want OnError's 503: nothing kept to forward", status)
			}
		})
	}
}
