package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Protocol is how an exposed port is reached from outside.
type Protocol string

// The protocols of an exposed port.
const (
	// ProtocolHTTP routes by host name: <port>-<sandbox id>.<domain>.
	ProtocolHTTP Protocol = "http"
	// ProtocolTCP forwards raw TCP from a host port taken from a pool.
	ProtocolTCP Protocol = "tcp"
	// ProtocolTLS routes TLS connections by SNI.
	ProtocolTLS Protocol = "tls"
)

// ExposePortRequest asks for a sandbox port to be reachable from outside.
type ExposePortRequest struct {
	Port     int      `json:"port"`
	Protocol Protocol `json:"protocol"`
	// Public makes the port reachable without a token.
	Public bool `json:"public,omitempty"`
}

// Port is an exposed sandbox port.
type Port struct {
	Port     int      `json:"port"`
	Protocol Protocol `json:"protocol"`
	Public   bool     `json:"public"`
	URL      string   `json:"url"`
	// HostPort is the daemon host's port for ProtocolTCP; 0 otherwise.
	HostPort int `json:"host_port,omitempty"`
}

// ExposePort exposes a sandbox port and returns how to reach it. Exposing
// a port again with the same protocol returns the same result, so the
// call is retried on transient failures; another protocol for a port
// already exposed fails with ErrConflict.
func (c *Client) ExposePort(ctx context.Context, id string, req ExposePortRequest) (*Port, error) {
	var p Port
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "ports"}, retry: retrySafe}
	if err := c.do(ctx, r, req, &p); err != nil {
		return nil, fmt.Errorf("expose port %d of sandbox %q: %w", req.Port, id, err)
	}
	return &p, nil
}

// ListPorts returns the exposed ports of a sandbox.
func (c *Client) ListPorts(ctx context.Context, id string) ([]Port, error) {
	var out struct {
		Items []Port `json:"items"`
	}
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes", id, "ports"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list ports of sandbox %q: %w", id, err)
	}
	return out.Items, nil
}

// UnexposePort stops exposing a sandbox port. It fails with ErrNotFound
// when the port is not exposed; as with DestroySandbox, a retry that finds
// it gone after an attempt that may have reached the daemon succeeds.
func (c *Client) UnexposePort(ctx context.Context, id string, port int) error {
	r := &request{method: http.MethodDelete, segs: []string{"v1", "sandboxes", id, "ports", strconv.Itoa(port)}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("unexpose port %d of sandbox %q: %w", port, id, err)
	}
	return nil
}

// Domain is a custom host name bound to a sandbox port. It routes only
// once Verified: until then the DNS TXT record Verification names must
// hold Verification.Value (then call VerifyDomain), or an admin binds it.
type Domain struct {
	Hostname     string       `json:"hostname"`
	Port         int          `json:"port"`
	SandboxID    string       `json:"sandbox_id"`
	Verified     bool         `json:"verified"`
	Verification Verification `json:"verification"`
}

// Verification is the DNS record that proves control of a custom domain.
type Verification struct {
	Type  string `json:"type"` // "TXT"
	Name  string `json:"name"` // _sandboxd-challenge.<hostname>
	Value string `json:"value"`
	// Error says why the last look-up did not verify the domain.
	Error string `json:"error,omitempty"`
}

// AddDomain binds hostname to a sandbox port: pending (Verified false,
// nothing routes) until its TXT record is found, verified at once for an
// admin token. A host name this sandbox holds on another port, or another
// sandbox holds verified, fails with ErrHostnameConflict.
//
// It is retried on transient failures. If the daemon answers
// hostname_conflict, AddDomain lists the sandbox's domains, and when the
// host name is already bound to this sandbox and port (by an earlier
// attempt or an earlier call) it returns that binding: adding a domain
// that is already there succeeds.
func (c *Client) AddDomain(ctx context.Context, id, hostname string, port int) (*Domain, error) {
	var d Domain
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "domains"}, retry: retrySafe}
	body := struct {
		Hostname string `json:"hostname"`
		Port     int    `json:"port"`
	}{hostname, port} // the API takes these two fields only: the sandbox is in the path
	err := c.do(ctx, r, body, &d)
	if errors.Is(err, ErrHostnameConflict) {
		if have, lerr := c.ListDomains(ctx, id); lerr == nil {
			for _, h := range have {
				if h.Hostname == hostname && h.Port == port {
					return &h, nil
				}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("add domain %s to sandbox %q: %w", hostname, id, err)
	}
	return &d, nil
}

// VerifyDomain asks the daemon to look up hostname's TXT record now and
// returns the binding: Verified when the record holds its value, else
// still pending with Verification.Error saying what was found. The daemon
// also looks again by itself for an hour after AddDomain or the last
// VerifyDomain. It is retried on transient failures (a DNS server that
// does not answer is ErrUnavailable).
func (c *Client) VerifyDomain(ctx context.Context, id, hostname string) (*Domain, error) {
	var d Domain
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "domains", hostname, "verify"}, retry: retrySafe}
	if err := c.do(ctx, r, struct{}{}, &d); err != nil {
		return nil, fmt.Errorf("verify domain %s of sandbox %q: %w", hostname, id, err)
	}
	return &d, nil
}

// ListDomains returns the custom domains of a sandbox.
func (c *Client) ListDomains(ctx context.Context, id string) ([]Domain, error) {
	var out struct {
		Items []Domain `json:"items"`
	}
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes", id, "domains"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list domains of sandbox %q: %w", id, err)
	}
	return out.Items, nil
}

// RemoveDomain removes a custom domain from a sandbox. It fails with
// ErrNotFound when the domain is not bound to it; as with DestroySandbox,
// a retry that finds it gone after an attempt that may have reached the
// daemon succeeds.
func (c *Client) RemoveDomain(ctx context.Context, id, hostname string) error {
	r := &request{method: http.MethodDelete, segs: []string{"v1", "sandboxes", id, "domains", hostname}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("remove domain %s from sandbox %q: %w", hostname, id, err)
	}
	return nil
}
