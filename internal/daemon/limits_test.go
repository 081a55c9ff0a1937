package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// serving is a daemon serving on its own listener (Serve, as the binary
// runs it) until the test ends.
func serving(t *testing.T, agent string, extra ...string) (*daemon.Daemon, string) {
	t.Helper()
	d := newDaemon(t, agent, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return d, d.Addr().String()
}

// anyFile stands in for the agent binary in tests that make no sandbox.
func anyFile(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// keptAlive is a raw HTTP/1.1 connection that has had one answer and is
// kept alive.
type keptAlive struct {
	net.Conn
	br *bufio.Reader
}

// dialKeptAlive opens a connection to addr and, unless path is "", sends
// GET path on it and reads the answer, which must be 200.
func dialKeptAlive(t *testing.T, addr, path string) *keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	k := &keptAlive{Conn: c, br: bufio.NewReader(c)}
	if path != "" {
		if code, err := k.get(path); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
	}
	return k
}

func (k *keptAlive) send(path string) error {
	_, err := fmt.Fprintf(k, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path)
	return err
}

func (k *keptAlive) read() (int, error) {
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

func (k *keptAlive) get(path string) (int, error) {
	if err := k.send(path); err != nil {
		return 0, err
	}
	return k.read()
}

// closedByServer waits (up to testenv.Deadline) for the server to close
// the connection and reports how it ended: nil when it did.
func (k *keptAlive) closedByServer() error {
	k.SetReadDeadline(time.Now().Add(testenv.Deadline))
	b, err := io.ReadAll(k.br)
	switch {
	case err != nil:
		return fmt.Errorf("not closed: %w", err)
	case len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 4"):
		return fmt.Errorf("answered %q", b)
	}
	return nil
}

// metric is the value of the gauge or counter name in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestServe_IdleConnectionsAreClosed: kept-alive connections with no
// request are closed after --idle-timeout (there was no idle timeout: 50
// idle connections were still open after 180 s).
func TestServe_IdleConnectionsAreClosed(t *testing.T) {
	_, addr := serving(t, anyFile(t), "--idle-timeout", "500ms")
	conns := make([]*keptAlive, 20)
	for i := range conns {
		conns[i] = dialKeptAlive(t, addr, "/healthz")
	}
	for i, k := range conns {
		if err := k.closedByServer(); err != nil {
			t.Errorf("idle connection %d: %v", i, err)
		}
	}
}

// TestServe_ConnectionCapHoldsAndTheDaemonKeepsAnswering: with
// --max-conns 4 and four connections held open, a fifth is not served (it
// waits, counted, while the open count stays 4) until one of the four
// closes; then it is answered, and so is every later client. (There was no
// cap: with a low fd limit, held connections made accept fail with
// "too many open files" and the daemon stopped answering.)
func TestServe_ConnectionCapHoldsAndTheDaemonKeepsAnswering(t *testing.T) {
	d, addr := serving(t, anyFile(t), "--max-conns", "4")
	held := make([]*keptAlive, 4)
	for i := range held {
		held[i] = dialKeptAlive(t, addr, "/healthz")
	}
	if got := metric(t, d.Registry, "sandboxd_http_connections"); got != 4 {
		t.Fatalf("open connections %v, want 4", got)
	}
	fifth := dialKeptAlive(t, addr, "")
	if err := fifth.send("/healthz"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the fifth connection waits at the cap", func() error {
		if got := metric(t, d.Registry, "sandboxd_http_connection_waits_total"); got < 1 {
			return fmt.Errorf("waits %v", got)
		}
		return nil
	})
	if got := metric(t, d.Registry, "sandboxd_http_connections"); got != 4 {
		t.Fatalf("open connections at the cap %v, want 4", got)
	}
	held[0].Close()
	if code, err := fifth.read(); err != nil || code != http.StatusOK {
		t.Fatalf("the fifth connection once one closed: %d %v, want 200", code, err)
	}
	for _, k := range append(held[1:], fifth) {
		k.Close()
	}

	// Many clients at once, more than the cap: every one is answered.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Deadline}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			resp, err := client.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a client past the cap: %v", err)
		}
	}
	if got := metric(t, d.Registry, "sandboxd_http_connections_max"); got != 4 {
		t.Errorf("sandboxd_http_connections_max = %v, want 4", got)
	}
}

// TestServe_SlowBodyOnAControlRouteIsCut: a caller that sends a control
// request's headers and then none of its body loses the connection after
// --request-timeout, on the native API and on both facades (there was no
// bound: the connection and its goroutine stayed as long as the caller).
func TestServe_SlowBodyOnAControlRouteIsCut(t *testing.T) {
	d, addr := serving(t, anyFile(t), "--request-timeout", "500ms")
	tok, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, rq := range []struct{ path, auth string }{
		{"/v1/sandboxes", "Authorization: Bearer "},
		{"/v2/sandboxes", "X-API-KEY: "},
		{"/daytona/api/sandbox", "Authorization: Bearer "},
	} {
		k := dialKeptAlive(t, addr, "")
		fmt.Fprintf(k, "POST %s HTTP/1.1\r\nHost: localhost\r\n%s%s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
			rq.path, rq.auth, strings.TrimSpace(string(tok)))
		if err := k.closedByServer(); err != nil {
			t.Errorf("POST %s with a body that never comes: %v", rq.path, err)
		}
	}
}

// TestServe_StreamsOutliveTheRequestTimeout: a buffered exec that runs
// longer than --request-timeout is answered, on a connection that first
// served a bounded request (whose deadline must not carry over).
func TestServe_StreamsOutliveTheRequestTimeout(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, addr := serving(t, agent, "--request-timeout", "1s")
	sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), service.Caller{Admin: true}, sb.ID) })
	tok, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}} // one kept-alive connection
	defer client.CloseIdleConnections()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: read: %v", method, path, err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/v1/sandboxes/"+sb.ID, ""); code != http.StatusOK {
		t.Fatalf("get: %d %s", code, body)
	}
	code, body := do("POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"sleep 3; echo done"}`)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || code != http.StatusOK || res.ExitCode != 0 || res.Stdout != "done\n" {
		t.Fatalf("an exec longer than the request timeout: %d %s (%v)", code, body, errors.Join(err))
	}
}
