package adversarial_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// The API edges, attacked on a whole daemon.

// tenantSecret is tenant with the token's secret, for raw HTTP.
func tenantSecret(t *testing.T, d *daemontest.Daemon, owner string) (*sandboxd.Client, string) {
	t.Helper()
	tok, err := adminClient(d).CreateToken(t.Context(), sandboxd.CreateTokenRequest{Name: owner, Role: sandboxd.RoleUser, Owner: owner})
	if err != nil {
		t.Fatalf("create token for %s: %v", owner, err)
	}
	return sandboxd.New(d.URL(), tok.Secret), tok.Secret
}

// call sends one request to d with host as its Host ("" for d's own) and
// header pairs, and returns the status and body.
func call(t *testing.T, d *daemontest.Daemon, method, host, path, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: testenv.Deadline}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A "private" tcp or tls exposure used to answer public:false and
// be reachable from the host with no credential. It is refused, and no
// host port or route is taken.
func TestEdges_PrivateTCPExposureIsRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "edges-l4")
	alice, secret := tenantSecret(t, d, "alice")
	sb := sandbox(t, alice, sandboxd.CreateRequest{})
	for _, body := range []string{`{"port":9000,"protocol":"tcp","public":false}`, `{"port":8443,"protocol":"tls","public":false}`} {
		code, answer := call(t, d, "POST", "", "/v1/sandboxes/"+sb.ID+"/ports", body, "Authorization", "Bearer "+secret)
		if code != http.StatusBadRequest || !strings.Contains(answer, `"invalid_argument"`) || !strings.Contains(answer, "public: ") {
			t.Errorf("expose %s: %d %s, want 400 invalid_argument on public", body, code, answer)
		}
	}
	if ports, err := alice.ListPorts(t.Context(), sb.ID); err != nil || len(ports) != 0 {
		t.Errorf("ports after the refusals: %+v, %v; want none", ports, err)
	}
}

