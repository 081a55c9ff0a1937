package ingress_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/ingress"
)

var _ ingress.PeerSigner = forward.Signer{}

var peerSecret = []byte("0123456789abcdef0123456789abcdef")

// signer is node's view of the test cluster's secret.
func signer(node string) forward.Signer { return forward.Signer{Node: node, Secret: peerSecret} }

// remotes is a Remote hook that answers addr for every name and counts
// what it was asked.
type remotes struct {
	addr  string
	calls atomic.Int64
}

func (r *remotes) remote(string) (string, bool) {
	r.calls.Add(1)
	return r.addr, r.addr != ""
}

// clusterNode is a router with an SNI listener, signing as node and
// forwarding to rem (nil: a node that forwards nothing).
func clusterNode(t *testing.T, node string, rem *remotes) (*env, string) {
	t.Helper()
	e := newEnv(t, func(o *ingress.Options) {
		o.TLSAddr = "127.0.0.1:0"
		o.Peers = signer(node)
		if rem != nil {
			o.Remote = rem.remote
		}
	})
	a, err := e.r.ListenTLS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return e, a.String()
}

// tlsUpstream starts a TLS echo server for sbA's port on e and returns the
// port's preview host and the CA to trust.
func tlsUpstream(t *testing.T, e *env) (string, *ingress.LocalCA) {
	t.Helper()
	ca, err := ingress.NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	port := tlsEchoUpstream(t, ca)
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.TLS})
	return e.r.PreviewHost(sbA, port), ca
}

// handshake dials addr, writes preamble (if any) and runs a TLS handshake
// for serverName, trusting ca (nil: trusting anything); it returns the
// connection, closed when the test ends, or the first error. It may run
// on another goroutine than the test's.
func handshake(t *testing.T, addr string, preamble []byte, serverName string, ca *ingress.LocalCA) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if len(preamble) > 0 {
		if _, err := raw.Write(preamble); err != nil {
			raw.Close()
			return nil, err
		}
	}
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: ca == nil}
	if ca != nil {
		cfg.RootCAs = ca.Pool()
	}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func TestTLSForward_ReachesTheOwner(t *testing.T) {
	owner, ownerAddr := clusterNode(t, "b", nil)
	host, ca := tlsUpstream(t, owner)
	rem := &remotes{addr: ownerAddr}
	_, edgeAddr := clusterNode(t, "a", rem)

	c, err := handshake(t, edgeAddr, nil, host, ca)
	if err != nil {
		t.Fatalf("handshake through a node that does not route %s: %v", host, err)
	}
	if got := c.ConnectionState().PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != host {
		t.Fatalf("peer certificate for %v, want %s", got, host)
	}
	const want = "hello over tls, by way of another node\n"
	if got := roundTrip(t, c, want); got != want {
		t.Fatalf("echo %q, want %q", got, want)
	}
	if got := rem.calls.Load(); got != 1 {
		t.Errorf("Remote asked %d times, want 1", got)
	}
}

// TestTLSForward_PreambleThenHello: what the owner's listener reads is one
// preamble line, valid for the server name and from the forwarding node,
// then the client's bytes from the ClientHello on.
func TestTLSForward_PreambleThenHello(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	_, edgeAddr := clusterNode(t, "a", &remotes{addr: peer.Addr().String()})
	const name = "app.example.com"

	done := make(chan error, 1)
	go func() {
		_, err := handshake(t, edgeAddr, nil, name, nil)
		done <- err
	}()
	up, err := peer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	up.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(up)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if from, ok := signer("b").VerifyTLS(line, name); !ok || from != "a" {
		t.Fatalf("preamble %q: VerifyTLS = %q, %v; want a, true", line, from, ok)
	}
	if len(line) > ingress.MaxPreambleLen {
		t.Errorf("preamble is %d bytes, over %d", len(line), ingress.MaxPreambleLen)
	}
	next, err := br.ReadByte()
	if err != nil || next != 0x16 {
		t.Fatalf("after the preamble: %#x, %v; want a handshake record (0x16)", next, err)
	}
	up.Close()
	if err := <-done; err == nil {
		t.Fatal("handshake succeeded against a peer that closed")
	}
}

// TestTLSForward_ForwardedIsNeverForwardedAgain: a connection that came
// with a valid preamble for a name this node does not route is closed;
// Remote is not asked, so two nodes with stale views cannot bounce it.
func TestTLSForward_ForwardedIsNeverForwardedAgain(t *testing.T) {
	rem := &remotes{addr: "127.0.0.1:1"}
	_, addr := clusterNode(t, "b", rem)
	const name = "app.example.com"
	if _, err := handshake(t, addr, signer("a").SignTLS(name), name, nil); err == nil {
		t.Fatal("handshake succeeded; want the forwarded connection closed")
	}
	if got := rem.calls.Load(); got != 0 {
		t.Fatalf("Remote asked %d times for a forwarded connection, want 0", got)
	}
}

