package e2b

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// envdOnlyService is the part of Service serveEnvd uses: one running
// sandbox whose agent is ac.
type envdOnlyService struct {
	Service // nil: any other call panics
	sb      service.Sandbox
	ac      *agent.Client
}

func (s envdOnlyService) Get(context.Context, service.Caller, string) (service.Sandbox, error) {
	return s.sb, nil
}

func (s envdOnlyService) Agent(context.Context, string) (*agent.Client, error) { return s.ac, nil }

// slowBodyConn is a connection to the agent whose write of the request
// body returns only once release is closed: the bytes reach the agent at
// once, but the proxy's writing goroutine is held up right after, as a
// busy scheduler does. closed is closed when the proxy closes it.
type slowBodyConn struct {
	net.Conn
	release <-chan struct{}
	once    sync.Once
	closed  chan struct{}
}

func (c *slowBodyConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if !strings.HasPrefix(string(p), "POST ") { // the body, after the flushed head
		select {
		case <-c.release:
		case <-time.After(5 * time.Second):
		}
	}
	return n, err
}

func (c *slowBodyConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A response streamed through the envd proxy survives the request body's
// write finishing after the response started. The net/http server drains
// and closes a handler's request body when the response begins (unless
// full duplex), and the transport reads that body once more after
// Content-Length to check its end: had the server closed it, the write
// failed and the transport closed the agent connection under the stream
// (the E2B suite's "[unknown] terminated" and lost watchDir events).
func TestEnvdProxy_StreamSurvivesALateRequestBodyWrite(t *testing.T) {
	release := make(chan struct{})
	conns := make(chan *slowBodyConn, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // a Connect handler reads the request to its end first
		w.Header().Set("Content-Type", "application/connect+json")
		_, _ = io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		<-release
		select { // the proxy's request write has now ended, well or badly
		case <-(<-conns).closed:
		case <-time.After(300 * time.Millisecond):
		}
		_, _ = io.WriteString(w, "second\n")
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "third\n")
	}))
	defer upstream.Close()

	ac := agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", upstream.Listener.Addr().String())
		if err != nil {
			return nil, err
		}
		conn := &slowBodyConn{Conn: c, release: release, closed: make(chan struct{})}
		select {
		case conns <- conn:
		default:
			t.Error("the proxy dialed the agent more than once")
		}
		return conn, nil
	}, "agent-token")
	defer ac.Close()
	sb := service.Sandbox{ID: "sb-0123456789abcdef", State: store.StateRunning}
	f := New(Options{Service: envdOnlyService{sb: sb, ac: ac}, AccessTokenKey: []byte("k")})
	front := httptest.NewServer(f)
	defer front.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/process.Process/Start",
		strings.NewReader(`{"process":{"cmd":"/bin/bash","args":["-c","echo hi"]}}`))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set(headerSandboxID, sb.ID)
	req.Header.Set("X-Access-Token", f.token(accessTokenLabel, sb.ID))
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("first message: %q, %v", first, err)
	}
	close(release) // the response has started: let the request write end
	rest, err := io.ReadAll(br)
	if got := first + string(rest); err != nil || got != "first\nsecond\nthird\n" {
		t.Errorf("stream = %q, %v; want all three messages and a clean end", got, err)
	}
}