// Idle kept-alive connections are closed after --idle-timeout, and
// with --max-conns a flood of held connections neither exhausts the
// daemon's descriptors nor stops it answering: each is served in turn, a
// fresh client is answered, another tenant's sandbox keeps working.
func TestEdges_HeldConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "edges-conns", "--idle-timeout", "1s", "--max-conns", "8")
	watch := watchBystander(t, d)
	rss := watchRSS(t, d)
	addr := strings.TrimPrefix(d.URL(), "http://")

	const attackers = 40
	var wg sync.WaitGroup
	errs := make(chan error, attackers)
	for i := range attackers {
		wg.Go(func() { errs <- holdIdle(addr, i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if h, err := adminClient(d).Health(t.Context()); err != nil || h.Status != "ok" {
		t.Errorf("health after the flood: %+v, %v", h, err)
	}
	_, metrics := call(t, d, "GET", "", "/metrics", "", "Authorization", "Bearer "+d.Token())
	for _, want := range []string{"sandboxd_http_connections_max 8", "sandboxd_http_connection_waits_total "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(metrics, "sandboxd_http_connection_waits_total 0\n") {
		t.Error("no connection waited at the cap, though 40 were held against 8 slots")
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
	if g := rss.Growth(); g > 64<<20 {
		t.Errorf("daemon RSS grew %d MiB under the flood", g>>20)
	}
}

// holdIdle opens a connection, makes one request on it, keeps it open
// idle and reports nil once the daemon has answered and then closed it.
func holdIdle(addr string, i int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("attacker %d: dial: %w", i, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testenv.Deadline))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("attacker %d: no answer: %w", i, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := io.ReadAll(br); err != nil { // EOF once the idle timeout closes it
		return fmt.Errorf("attacker %d: idle connection not closed: %w", i, err)
	}
	return nil
}

// Tenant B may use a name tenant A holds, and the E2B envd route
// answers a header naming another tenant's sandbox exactly like one naming
// nothing.
func TestEdges_TenantNamesNeitherCollideNorLeak(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "edges-names")
	alice := tenant(t, d, "alice")
	mallory := tenant(t, d, "mallory")
	mine := sandbox(t, alice, sandboxd.CreateRequest{Name: "web"})
	theirs := sandbox(t, mallory, sandboxd.CreateRequest{Name: "web"})
	if got, err := mallory.GetSandbox(t.Context(), "web"); err != nil || got.ID != theirs.ID {
		t.Errorf("mallory's web = %v, %v; want %s", got, err, theirs.ID)
	}
	if got, err := alice.GetSandbox(t.Context(), "web"); err != nil || got.ID != mine.ID {
		t.Errorf("alice's web = %v, %v; want %s", got, err, mine.ID)
	}
	sandbox(t, alice, sandboxd.CreateRequest{Name: "alice-secret"})
	held, heldBody := call(t, d, "GET", "", "/health", "", "E2b-Sandbox-Id", "alice-secret")
	none, noneBody := call(t, d, "GET", "", "/health", "", "E2b-Sandbox-Id", "nobody-holds")
	if held != none || strings.ReplaceAll(noneBody, "nobody-holds", "alice-secret") != heldBody {
		t.Errorf("envd /health by another tenant's name: %d %s; by a name nobody holds: %d %s; want the same", held, heldBody, none, noneBody)
	}
}

// On the API's port, a preview host is the sandbox app's for
// every path (the E2B facade used to answer /sandboxes with "missing API
// key"), and a name given with --api-host cannot be bound as a custom
// domain.
func TestEdges_PreviewHostsAndAPIHosts(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "edges-hosts", "--api-host", "api.example.test")
	alice := tenant(t, d, "alice")
	sb := sandbox(t, alice, sandboxd.CreateRequest{})
	sh(t, alice, sb.ID, "mkdir -p /www/sandboxes && echo app > /www/sandboxes/index.html && httpd -p 8080 -h /www")
	if _, err := alice.ExposePort(t.Context(), sb.ID, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP, Public: true}); err != nil {
		t.Fatal(err)
	}
	host := "8080-" + sb.ID + ".localhost"
	waitFor(t, "the app answers on its preview host", func() error {
		if code, body := call(t, d, "GET", host, "/sandboxes/", ""); code != http.StatusOK || body != "app\n" {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	_, err := alice.AddDomain(t.Context(), sb.ID, "API.example.test", 8080)
	var apiErr *sandboxd.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Errorf("bind the API host as a custom domain: %v, want 400", err)
	}
	code, body := call(t, d, "GET", "api.example.test", "/healthz", "")
	var h struct{ Status string }
	if json.Unmarshal([]byte(body), &h); code != http.StatusOK || h.Status != "ok" {
		t.Errorf("GET /healthz on the API host: %d %s, want the API", code, body)
	}
}

// endlessHeaders is a sandbox's HTTP server on port 8080 whose every reply
// is a status line and then headers that never end.
const endlessHeaders = `
import socket, threading
def serve(c):
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Junk: " + b"a" * 4000 + b"\r\n"
        while True:
            c.sendall(line)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8080)); s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
`

// A sandbox's own server is as untrusted as its agent: reply headers that
// never end fail that request (502) after a bounded read, the daemon's
// memory stays bounded under requests in parallel, and another tenant's
// sandbox keeps answering.
func TestEdges_EndlessReplyHeadersFromASandboxAppAreBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "edges-headers")
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{Image: baseImage})
	if _, err := mallory.ExposePort(t.Context(), sb.ID, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP, Public: true}); err != nil {
		t.Fatal(err)
	}
	sh(t, mallory, sb.ID, "cat >/tmp/headers.py <<'EOF'\n"+endlessHeaders+"EOF\nnohup python3 /tmp/headers.py >/dev/null 2>&1 &")
	watch := watchBystander(t, d)
	rss := watchRSS(t, d)
	host := "8080-" + sb.ID + ".localhost"
	waitFor(t, "the preview host answers 502", func() error {
		if code, body := call(t, d, "GET", host, "/", ""); code != http.StatusBadGateway {
			return fmt.Errorf("%d %.200s", code, body)
		}
		return nil
	})
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Go(func() { codes[i], _ = call(t, d, "GET", host, "/", "") })
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusBadGateway {
			t.Errorf("request %d: %d, want 502", i, c)
		}
	}
	g := rss.Growth()
	t.Logf("daemon RSS growth during the attack: %d KiB", g>>10)
	if g > rssBound {
		t.Errorf("daemon RSS grew by %d MiB, want at most %d MiB", g>>20, rssBound>>20)
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
}
