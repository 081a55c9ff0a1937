package router_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/api/router"
	v1 "github.com/sandboxd/sandboxd/internal/api/v1"
	"github.com/sandboxd/sandboxd/internal/service"
)

const (
	id     = "sb-0123456789abcdef"
	domain = "preview.test"
)

// edges is the router's view of the three edges in the daemon's order
// (internal/daemon buildHandler): E2B, Daytona, then the native API.
func edges() router.Func {
	e := e2b.New(e2b.Options{Domain: domain, AccessTokenKey: make([]byte, 32)})
	d := daytona.New(daytona.Options{Domain: domain})
	return router.Of(v1.Route, e, d)
}

// TestOf_EachEdgeNamesItsOwn: each edge names what its routes name, in
// the order the daemon tries them (the E2B header wins over any path).
// These are the rules internal/cluster/forward once spelled out itself.
func TestOf_EachEdgeNamesItsOwn(t *testing.T) {
	route := edges()
	sb := router.Ref{Sandbox: id}
	v1sb := router.Ref{Sandbox: id, SaysLost: true}
	named := func(n string) router.Ref { return router.Ref{Sandbox: n} }
	create, none := router.Ref{Create: true}, router.Ref{}
	for _, tc := range []struct {
		method, target string
		header         map[string]string
		want           router.Ref
	}{
		// Native v1.
		{"POST", "/v1/sandboxes", nil, create},
		{"GET", "/v1/sandboxes?name=x", nil, none},
		{"HEAD", "/v1/sandboxes", nil, none},
		{"DELETE", "/v1/sandboxes", nil, none},
		{"GET", "/v1/sandboxes/" + id, nil, v1sb},
		{"DELETE", "/v1/sandboxes/" + id, nil, router.Ref{Sandbox: id, Destroy: true, SaysLost: true}},
		{"POST", "/v1/sandboxes/" + id + "/exec", nil, v1sb},
		{"GET", "/v1/sandboxes/" + id + "/exec/stream", nil, v1sb},
		{"PUT", "/v1/sandboxes/" + id + "/files?path=/a", nil, v1sb},
		{"DELETE", "/v1/sandboxes/" + id + "/domains/app.example.org", nil, v1sb},
		{"GET", "/v1/sandboxes/my-box", nil, router.Ref{Sandbox: "my-box", SaysLost: true}},
		{"GET", "/v1/sandboxes/my%2Dbox", nil, router.Ref{Sandbox: "my-box", SaysLost: true}}, // unescaped as ServeMux does
		{"GET", "/v1/sandboxes/", nil, none},
		{"GET", "/v1/sandboxes//" + id, nil, none}, // ServeMux redirects it
		{"GET", "/v1/sandboxes/../sandboxes/" + id, nil, none},
		{"GET", "/v1/sandboxesx/" + id, nil, none},
		{"POST", "/v1/tokens", nil, none},
		{"GET", "/healthz", nil, none},
		{"GET", "/", nil, none},

		// E2B control plane.
		{"POST", "/v2/sandboxes", nil, create},
		{"POST", "/sandboxes", nil, create},
		{"GET", "/v2/sandboxes?state=running", nil, none},
		{"GET", "/sandboxes", nil, none},
		{"GET", "/sandboxes/" + id, nil, sb},
		{"DELETE", "/sandboxes/" + id, nil, router.Ref{Sandbox: id, Destroy: true}},
		{"POST", "/sandboxes/" + id + "/timeout", nil, sb},
		{"POST", "/v2/sandboxes/" + id + "/connect", nil, sb},
		{"GET", "/v2/sandboxes/" + id + "/logs", nil, sb},
		{"GET", "/sandboxes/metrics", nil, none}, // batch metrics
		{"GET", "/sandboxes/metrics?sandbox_ids=" + id, nil, none},
		{"GET", "/templates", nil, none},

		// E2B envd by header: wins over the path, as the facade matches first.
		{"POST", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}, sb},
		{"GET", "/files?path=/a", map[string]string{"E2b-Sandbox-Id": id}, sb},
		{"POST", "/v1/sandboxes", map[string]string{"E2b-Sandbox-Id": id}, sb},
		{"POST", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": "debug_sandbox_id"}, none},
		{"POST", "/v1/sandboxes", map[string]string{"E2b-Sandbox-Id": "nope"}, none},
		{"GET", "/files?path=/a&signature=v1_x", nil, none}, // a signed URL names no sandbox

		// Daytona.
		{"POST", "/daytona/api/sandbox", nil, create},
		{"GET", "/daytona/api/sandbox?labels=%7B%7D", nil, none},
		{"GET", "/daytona/api/sandbox/" + id, nil, sb},
		{"GET", "/daytona/api/sandbox/my-box", nil, named("my-box")},
		{"DELETE", "/daytona/api/sandbox/" + id, nil, router.Ref{Sandbox: id, Destroy: true}},
		{"POST", "/daytona/api/sandbox/" + id + "/autostop/15", nil, sb},
		// The Daytona edge has no /paginated route: GET /sandbox/{id} serves it as a name.
		{"GET", "/daytona/api/sandbox/paginated", nil, named("paginated")},
		{"POST", "/daytona/api/toolbox/" + id + "/process/execute", nil, sb},
		{"GET", "/daytona/api/toolbox/my-box/process/pty/s1/connect", nil, named("my-box")},
		{"GET", "/daytona/api/toolbox", nil, none},
		{"GET", "/daytona/api/volumes", nil, none},
		{"GET", "/daytona/api/socket.io/?EIO=4", nil, none},
		{"GET", "/daytona/api/sandboxes/" + id, nil, none},
	} {
		u, err := url.ParseRequestURI(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Method: tc.method, Host: "127.0.0.1:7070", URL: u, Header: http.Header{}}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if diff := cmp.Diff(tc.want, route(r)); diff != "" {
			t.Errorf("%s %s %v (-want +got):\n%s", tc.method, tc.target, tc.header, diff)
		}
	}
}