// TestTLSForward_ValidPreambleServedLocally: a forwarded connection for a
// name this node routes reaches the sandbox.
func TestTLSForward_ValidPreambleServedLocally(t *testing.T) {
	rem := &remotes{}
	e, addr := clusterNode(t, "b", rem)
	host, ca := tlsUpstream(t, e)
	c, err := handshake(t, addr, signer("a").SignTLS(host), host, ca)
	if err != nil {
		t.Fatal(err)
	}
	const want = "forwarded\n"
	if got := roundTrip(t, c, want); got != want {
		t.Fatalf("echo %q, want %q", got, want)
	}
	if got := rem.calls.Load(); got != 0 {
		t.Errorf("Remote asked %d times, want 0", got)
	}
}

// TestTLSForward_BadPreambleClosed: a first line that is no valid preamble
// for the connection's server name closes it, even for a name this node
// routes: a preamble without a valid MAC grants nothing, not even what no
// preamble would.
func TestTLSForward_BadPreambleClosed(t *testing.T) {
	rem := &remotes{addr: "127.0.0.1:1"}
	e, addr := clusterNode(t, "b", rem)
	host, ca := tlsUpstream(t, e)
	stale := forward.Signer{Node: "a", Secret: peerSecret, Clock: func() time.Time {
		return time.Now().Add(-forward.MaxSkew - time.Minute)
	}}
	for name, preamble := range map[string][]byte{
		"wrong key":         forward.Signer{Node: "a", Secret: []byte("not the cluster's secret, at all")}.SignTLS(host),
		"stale":             stale.SignTLS(host),
		"other server name": signer("a").SignTLS("app.example.com"),
		"from itself":       signer("b").SignTLS(host),
		"garbage":           []byte("GET / HTTP/1.1\r\n"),
		"no newline":        []byte(strings.Repeat("S", ingress.MaxPreambleLen+10)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := handshake(t, addr, preamble, host, ca); err == nil {
				t.Fatal("handshake succeeded; want the connection closed")
			}
		})
	}
	if got := rem.calls.Load(); got != 0 {
		t.Errorf("Remote asked %d times, want 0", got)
	}
	// And the listener still serves a plain connection.
	if _, err := handshake(t, addr, nil, host, ca); err != nil {
		t.Fatalf("plain handshake after the refusals: %v", err)
	}
}

// TestTLS_PreambleWithoutClusterClosed: a node outside cluster mode (no
// Peers) closes a connection that starts with a preamble, valid or not.
func TestTLS_PreambleWithoutClusterClosed(t *testing.T) {
	e := newEnv(t, func(o *ingress.Options) { o.TLSAddr = "127.0.0.1:0" })
	host, ca := tlsUpstream(t, e)
	addr := e.r.TLSAddr().String()
	if _, err := handshake(t, addr, signer("a").SignTLS(host), host, ca); err == nil {
		t.Fatal("handshake succeeded; want a connection with a preamble closed")
	}
	if _, err := handshake(t, addr, nil, host, ca); err != nil {
		t.Fatalf("plain handshake: %v", err)
	}
}

// TestTLSForward_UnreachablePeerClosed: a Remote whose node does not
// answer closes the client's connection (within the dial timeout).
func TestTLSForward_UnreachablePeerClosed(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	_, addr := clusterNode(t, "a", &remotes{addr: gone.Addr().String()})
	if _, err := handshake(t, addr, nil, "app.example.com", nil); err == nil {
		t.Fatal("handshake succeeded; want the connection closed")
	}
}

// TestTLSForward_CloseCutsForwardedConnections: Close ends forwarded
// connections too (both sides count in the router's SNI connections).
func TestTLSForward_CloseCutsForwardedConnections(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	edge, edgeAddr := clusterNode(t, "a", &remotes{addr: peer.Addr().String()})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		handshake(t, edgeAddr, nil, "app.example.com", nil)
	}()
	up, err := peer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(up).ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	if err := edge.r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, up); err != nil {
		t.Fatalf("read after Close: %v, want EOF", err)
	}
}

func TestNew_RemoteNeedsPeers(t *testing.T) {
	_, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: newAgents(), Remote: (&remotes{}).remote})
	if err == nil {
		t.Fatal("New with Remote and no Peers succeeded")
	}
}
