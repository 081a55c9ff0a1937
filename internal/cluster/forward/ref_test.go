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

func TestRefOf(t *testing.T) {
	sbID := forward.Ref{Kind: forward.Sandbox, ID: id}
	named := func(n string) forward.Ref { return forward.Ref{Kind: forward.Sandbox, Name: n} }
	create, list, none := forward.Ref{Kind: forward.Create}, forward.Ref{Kind: forward.List}, forward.Ref{}
	for _, tc := range []struct {
		method, host, target string
		header               map[string]string
		want                 forward.Ref
	}{
		// Native v1.
		{"POST", "127.0.0.1:7070", "/v1/sandboxes", nil, create},
		{"GET", "127.0.0.1:7070", "/v1/sandboxes?name=x", nil, list},
		{"HEAD", "127.0.0.1:7070", "/v1/sandboxes", nil, list},
		{"DELETE", "127.0.0.1:7070", "/v1/sandboxes", nil, none},
		{"GET", "127.0.0.1:7070", "/v1/sandboxes/" + id, nil, sbID},
		{"DELETE", "localhost:7070", "/v1/sandboxes/" + id, nil, sbID},
		{"POST", "localhost", "/v1/sandboxes/" + id + "/exec", nil, sbID},
		{"GET", "api.example.com", "/v1/sandboxes/" + id + "/exec/stream", nil, sbID},
		{"PUT", "[::1]:7070", "/v1/sandboxes/" + id + "/files?path=/a", nil, sbID},
		{"DELETE", "10.0.0.1", "/v1/sandboxes/" + id + "/domains/app.example.org", nil, sbID},
		{"GET", "127.0.0.1", "/v1/sandboxes/my-box", nil, named("my-box")},
		{"POST", "127.0.0.1", "/v1/sandboxes/my-box/start", nil, named("my-box")},
		{"GET", "127.0.0.1", "/v1/sandboxes/my%2Dbox", nil, named("my-box")}, // unescaped as ServeMux does
		{"GET", "127.0.0.1", "/v1/sandboxes/sb-nothex", nil, none},           // read as an id that cannot exist
		{"GET", "127.0.0.1", "/v1/sandboxes/SB-0123456789ABCDEF", nil, none},
		{"GET", "127.0.0.1", "/v1/sandboxes/My_Box", nil, none},
		{"GET", "127.0.0.1", "/v1/sandboxes/", nil, none},
		{"GET", "127.0.0.1", "/v1/sandboxes//" + id, nil, none}, // ServeMux redirects it
		{"GET", "127.0.0.1", "/v1/sandboxes/../sandboxes/" + id, nil, none},
		{"GET", "127.0.0.1", "/v1/sandboxesx/" + id, nil, none},
		{"POST", "127.0.0.1", "/v1/tokens", nil, none},
		{"GET", "127.0.0.1", "/v1/pools", nil, none},
		{"GET", "127.0.0.1", "/healthz", nil, none},
		{"GET", "127.0.0.1", "/", nil, none},

		// E2B control plane.
		{"POST", "127.0.0.1", "/v2/sandboxes", nil, create},
		{"POST", "127.0.0.1", "/sandboxes", nil, create},
		{"GET", "127.0.0.1", "/v2/sandboxes?state=running", nil, list},
		{"GET", "127.0.0.1", "/sandboxes", nil, list},
		{"GET", "127.0.0.1", "/sandboxes/" + id, nil, sbID},
		{"DELETE", "127.0.0.1", "/sandboxes/" + id, nil, sbID},
		{"POST", "127.0.0.1", "/sandboxes/" + id + "/timeout", nil, sbID},
		{"POST", "127.0.0.1", "/v2/sandboxes/" + id + "/connect", nil, sbID},
		{"GET", "127.0.0.1", "/v2/sandboxes/" + id + "/logs", nil, sbID},
		{"GET", "127.0.0.1", "/sandboxes/metrics", nil, none}, // batch metrics
		{"GET", "127.0.0.1", "/sandboxes/metrics?sandbox_ids=" + id, nil, none},
		{"GET", "127.0.0.1", "/templates", nil, none},

		// E2B envd by header: wins over the path, as the facade matches first.
		{"POST", "127.0.0.1", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}, sbID},
		{"GET", "127.0.0.1", "/files?path=/a", map[string]string{"E2b-Sandbox-Id": id}, sbID},
		{"POST", "127.0.0.1", "/execute", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999"}, sbID},
		{"POST", "127.0.0.1", "/v1/sandboxes", map[string]string{"E2b-Sandbox-Id": id}, sbID},
		{"POST", "127.0.0.1", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": "debug_sandbox_id"}, none},
		{"POST", "127.0.0.1", "/v1/sandboxes", map[string]string{"E2b-Sandbox-Id": "nope"}, none},
		{"GET", "127.0.0.1", "/files?path=/a&signature=v1_x", nil, none}, // a signed URL names no sandbox

		// Preview hosts: any port, whatever the path or headers.
		{"POST", "49983-" + id + "." + domain, "/process.Process/Start", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 49983}},
		{"POST", "49999-" + id + "." + domain + ":7070", "/execute", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 49999}},
		{"GET", "8080-" + id + ".PREVIEW.test.", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 8080}},
		{"GET", "3000-" + id + "." + domain, "/sandboxes/sb-ffffffffffffffff", map[string]string{"E2b-Sandbox-Id": "sb-eeeeeeeeeeeeeeee"}, forward.Ref{Kind: forward.Sandbox, ID: id, Port: 3000}},
		{"GET", "8080-myapp." + domain, "/", nil, none},   // preview shape, not an id
		{"GET", "0-" + id + "." + domain, "/", nil, none}, // not a port: a name under the domain, so the API's
		{"GET", "sandbox." + domain, "/sandboxes/" + id, nil, sbID},
		{"GET", domain, "/v1/sandboxes/" + id, nil, sbID},
		{"GET", "a.b." + domain, "/v1/sandboxes", nil, list},

		// Daytona.
		{"POST", "127.0.0.1", "/daytona/api/sandbox", nil, create},
		{"GET", "127.0.0.1", "/daytona/api/sandbox?labels=%7B%7D", nil, list},
		{"GET", "127.0.0.1", "/daytona/api/sandbox/" + id, nil, sbID},
		{"GET", "127.0.0.1", "/daytona/api/sandbox/my-box", nil, named("my-box")},
		{"DELETE", "127.0.0.1", "/daytona/api/sandbox/" + id, nil, sbID},
		{"POST", "127.0.0.1", "/daytona/api/sandbox/" + id + "/autostop/15", nil, sbID},
		// The Daytona edge has no /paginated route: GET /sandbox/{id} serves it as a name.
		{"GET", "127.0.0.1", "/daytona/api/sandbox/paginated", nil, named("paginated")},
		{"POST", "127.0.0.1", "/daytona/api/toolbox/" + id + "/process/execute", nil, sbID},
		{"GET", "127.0.0.1", "/daytona/api/toolbox/my-box/process/pty/s1/connect", nil, named("my-box")},
		{"GET", "127.0.0.1", "/daytona/api/toolbox", nil, none},
		{"GET", "127.0.0.1", "/daytona/api/volumes", nil, none},
		{"GET", "127.0.0.1", "/daytona/api/socket.io/?EIO=4", nil, none},
		{"GET", "127.0.0.1", "/daytona/api/sandboxes/" + id, nil, none},

		// Custom domains: a Host that is none of the API's wins over the
		// path; what the path names rides along for an unbound host.
		{"GET", "app.example.org", "/", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org"}},
		{"POST", "app.example.org", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", PathKind: forward.Create}},
		{"GET", "App.Example.org.:443", "/v1/sandboxes", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", PathKind: forward.List}},
		{"GET", "app.example.org", "/v1/sandboxes/" + id, nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", ID: id, PathKind: forward.Sandbox}},
		{"GET", "app.example.org", "/daytona/api/sandbox/my-box", nil, forward.Ref{Kind: forward.Host, Host: "app.example.org", Name: "my-box", PathKind: forward.Sandbox}},
		{"GET", "app.example.org", "/", map[string]string{"E2b-Sandbox-Id": id}, forward.Ref{Kind: forward.Host, Host: "app.example.org", ID: id, PathKind: forward.Sandbox}},
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
		if diff := cmp.Diff(tc.want, forward.RefOf(r, domain, apiHosts)); diff != "" {
			t.Errorf("RefOf(%s %s, Host %q, %v) (-want +got):\n%s", tc.method, tc.target, tc.host, tc.header, diff)
		}
	}
}

func TestRefOf_NoDomain(t *testing.T) {
	// Without a preview domain there are no preview hosts: a host of that
	// shape is a custom domain, and envd goes by header.
	r := &http.Request{Method: "GET", Host: "8080-" + id + ".preview.test", URL: mustURL(t, "/"), Header: http.Header{}}
	want := forward.Ref{Kind: forward.Host, Host: "8080-" + id + ".preview.test"}
	if diff := cmp.Diff(want, forward.RefOf(r, "", nil)); diff != "" {
		t.Errorf("RefOf (-want +got):\n%s", diff)
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
// and hosts, and fills only the fields its Kind allows.
func FuzzRefOf(f *testing.F) {
	for _, s := range []struct{ method, host, target, e2b string }{
		{"POST", "127.0.0.1:7070", "/v1/sandboxes", ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/" + id + "/exec/stream", ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/my-box", ""},
		{"DELETE", "localhost", "/sandboxes/" + id, ""},
		{"GET", "localhost", "/sandboxes/metrics", ""},
		{"POST", "localhost", "/v2/sandboxes/" + id + "/connect", ""},
		{"POST", "127.0.0.1", "/process.Process/Start", id},
		{"POST", "127.0.0.1", "/process.Process/Start", "sb-zz"},
		{"POST", "49983-" + id + "." + domain, "/process.Process/Start", ""},
		{"GET", "8080-" + id + "." + domain + ":7070", "/", ""},
		{"GET", "app.example.org", "/v1/sandboxes/" + id, ""},
		{"POST", "127.0.0.1", "/daytona/api/toolbox/" + id + "/process/execute", ""},
		{"GET", "127.0.0.1", "/daytona/api/sandbox/paginated", ""},
		{"GET", "127.0.0.1", "/v1/sandboxes/%2e%2e/x", ""},
		{"GET", "[::1]:7070", "/v1//sandboxes", ""},
	} {
		f.Add(s.method, s.host, s.target, s.e2b)
	}
	f.Fuzz(func(t *testing.T, method, host, target, e2b string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Skip()
		}
		r := &http.Request{Method: method, Host: host, URL: u, Header: http.Header{}}
		if e2b != "" {
			r.Header["E2b-Sandbox-Id"] = []string{e2b}
		}
		ref := forward.RefOf(r, domain, apiHosts)
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
		case forward.None, forward.Create, forward.List:
			if ref != (forward.Ref{Kind: ref.Kind}) {
				t.Fatalf("%v ref with fields: %+v", ref.Kind, ref)
			}
		default:
			t.Fatalf("unknown kind %v", ref.Kind)
		}
	})
}
