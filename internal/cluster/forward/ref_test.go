package forward_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/naming"
)

const (
	id     = "sb-0123456789abcdef"
	domain = "preview.test"
)

var apiHosts = []string{"api.example.com", "10.0.0.1"}

// testRoute stands for the edges' registrations (package internal/api/router,
// whose tests hold the real grammar): POST /v1/sandboxes creates, the
// segment after /v1/sandboxes/ names a sandbox, and so does the X-Sandbox
// header, whatever the path.
func testRoute(r *http.Request) (string, bool) {
	if v := r.Header.Get("X-Sandbox"); v != "" {
		return v, false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes")
	switch {
	case !ok:
		return "", false
	case rest == "":
		return "", r.Method == http.MethodPost
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	return seg, false
}

func TestRefOf(t *testing.T) {
	sbID := forward.Ref{Kind: forward.Sandbox, ID: id}
	named := func(n string) forward.Ref { return forward.Ref{Kind: forward.Sandbox, Name: n} }
	create, none := forward.Ref{Kind: forward.Create}, forward.Ref{}
	for _, tc := range []struct {
		method, host, target string
		header               map[string]string
		want                 forward.Ref
	}{
		// What the edges say, its shape checked here.
		{"POST", "127.0.0.1:7070", "/v1/sandboxes", nil, create},
		{"GET", "127.0.0.1:7070", "/v1/sandboxes", nil, none},
		{"GET", "127.0.0.1:7070", "/v1/sandboxes/" + id, nil, sbID},
		{"GET", "127.0.0.1", "/v1/sandboxes/my-box", nil, named("my-box")},
		{"GET", "127.0.0.1", "/v1/sandboxes/sb-nothex", nil, none}, // read as an id that cannot exist
		{"GET", "127.0.0.1", "/v1/sandboxes/SB-0123456789ABCDEF", nil, none},
		{"GET", "127.0.0.1", "/v1/sandboxes/My_Box", nil, none},
		{"POST", "127.0.0.1", "/anything", map[string]string{"X-Sandbox": id}, sbID},
		{"POST", "127.0.0.1", "/anything", map[string]string{"X-Sandbox": "debug_sandbox_id"}, none},
		{"GET", "127.0.0.1", "/healthz", nil, none},

		// Preview hosts: any port, whatever the path or headers.
		{"POST", "49983-" + id + "." + domain, "/process.Process/Start", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 49983}},
		{"POST", "49999-" + id + "." + domain + ":7070", "/execute", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 49999}},
		{"GET", "8080-" + id + ".PREVIEW.test.", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 8080}},
		{"POST", "3000-" + id + "." + domain, "/v1/sandboxes", map[string]string{"X-Sandbox": "sb-eeeeeeeeeeeeeeee"}, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 3000}},
		{"GET", "8080-myapp." + domain, "/", nil, none},   // preview shape, not an id
		{"GET", "0-" + id + "." + domain, "/", nil, none}, // not a port: a name under the domain, so the API's
		{"GET", "sandbox." + domain, "/v1/sandboxes/" + id, nil, sbID},
		{"GET", domain, "/v1/sandboxes/" + id, nil, sbID},
		{"POST", "a.b." + domain, "/v1/sandboxes", nil, create},

		// Custom domains: a Host that is none of the API's wins over the
		// path; what the edges name rides along for an unbound host.
		{"GET", "app.example.org", "/", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org"}},
		{"POST", "app.example.org", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", PathKind: forward.Create}},
		{"GET", "App.Example.org.:443", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org"}},
		{"GET", "app.example.org", "/v1/sandboxes/" + id, nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", ID: id, PathKind: forward.Sandbox}},
		{"GET", "app.example.org", "/v1/sandboxes/my-box", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", Name: "my-box", PathKind: forward.Sandbox}},
		{"GET", "API.example.com:8443", "/v1/sandboxes/" + id, nil, sbID}, // a listed API host
		{"GET", "10.0.0.2:7070", "/v1/sandboxes/" + id, nil, sbID},        // any IP literal
		{"GET", "node-b", "/v1/sandboxes/" + id, nil, sbID},               // one label: never a custom domain
		{"GET", "", "/v1/sandboxes/" + id, nil, sbID},
		{"GET", "bad_host.example.org", "/v1/sandboxes/" + id, nil, sbID}, // not a DNS name: not bindable
	} {
		r := &http.Request{Method: tc.method, Host: tc.host, URL: mustURL(t, tc.target), Header: http.Header{}}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if diff := cmp.Diff(tc.want, forward.RefOf(r, domain, apiHosts, testRoute)); diff != "" {
			t.Errorf("RefOf(%s %s, Host %q, %v) (-want +got):\n%s", tc.method, tc.target, tc.host, tc.header, diff)
		}
	}
}

func TestRefOf_NoDomain(t *testing.T) {
	// Without a preview domain there are no preview hosts: a host of that
	// shape is a custom domain.
	r := &http.Request{Method: "GET", Host: "8080-" + id + ".preview.test", URL: mustURL(t, "/"), Header: http.Header{}}
	want := forward.Ref{Kind: forward.Host, Host: "8080-" + id + ".preview.test"}
	if diff := cmp.Diff(want, forward.RefOf(r, "", nil, testRoute)); diff != "" {
		t.Errorf("RefOf (-want +got):\n%s", diff)
	}
}

// TestRefOf_NoRoute: without the edges' registration nothing but hosts is
// named.
func TestRefOf_NoRoute(t *testing.T) {
	r := &http.Request{Method: "POST", Host: "127.0.0.1", URL: mustURL(t, "/v1/sandboxes"), Header: http.Header{}}
	if got := forward.RefOf(r, domain, apiHosts, nil); got != (forward.Ref{}) {
		t.Errorf("RefOf without a route = %+v, want none", got)
	}
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.ParseRequestURI(s)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return u
}

var idRE = regexp.MustCompile(`^sb-[0-9a-f]{16}$`)

// FuzzRefOf: RefOf never panics, hands out only well-formed ids, names
// and hosts, and fills only the fields its Kind allows, whatever the
// edges answer.
func FuzzRefOf(f *testing.F) {
	for _, s := range []struct{ method, host, target, named string }{
		{"POST", "127.0.0.1:7070", "/v1/sandboxes", ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/" + id + "/exec/stream", ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/my-box", ""},
		{"POST", "127.0.0.1", "/process.Process/Start", id},
		{"POST", "127.0.0.1", "/process.Process/Start", "sb-zz"},
		{"POST", "49983-" + id + "." + domain, "/process.Process/Start", ""},
		{"GET", "8080-" + id + "." + domain + ":7070", "/", ""},
		{"GET", "app.example.org", "/v1/sandboxes/" + id, ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/%2e%2e/x", ""},
		{"GET", "[::1]:7070", "/v1//sandboxes", ""},
	} {
		f.Add(s.method, s.host, s.target, s.named)
	}
	f.Fuzz(func(t *testing.T, method, host, target, named string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Skip()
		}
		r := &http.Request{Method: method, Host: host, URL: u, Header: http.Header{}}
		if named != "" {
			r.Header["X-Sandbox"] = []string{named}
		}
		ref := forward.RefOf(r, domain, apiHosts, testRoute)
		if ref.ID != "" && !idRE.MatchString(ref.ID) {
			t.Fatalf("ID %q is not a sandbox id", ref.ID)
		}
		if ref.Name != "" && (!naming.ValidLabel(ref.Name) || strings.HasPrefix(ref.Name, "sb-")) {
			t.Fatalf("Name %q is not a sandbox name", ref.Name)
		}
		if ref.ID != "" && ref.Name != "" {
			t.Fatalf("both ID %q and Name %q", ref.ID, ref.Name)
		}
		if ref.Port != 0 && (ref.Kind != forward.Sandbox || ref.ID == "" || !naming.ValidPort(ref.Port)) {
			t.Fatalf("Port %d on %+v", ref.Port, ref)
		}
		switch ref.Kind {
		case forward.Sandbox:
			if ref.ID == "" && ref.Name == "" || ref.Host != "" {
				t.Fatalf("Sandbox ref %+v", ref)
			}
		case forward.Host:
			if !naming.ValidHostname(ref.Host) || ref.Port != 0 {
				t.Fatalf("Host ref %+v", ref)
			}
		case forward.None, forward.Create:
			if ref != (forward.Ref{Kind: ref.Kind}) {
				t.Fatalf("%v ref with fields: %+v", ref.Kind, ref)
			}
		default:
			t.Fatalf("unknown kind %v", ref.Kind)
		}
	})
}
