package ingress

import (
	"context"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// Protocol is how an exposed port is reached from outside.
type Protocol string

const (
	// HTTP ports are reached through preview URLs and custom domains.
	HTTP Protocol = "http"
	// TCP ports are reached through a host port (see Router.ListenTCP).
	TCP Protocol = "tcp"
	// TLS ports are reached through the SNI listener, TLS untouched.
	TLS Protocol = "tls"
)

func (p Protocol) valid() bool { return p == HTTP || p == TCP || p == TLS }

// Port is an exposed sandbox port.
type Port struct {
	Number   int
	Protocol Protocol
	// Public ports need no authorization; private ones (the default)
	// need Options.Authorize to say yes.
	Public bool
}

// Target is where a request goes: one exposed port of one sandbox.
type Target struct {
	SandboxID string
	Port      Port
}

// Table is the route table: which sandboxes are installed, which of their
// ports are exposed, and which custom hostnames point at them. It holds
// data only; Router adds the traffic. Every change is a map update under
// one lock, so its cost does not grow with the number of routes. It is
// safe for concurrent use, and every change is idempotent.
type Table struct {
	mu        sync.RWMutex
	sandboxes map[string]*sandboxRoutes
	domains   map[string]binding // hostname → target
}

// sandboxRoutes is one sandbox's routes; its maps are made on first use,
// so installing a sandbox allocates one small struct.
type sandboxRoutes struct {
	ports   map[int]Port
	domains map[string]struct{}
}

type binding struct {
	sandboxID string
	port      int
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{sandboxes: map[string]*sandboxRoutes{}, domains: map[string]binding{}}
}

// Install makes a sandbox routable (none of its ports yet). Installing it
// again is a no-op. The id must be a DNS label (ErrInvalidRoute).
func (t *Table) Install(_ context.Context, sandboxID string) error {
	if !naming.ValidLabel(sandboxID) {
		return fmt.Errorf("%w: sandbox id %q is not a DNS label", ErrInvalidRoute, sandboxID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sandboxes[sandboxID] == nil {
		t.sandboxes[sandboxID] = &sandboxRoutes{}
	}
	return nil
}

// Remove forgets a sandbox with its ports and custom hostnames. Removing
// an absent sandbox is a no-op.
func (t *Table) Remove(_ context.Context, sandboxID string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	sb := t.sandboxes[sandboxID]
	if sb == nil {
		return nil
	}
	for host := range sb.domains {
		delete(t.domains, host)
	}
	delete(t.sandboxes, sandboxID)
	return nil
}

// Has reports whether a sandbox is installed.
func (t *Table) Has(sandboxID string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.sandboxes[sandboxID] != nil
}

// Len is the number of installed sandboxes.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.sandboxes)
}

// ExposePort adds or updates a port of an installed sandbox. Exposing it
// again with the same protocol is a no-op apart from taking the new
// Public flag; another protocol is ErrProtocolConflict and changes
// nothing. A sandbox that is not installed is ErrNotInstalled.
func (t *Table) ExposePort(sandboxID string, p Port) error {
	if !naming.ValidPort(p.Number) || !p.Protocol.valid() {
		return fmt.Errorf("%w: port %d protocol %q", ErrInvalidRoute, p.Number, p.Protocol)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sb := t.sandboxes[sandboxID]
	if sb == nil {
		return fmt.Errorf("expose %s port %d: %w", sandboxID, p.Number, ErrNotInstalled)
	}
	if old, ok := sb.ports[p.Number]; ok && old.Protocol != p.Protocol {
		return fmt.Errorf("expose %s port %d as %s (exposed as %s): %w", sandboxID, p.Number, p.Protocol, old.Protocol, ErrProtocolConflict)
	}
	if sb.ports == nil {
		sb.ports = map[int]Port{}
	}
	sb.ports[p.Number] = p
	return nil
}

// UnexposePort removes a port; removing an absent one is a no-op.
// Custom hostnames bound to it stay bound and answer 404 until the port
// is exposed again or they are unbound.
func (t *Table) UnexposePort(sandboxID string, port int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sb := t.sandboxes[sandboxID]; sb != nil {
		delete(sb.ports, port)
	}
}

// Lookup returns an exposed port of an installed sandbox.
func (t *Table) Lookup(sandboxID string, port int) (Port, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	sb := t.sandboxes[sandboxID]
	if sb == nil {
		return Port{}, false
	}
	p, ok := sb.ports[port]
	return p, ok
}

// Ports lists a sandbox's exposed ports in no particular order.
func (t *Table) Ports(sandboxID string) []Port {
	t.mu.RLock()
	defer t.mu.RUnlock()
	sb := t.sandboxes[sandboxID]
	if sb == nil {
		return nil
	}
	out := make([]Port, 0, len(sb.ports))
	for _, p := range sb.ports {
		out = append(out, p)
	}
	return out
}

// BindDomain points a custom hostname (normalized: lowercase, no trailing
// dot, no port) at a port of an installed sandbox. The same binding again
// is a no-op; the same sandbox with another port moves the binding;
// another sandbox is ErrHostnameConflict and changes nothing. The port
// does not have to be exposed yet, but traffic flows only while it is
// exposed with protocol http (or tls, for the SNI listener).
func (t *Table) BindDomain(hostname, sandboxID string, port int) error {
	if !naming.ValidHostname(hostname) || !naming.ValidPort(port) {
		return fmt.Errorf("%w: hostname %q port %d", ErrInvalidRoute, hostname, port)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sb := t.sandboxes[sandboxID]
	if sb == nil {
		return fmt.Errorf("bind %s: %w", hostname, ErrNotInstalled)
	}
	if old, ok := t.domains[hostname]; ok && old.sandboxID != sandboxID {
		return fmt.Errorf("bind %s to %s: %w", hostname, sandboxID, ErrHostnameConflict)
	}
	t.domains[hostname] = binding{sandboxID: sandboxID, port: port}
	if sb.domains == nil {
		sb.domains = map[string]struct{}{}
	}
	sb.domains[hostname] = struct{}{}
	return nil
}

// UnbindDomain removes a hostname if sandboxID holds it; a hostname that
// is absent or held by another sandbox is left alone (never undo another
// caller's binding).
func (t *Table) UnbindDomain(sandboxID, hostname string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.domains[hostname]; ok && b.sandboxID == sandboxID {
		delete(t.domains, hostname)
		delete(t.sandboxes[sandboxID].domains, hostname)
	}
}

// LookupDomain resolves a custom hostname to the exposed port it is bound
// to. ok is false when the hostname is unbound; bound is true when it is
// bound but its port is not exposed (the caller answers 404 rather than
// passing the request on).
func (t *Table) LookupDomain(hostname string) (target Target, ok, bound bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	b, bound := t.domains[hostname]
	if !bound {
		return Target{}, false, false
	}
	p, ok := t.sandboxes[b.sandboxID].ports[b.port]
	return Target{SandboxID: b.sandboxID, Port: p}, ok, true
}
