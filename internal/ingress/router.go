package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// Dialer opens a raw TCP stream to a port inside a sandbox. The service
// implements it over the agent tunnel (agent/tunnel.Dial on a fresh agent
// socket connection); the ingress knows nothing of runtimes or tokens. A
// returned connection that implements CloseWrite gets half-closes.
type Dialer interface {
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
}

// Options configure a Router.
type Options struct {
	// Domain is the preview domain: "<port>-<sandbox-id>.<Domain>".
	// Local mode uses "localhost". Required.
	Domain string
	// Dialer reaches sandbox ports. Required.
	Dialer Dialer
	// Authorize decides whether a request may reach a private port (the
	// daemon checks its API token, header or cookie). Nil refuses every
	// request to a private port.
	Authorize func(r *http.Request) bool
	// CredentialCookie names a cookie that carries the daemon's token; it
	// is removed from proxied requests, like the Authorization and
	// X-Sandboxd-Token headers. Empty: no cookie is removed.
	CredentialCookie string
	// BindAddr is the address ListenTCP binds host ports on. Default
	// 127.0.0.1.
	BindAddr string
	// TLSAddr is the address of the SNI passthrough listener (for
	// example 127.0.0.1:7443), bound lazily on the first TCP or TLS
	// exposure. Empty: TLS exposure is unavailable.
	TLSAddr string
	// Logger receives proxy and listener errors. Default: discard.
	Logger *slog.Logger
	// Remote, in cluster mode, names the SNI listener (host:port) of the
	// node that serves a server name this node does not route: the SNI
	// listener carries the ClientHello there behind a preamble Peers
	// signs. Nil (a single node): such a connection is closed.
	Remote func(serverName string) (addr string, ok bool)
	// Peers signs the preamble of the connections this node forwards and
	// verifies that of the connections it is forwarded. Required with
	// Remote. Nil: a connection that starts with a preamble is closed.
	Peers PeerSigner
	// Wake is asked when a dial of an exposed port fails, once the
	// request passed the port's checks (a private port's authorization):
	// it resumes the sandbox if it is paused with an auto-resume, and
	// ok says the dial is worth one more try (the sandbox runs now). A
	// *WakeError is a wake that failed: the request is answered with it.
	// Nil: a failed dial is the proxy's error, as always.
	Wake func(ctx context.Context, sandboxID string) (ok bool, err error)
}

// WakeError is a failed wake's answer (Options.Wake): the HTTP status, the
// API's error code and message, and whether a retry may succeed.
type WakeError struct {
	Status    int
	Code      string
	Message   string
	Retryable bool
}

func (e *WakeError) Error() string { return "wake: " + e.Message }

// PeerSigner authenticates TLS connections that cluster nodes forward to
// each other's SNI listener (forward.Signer implements it). A preamble is
// one line, at most MaxPreambleLen bytes with its newline, whose first
// byte is not 0x16 (a TLS handshake record's): the receiver tells it from
// a ClientHello by that byte.
type PeerSigner interface {
	// SignTLS returns the preamble for a connection to serverName.
	SignTLS(serverName string) []byte
	// VerifyTLS reports whether line, newline included, is a valid
	// preamble for serverName, and from which node.
	VerifyTLS(line []byte, serverName string) (from string, ok bool)
}

// MaxPreambleLen bounds the preamble line the SNI listener reads before a
// forwarded ClientHello (forward.MaxPreambleLen).
const MaxPreambleLen = 256

// dialTimeout bounds one dial of a sandbox port for the L4 listeners
// (HTTP dials are bounded by the request's context).
const dialTimeout = 10 * time.Second