// FuzzSegments: Segments never panics and hands out only segments the
// mux would match (non-empty, not "." or "..").
func FuzzSegments(f *testing.F) {
	for _, s := range []string{"/", "/v1/sandboxes", "/v1//x", "/a/%2e%2e/b", "/a/%zz", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		seg, ok := router.Segments(p)
		if !ok {
			return
		}
		for _, s := range seg {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("Segments(%q) = %q", p, seg)
			}
		}
	})
}

type placeFunc func(service.Caller, service.CreateOnceRequest) (service.Node, bool, error)

func (f placeFunc) PlaceCreate(_ context.Context, c service.Caller, r service.CreateOnceRequest) (service.Node, bool, error) {
	return f(c, r)
}

// TestPlacer_Elsewhere: a nil Placer and a request another node placed
// stay here without asking the service; the service's "here" stays here;
// another node gets the request (Forward), and the edge answers nothing
// more; the service's error is the edge's, nothing forwarded.
func TestPlacer_Elsewhere(t *testing.T) {
	n2 := service.Node{ID: "n2", URL: "http://n2.invalid"}
	errNoQuorum := service.Unavailable(service.ReasonNoQuorum, nil)
	for _, tc := range []struct {
		name      string
		nilPlacer bool
		placed    bool
		node      service.Node
		here      bool
		err       error
		wantAsked bool
		wantFwd   bool
	}{
		{name: "single node", nilPlacer: true},
		{name: "placed by another node", placed: true, node: n2},
		{name: "here", here: true, wantAsked: true},
		{name: "another node", node: n2, wantAsked: true, wantFwd: true},
		{name: "no quorum", err: errNoQuorum, wantAsked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked bool
			var sent []service.Node
			p := &router.Placer{
				Service: placeFunc(func(c service.Caller, r service.CreateOnceRequest) (service.Node, bool, error) {
					asked = true
					if c.Owner != "alice" || r.Create.Owner != "alice" {
						t.Errorf("asked for %+v, %+v", c, r.Create)
					}
					return tc.node, tc.here, tc.err
				}),
				Forward: func(_ http.ResponseWriter, _ *http.Request, n service.Node) { sent = append(sent, n) },
				Placed:  func(*http.Request) bool { return tc.placed },
			}
			if tc.nilPlacer {
				p = nil
			}
			r := httptest.NewRequest("POST", "/v1/sandboxes", nil)
			done, err := p.Elsewhere(httptest.NewRecorder(), r, service.Caller{Owner: "alice"}, service.CreateOnceRequest{Create: service.CreateRequest{Owner: "alice"}})
			if done != tc.wantFwd || !errors.Is(err, tc.err) || err != nil && tc.err == nil {
				t.Errorf("Elsewhere = %v, %v; want %v, %v", done, err, tc.wantFwd, tc.err)
			}
			if asked != tc.wantAsked {
				t.Errorf("asked the service: %v, want %v", asked, tc.wantAsked)
			}
			if want := tc.wantFwd; want != (len(sent) == 1) || want && sent[0] != n2 {
				t.Errorf("forwarded to %v", sent)
			}
		})
	}
}
