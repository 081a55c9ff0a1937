package e2b_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// hostEcho is a server that answers every GET with the Host and path it
// got; it runs inside the sandbox on 127.0.0.1:<port>.
const hostEcho = `
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("host=%s path=%s" % (self.headers.get("Host"), self.path)).encode()
        self.send_response(200)
        if self.path == "/huge":
            self.send_header("X-Pad", "a" * 200000)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// startHostEcho runs hostEcho on port in sandbox id.
func startHostEcho(t *testing.T, h *harness, id string, port int) {
	t.Helper()
	ac, err := h.svc.Agent(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ac.StartProcess(t.Context(), agent.StartRequest{Cmd: []string{"python3", "-c", hostEcho, fmt.Sprint(port)}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close() // the stream only; the server runs on
}

// portHosts serves preview hosts as the daemon does for ports the ingress
// has not exposed: the facade's ServePort, else the ingress's 404.
func portHosts(h *harness) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, port, ok := naming.ParsePreviewHost(r.Host, "e2b.test")
		if ok && h.facade.ServePort(w, r, id, port) {
			return
		}
		http.Error(w, "no exposed http port behind this host", http.StatusNotFound)
	}))
}

// getAs sends GET path to srv with Host host and header, and returns the
// status and body.
func getAs(t *testing.T, srv *httptest.Server, host, path string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}

// TestPortHost_AnyPortOfAnE2BSandboxWithoutExpose: <port>-<id>.<domain>
// reaches any port of a running E2B sandbox, with no expose call, keeping
// the caller's Host.
func TestPortHost_AnyPortOfAnE2BSandboxWithoutExpose(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	startHostEcho(t, h, c.SandboxID, 8080)
	srv := portHosts(h)
	defer srv.Close()

	host := "8080-" + c.SandboxID + ".e2b.test"
	var body string
	testenv.WaitFor(t, "the server in the sandbox", func() error {
		code, b := getAs(t, srv, host, "/p?q=1", nil)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, b)
		}
		body = b
		return nil
	})
	if want := "host=" + host + " path=/p?q=1"; body != want {
		t.Errorf("the server got %q, want %q", body, want)
	}
	// Whatever listens in the sandbox is hostile: its reply headers are
	// bounded (64 KiB), failing only that request.
	if code, b := getAs(t, srv, host, "/huge", nil); code != http.StatusBadGateway {
		t.Errorf("200 KB of reply headers: %d %.100s, want 502", code, b)
	}
}

// TestPortHost_PrivateSandboxWantsItsTrafficToken: with
// allowPublicTraffic=false every port but envd's wants the traffic token
// (403 in E2B's body without it or with another), and maskRequestHost
// rewrites the Host the sandbox sees, ${PORT} substituted.
func TestPortHost_PrivateSandboxWantsItsTrafficToken(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "network": map[string]any{
		"allowPublicTraffic": false, "maskRequestHost": "${PORT}-masked.example.com",
	}})
	other := h.create(t, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	startHostEcho(t, h, c.SandboxID, 8080)
	srv := portHosts(h)
	defer srv.Close()
	host := "8080-" + c.SandboxID + ".e2b.test"
	token := map[string]string{"e2b-traffic-access-token": *c.TrafficAccessToken}

	var body string
	testenv.WaitFor(t, "the server in the sandbox", func() error {
		code, b := getAs(t, srv, host, "/", token)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, b)
		}
		body = b
		return nil
	})
	if want := "host=8080-masked.example.com path=/"; body != want {
		t.Errorf("the server got %q, want %q", body, want)
	}
	for name, hdr := range map[string]map[string]string{
		"no token":                  nil,
		"a wrong token":             {"e2b-traffic-access-token": "x"},
		"another sandbox's token":   {"e2b-traffic-access-token": *other.TrafficAccessToken},
		"the envd token instead":    {"X-Access-Token": c.EnvdAccessToken},
		"the token in another name": {"Authorization": "Bearer " + *c.TrafficAccessToken},
	} {
		code, b := getAs(t, srv, host, "/", hdr)
		wantError(t, response{status: code, body: []byte(b)}, http.StatusForbidden)
		if strings.Contains(b, "host=") {
			t.Errorf("%s: reached the server: %s", name, b)
		}
	}
}

// TestPortHost_OnlyRunningE2BSandboxesByID: the port hosts of a sandbox
// made through the native API, of one not running, of a name, of a killed
// sandbox and of an id nobody holds all answer the same as E2B's edge: 502
// {"sandboxId","message":"The sandbox was not found","code":502} (it was
// the ingress's 404 {"error":…}), telling none of them from the others.
func TestPortHost_OnlyRunningE2BSandboxesByID(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	native, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "bob", Name: "bobs-web", Image: "sandboxd/busybox:latest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.svc.Destroy(context.Background(), service.Caller{Admin: true}, native.ID) })
	paused := h.create(t, map[string]any{"templateID": "base"})
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+paused.SandboxID+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	srv := portHosts(h)
	defer srv.Close()

	killed := h.create(t, map[string]any{"templateID": "base"})
	if resp := h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+killed.SandboxID, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	for name, id := range map[string]string{"none": "sb-00000000deadbeef", "native": native.ID, "paused": paused.SandboxID,
		"a name": "bobs-web", "killed": killed.SandboxID} {
		code, b := getAs(t, srv, "8080-"+id+".e2b.test", "/", nil)
		want := `{"sandboxId":"` + id + `","message":"The sandbox was not found","code":502}` + "\n"
		if code != http.StatusBadGateway || b != want {
			t.Errorf("%s: %d %q, want 502 %q", name, code, b, want)
		}
	}
}