// Router routes traffic to sandbox ports: preview hosts and custom
// domains over HTTP (see Wrap), host ports over TCP (ListenTCP) and TLS
// by SNI. It implements the service's Router (Install, Remove). Create it
// with New and stop it with Close.
type Router struct {
	table     *Table
	domain    string
	dialer    Dialer
	authorize func(*http.Request) bool
	cookie    string
	bindAddr  string
	tlsAddr   string
	log       *slog.Logger
	remote    func(string) (string, bool)
	peers     PeerSigner
	wake      func(context.Context, string) (bool, error)

	proxy     *httputil.ReverseProxy
	transport *http.Transport
	upstream  upstreams // live connections to sandbox ports

	l4          latch
	bootstrapL4 func(context.Context) error // r.startL4; replaced by tests

	mu        sync.Mutex // guards the fields below
	closed    bool
	tlsLn     net.Listener
	tcp       map[int]*tcpListener            // by host port
	tcpBySbx  map[string]map[int]*tcpListener // sandbox → host port → listener
	sniConns  connSet                         // connections accepted by the SNI listener
	wg        sync.WaitGroup                  // accept loops and connection handlers
	lifetime  context.Context                 // cancelled by Close
	cancelAll context.CancelFunc
}

// New returns a router with an empty table. It binds nothing: the L4
// listeners start on the first TCP or TLS exposure.
func New(opts Options) (*Router, error) {
	if opts.Dialer == nil {
		return nil, errors.New("ingress.New: Dialer is required")
	}
	if opts.Remote != nil && opts.Peers == nil {
		return nil, errors.New("ingress.New: Remote needs Peers")
	}
	domain := naming.NormalizeHost(opts.Domain)
	if domain != "localhost" && !naming.ValidHostname(domain) {
		return nil, fmt.Errorf("ingress.New: invalid domain %q", opts.Domain)
	}
	r := &Router{
		table:     NewTable(),
		domain:    domain,
		dialer:    opts.Dialer,
		authorize: opts.Authorize,
		cookie:    opts.CredentialCookie,
		bindAddr:  opts.BindAddr,
		tlsAddr:   opts.TLSAddr,
		log:       opts.Logger,
		remote:    opts.Remote,
		peers:     opts.Peers,
		wake:      opts.Wake,
		tcp:       map[int]*tcpListener{},
		tcpBySbx:  map[string]map[int]*tcpListener{},
	}
	if r.bindAddr == "" {
		r.bindAddr = "127.0.0.1"
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.upstream.init()
	r.lifetime, r.cancelAll = context.WithCancel(context.Background())
	r.bootstrapL4 = r.startL4
	r.transport, r.proxy = r.newProxy()
	return r, nil
}

// Domain is the normalized preview domain.
func (r *Router) Domain() string { return r.domain }

// PreviewHost is the preview hostname of a sandbox port under the
// router's domain.
func (r *Router) PreviewHost(sandboxID string, port int) string {
	return naming.PreviewHost(r.domain, sandboxID, port)
}

// Install makes a sandbox routable, with no ports exposed yet. It is
// idempotent and a map update.
func (r *Router) Install(ctx context.Context, sandboxID string) error {
	return r.table.Install(ctx, sandboxID)
}

// Remove makes a sandbox unroutable: its ports, custom hostnames and
// host-port listeners go, and its live connections are closed. It is
// idempotent; when it returns, the sandbox's host ports are free.
func (r *Router) Remove(ctx context.Context, sandboxID string) error {
	_ = r.table.Remove(ctx, sandboxID)
	r.mu.Lock()
	ls := r.tcpBySbx[sandboxID]
	for hp := range ls {
		delete(r.tcp, hp)
	}
	delete(r.tcpBySbx, sandboxID)
	r.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	r.upstream.closeSandbox(sandboxID)
	return nil
}

// ExposePort makes a port of an installed sandbox reachable: protocol
// http through its preview host and custom domains, tls through the SNI
// listener, tcp through the host port the caller then binds with
// ListenTCP. Exposing it again is a no-op that takes the new Public flag;
// another protocol is ErrProtocolConflict. Exposing tcp or tls starts the
// L4 machinery if it is not running; a failed start is ErrL4Unavailable,
// changes nothing, and the next call tries again.
func (r *Router) ExposePort(ctx context.Context, sandboxID string, p Port) error {
	if p.Protocol == TLS && r.tlsAddr == "" {
		return fmt.Errorf("expose %s port %d: %w: no TLS listener address configured", sandboxID, p.Number, ErrL4Unavailable)
	}
	if p.Protocol == TCP || p.Protocol == TLS {
		if err := r.ensureL4(ctx); err != nil {
			return fmt.Errorf("expose %s port %d: %w", sandboxID, p.Number, err)
		}
	}
	return r.table.ExposePort(sandboxID, p)
}

// UnexposePort makes a port unreachable: its route, its host-port
// listeners and its live connections go. It is idempotent.
func (r *Router) UnexposePort(_ context.Context, sandboxID string, port int) error {
	r.table.UnexposePort(sandboxID, port)
	r.mu.Lock()
	var gone []*tcpListener
	for hp, l := range r.tcpBySbx[sandboxID] {
		if l.port == port {
			gone = append(gone, l)
			delete(r.tcp, hp)
			delete(r.tcpBySbx[sandboxID], hp)
		}
	}
	r.mu.Unlock()
	for _, l := range gone {
		l.close()
	}
	r.upstream.closePort(sandboxID, port)
	return nil
}

// Installed is the number of installed (routable) sandboxes.
func (r *Router) Installed() int { return r.table.Len() }

// Ports lists a sandbox's exposed ports in no particular order.
func (r *Router) Ports(sandboxID string) []Port { return r.table.Ports(sandboxID) }

// BindDomain routes a custom hostname to a port of an installed sandbox;
// see Table.BindDomain for the contract. Hostnames are case-insensitive;
// one of the preview shape under the router's domain is ErrInvalidRoute.
func (r *Router) BindDomain(_ context.Context, hostname, sandboxID string, port int) error {
	host := naming.NormalizeHost(hostname)
	if _, _, ok := naming.ParsePreviewHost(host, r.domain); ok {
		return fmt.Errorf("%w: %q is a preview hostname", ErrInvalidRoute, hostname)
	}
	return r.table.BindDomain(host, sandboxID, port)
}

// UnbindDomain removes a custom hostname if sandboxID holds it; it is
// idempotent and never touches another sandbox's binding. Live
// connections to the port stay open (the port is still exposed).
func (r *Router) UnbindDomain(_ context.Context, sandboxID, hostname string) error {
	r.table.UnbindDomain(sandboxID, naming.NormalizeHost(hostname))
	return nil
}

// verdict is what the router makes of a hostname.
type verdict int

const (
	notOurs  verdict = iota // not a preview host nor a bound custom domain
	notFound                // ours, but no exposed port of that protocol behind it
	found
)

// resolve maps a Host header or SNI name to an exposed port of protocol
// proto. A preview host with no such port is notFound with the sandbox
// and port it names in the Target (a custom domain's, with none).
func (r *Router) resolve(hostport string, proto Protocol) (Target, verdict) {
	host := naming.NormalizeHost(hostport)
	if id, port, ok := naming.ParsePreviewHost(host, r.domain); ok {
		p, ok := r.table.Lookup(id, port)
		if !ok || p.Protocol != proto {
			return Target{SandboxID: id, Port: Port{Number: port}}, notFound
		}
		return Target{SandboxID: id, Port: p}, found
	}
	t, ok, bound := r.table.LookupDomain(host)
	switch {
	case !bound:
		return Target{}, notOurs
	case !ok || t.Port.Protocol != proto:
		return Target{}, notFound
	}
	return t, found
}

// Routable reports whether host (a preview host or custom domain) leads
// to an exposed http port right now: the decision for issuing a
// certificate on demand.
func (r *Router) Routable(host string) bool {
	_, v := r.resolve(host, HTTP)
	return v == found
}

// Close stops the L4 listeners, closes every live connection to a sandbox
// port and waits for the router's goroutines. HTTP requests in flight
// belong to the daemon's server; their upstream connections are closed.
// Calls after Close fail with ErrClosed where they would start something.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.cancelAll()
	tlsLn, tcp := r.tlsLn, r.tcp
	r.tcp, r.tcpBySbx = map[int]*tcpListener{}, map[string]map[int]*tcpListener{}
	r.mu.Unlock()

	var err error
	if tlsLn != nil {
		err = tlsLn.Close()
	}
	for _, l := range tcp {
		l.close()
	}
	r.sniConns.closeAll()
	r.upstream.closeAll()
	r.transport.CloseIdleConnections()
	r.wg.Wait()
	return err
}
