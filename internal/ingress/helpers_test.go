package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
	"github.com/sandboxd/sandboxd/internal/ingress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The router is what the service and the daemon take it for.
var (
	_ interface {
		Install(ctx context.Context, sandboxID string) error
		Remove(ctx context.Context, sandboxID string) error
	} = (*ingress.Router)(nil)
	_ http.Handler   = (*ingress.Router)(nil)
	_ ingress.Dialer = (*agents)(nil)
)

const (
	sbA = "sb-0123456789abcdef"
	sbB = "sb-fedcba9876543210"
	// goodToken is what the test Authorize hook accepts: an API token in
	// the bearer scheme (the shape auth.IsToken knows).
	goodToken = "Bearer sbx_0123abcd_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// agents is a Dialer over the real tunnel: each sandbox has an agent
// socket in a temp dir serving tunnel.Handler, whose CONNECTs reach the
// host's loopback (the "inside" of every test sandbox).
type agents struct {
	mu    sync.Mutex
	socks map[string]string
}

func newAgents() *agents { return &agents{socks: map[string]string{}} }

// start serves an agent for sandboxID until the test ends.
func (a *agents) start(t *testing.T, sandboxID string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: tunnel.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	a.mu.Lock()
	a.socks[sandboxID] = path
	a.mu.Unlock()
}

func (a *agents) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	a.mu.Lock()
	path := a.socks[sandboxID]
	a.mu.Unlock()
	if path == "" {
		return nil, fmt.Errorf("no agent for %s", sandboxID)
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return tunnel.Dial(ctx, raw, "agent-token", port)
}

// env is a router served on loopback in front of a stand-in API, with an
// agent for sbA and sbB.
type env struct {
	r      *ingress.Router
	agents *agents
	addr   string // the daemon listener, 127.0.0.1:<port>
	client *http.Client
}

func newEnv(t *testing.T, mutate ...func(*ingress.Options)) *env {
	t.Helper()
	ag := newAgents()
	ag.start(t, sbA)
	ag.start(t, sbB)
	opts := ingress.Options{
		Domain:           "localhost",
		Dialer:           ag,
		Authorize:        func(r *http.Request) bool { return r.Header.Get("Authorization") == goodToken },
		CredentialCookie: "sandboxd_token",
	}
	for _, f := range mutate {
		f(&opts)
	}
	r, err := ingress.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "api") })
	srv := httptest.NewServer(r.Wrap(api))
	addr := srv.Listener.Addr().String()
	client := &http.Client{Transport: &http.Transport{
		// Every name resolves to the daemon, as *.localhost does in a browser.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{r: r, agents: ag, addr: addr, client: client}
}

// url is the preview URL of a sandbox port on the daemon's listener.
func (e *env) url(sandboxID string, port int, path string) string {
	_, lport, _ := net.SplitHostPort(e.addr)
	return "http://" + e.r.PreviewHost(sandboxID, port) + ":" + lport + path
}

// expose installs sandboxID and exposes port.
func (e *env) expose(t *testing.T, sandboxID string, p ingress.Port) {
	t.Helper()
	if err := e.r.Install(t.Context(), sandboxID); err != nil {
		t.Fatal(err)
	}
	if err := e.r.ExposePort(t.Context(), sandboxID, p); err != nil {
		t.Fatal(err)
	}
}

// get fetches url and returns the status and body.
func (e *env) get(t *testing.T, url string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// httpUpstream serves h on loopback (inside "the sandbox") and returns
// its port.
func httpUpstream(t *testing.T, h http.Handler) int {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// echoUpstream answers every TCP connection with what it reads until EOF.
func echoUpstream(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// wantErrorBody checks the API's JSON error shape and code.
func wantErrorBody(t *testing.T, body, code string) {
	t.Helper()
	if !strings.Contains(body, `"code":"`+code+`"`) {
		t.Fatalf("body %q, want error code %q", body, code)
	}
}

// roundTrip writes msg on c, half-closes, and reads to EOF.
func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(got)
}
