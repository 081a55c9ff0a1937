package e2b

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

func TestMatch(t *testing.T) {
	f := New(Options{Domain: "localhost", AccessTokenKey: []byte("k")})
	for _, tc := range []struct {
		method, target, host string
		header               map[string]string
		want                 bool
	}{
		{"POST", "/v2/sandboxes", "", nil, true},
		{"GET", "/sandboxes", "", nil, true},
		{"DELETE", "/sandboxes/sb-1", "", nil, true},
		{"GET", "/sandboxesx", "", nil, false},
		{"GET", "/v1/sandboxes", "", nil, false},
		{"GET", "/healthz", "", nil, false},
		// Every top-level path of E2B's API is the facade's, served or not.
		{"POST", "/v3/templates", "", nil, true},
		{"DELETE", "/templates/snap-1", "", nil, true},
		{"GET", "/snapshots", "", nil, true},
		{"GET", "/v2/templates/t", "", nil, true},
		{"GET", "/volumes", "", nil, true},
		{"GET", "/metrics", "", nil, false}, // the daemon's Prometheus
		{"GET", "/v3/templatesx", "", nil, false},
		{"GET", "/templates", "8080-sb-1.localhost", nil, false},
		{"POST", "/process.Process/Start", "", map[string]string{"E2b-Sandbox-Id": "sb-1", "E2b-Sandbox-Port": "49983"}, true},
		{"POST", "/execute", "", map[string]string{"E2b-Sandbox-Id": "sb-1", "E2b-Sandbox-Port": "49999"}, true},
		{"POST", "/process.Process/Start", "", nil, false},
		{"GET", "/files", "49983-sb-1.localhost:7070", nil, true},
		{"GET", "/", "49999-sb-1.localhost", nil, true},
		{"GET", "/", "8080-sb-1.localhost", nil, false}, // the ingress's
		// A sandbox app's own routes on its preview host are the app's,
		// whatever E2B header a client adds.
		{"GET", "/sandboxes", "8080-sb-1.localhost:7070", nil, false},
		{"POST", "/v2/sandboxes", "8080-sb-1.localhost", nil, false},
		{"GET", "/health", "8080-sb-1.localhost", map[string]string{"E2b-Sandbox-Id": "sb-2"}, false},
		{"GET", "/sandboxes", "49983-sb-1.localhost", nil, true}, // envd's, by host
		{"GET", "/", "49983-sb-1.example.com", nil, false},
		{"GET", "/", "49983-.localhost", nil, false},
		// A signed /files URL built on E2B_SANDBOX_URL names no sandbox:
		// the facade routes it by its signature, other /files are not its.
		{"GET", "/files?path=%2Fa&signature=v1_x", "127.0.0.1:7070", nil, true},
		{"GET", "/files?path=%2Fa", "127.0.0.1:7070", nil, false},
		{"GET", "/files?signature=v1_x", "8080-sb-1.localhost", nil, false},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.host != "" {
			r.Host = tc.host
		}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := f.Match(r); got != tc.want {
			t.Errorf("Match(%s %s, host %q, %v) = %v, want %v", tc.method, tc.target, tc.host, tc.header, got, tc.want)
		}
	}
}

func TestMatchHost(t *testing.T) {
	f := New(Options{Domain: "localhost", AccessTokenKey: []byte("k")})
	for host, want := range map[string]bool{
		"49983-sb-1.localhost:7070": true,
		"49999-sb-1.localhost":      true,
		"8080-sb-1.localhost":       false,
		"localhost:7070":            false,
		"49983-sb-1.example.com":    false,
	} {
		if got := f.MatchHost(host); got != want {
			t.Errorf("MatchHost(%q) = %v, want %v", host, got, want)
		}
	}
	if New(Options{AccessTokenKey: []byte("k")}).MatchHost("49983-sb-1.localhost") {
		t.Error("MatchHost with no domain = true, want false")
	}
}

func TestFingerprint_NormalizesOrderOnly(t *testing.T) {
	base := service.CreateRequest{
		Owner: "o", Image: "img", Timeout: time.Minute,
		Env:         map[string]string{"A": "1", "B": "2"},
		Tags:        map[string]string{"x": "1", "y": "2"},
		Annotations: map[string]string{annTemplate: "base"},
	}
	same := base
	same.Env = map[string]string{"B": "2", "A": "1"}
	if fingerprint(base) != fingerprint(same) {
		t.Error("map order changed the fingerprint")
	}
	for name, mutate := range map[string]func(*service.CreateRequest){
		"owner":   func(r *service.CreateRequest) { r.Owner = "p" },
		"image":   func(r *service.CreateRequest) { r.Image = "other" },
		"timeout": func(r *service.CreateRequest) { r.Timeout = time.Hour },
		"env":     func(r *service.CreateRequest) { r.Env = map[string]string{"A": "1"} },
		"tags":    func(r *service.CreateRequest) { r.Tags = map[string]string{"x": "2", "y": "2"} },
		"secure": func(r *service.CreateRequest) {
			r.Annotations = map[string]string{annTemplate: "base", annSecure: "false"}
		},
	} {
		r := base
		mutate(&r)
		if fingerprint(r) == fingerprint(base) {
			t.Errorf("changing %s kept the fingerprint", name)
		}
	}
}

func TestParseMetadataFilter(t *testing.T) {
	// What the JS SDK's query holds after the first decoding.
	got, err := parseMetadataFilter("run=r1&group=a%2526b%253Dc%2520d%252F%25C3%25A9")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"run": "r1", "group": "a&b=c d/é"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestAccessToken_PerSandboxAndKey(t *testing.T) {
	a := New(Options{AccessTokenKey: []byte("key-a")})
	b := New(Options{AccessTokenKey: []byte("key-b")})
	if first, again := a.token(accessTokenLabel, "sb-1"), a.token(accessTokenLabel, "sb-1"); first != again {
		t.Error("not deterministic")
	}
	for _, other := range []string{
		a.token(accessTokenLabel, "sb-2"),
		b.token(accessTokenLabel, "sb-1"),
		a.token(trafficTokenLabel, "sb-1"),
	} {
		if other == a.token(accessTokenLabel, "sb-1") {
			t.Error("tokens collide across sandboxes, keys or kinds")
		}
	}
}

// An answer of the agent reaches a browser as nothing it would run: a
// sandbox that replaced its agent cannot serve a page (or set a cookie) on
// the API's host, which is also the dashboard's.
func TestAgentAnswerOnly_NoPageNoCookie(t *testing.T) {
	if agentAnswerOnly(&url.URL{Scheme: "http", Host: "127.0.0.1:8080"}) != nil {
		t.Error("a sandbox port's answers are rewritten; they are its own site")
	}
	req := httptest.NewRequest(http.MethodGet, "http://api.example/files?path=x", nil)
	resp := &http.Response{StatusCode: 200, Request: req, Header: http.Header{
		"Content-Type": {"text/html"}, "Set-Cookie": {"sandboxd_ui=attacker; Path=/ui/"},
		"Content-Disposition": {"inline"},
	}}
	if err := agentAnswerOnly(agentURL)(resp); err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	if h.Get("Set-Cookie") != "" || h.Get("Content-Type") != "application/octet-stream" ||
		!strings.HasPrefix(h.Get("Content-Disposition"), "attachment") || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.HasPrefix(h.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("the agent's answer reaches the browser as %v", h)
	}
}

// TestDomainJSON: with DomainPortFromHost the reported domain carries the
// port the client reached (kept by cluster forwarding), not this
// listener's; a Host without a valid port gets the bare domain.
func TestDomainJSON(t *testing.T) {
	fixed := New(Options{Domain: "localhost", AdvertisedDomain: "localhost:7070", AccessTokenKey: []byte("k")})
	follows := New(Options{Domain: "localhost", AdvertisedDomain: "localhost:7070", DomainPortFromHost: true, AccessTokenKey: []byte("k")})
	none := New(Options{AccessTokenKey: []byte("k")})
	for _, tc := range []struct {
		f          *Facade
		host, want string
	}{
		{fixed, "127.0.0.1:9000", "localhost:7070"},
		{follows, "127.0.0.1:9000", "localhost:9000"},
		{follows, "[::1]:9443", "localhost:9443"},
		{follows, "sandboxd.internal", "localhost"},
		{follows, "h:0", "localhost"},
		{follows, "h:65536", "localhost"},
		{follows, "h:x", "localhost"},
		{none, "127.0.0.1:9000", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/sandboxes", nil)
		r.Host = tc.host
		got := ""
		if d := tc.f.domainJSON(r); d != nil {
			got = *d
		}
		if got != tc.want {
			t.Errorf("Host %q: domain %q, want %q", tc.host, got, tc.want)
		}
	}
}
