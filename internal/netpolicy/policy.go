// Package netpolicy is a sandbox's network policy — none, open, or
// restricted to an allow list, with a deny list over either — and the
// firewall that holds it on the host, where nothing in the sandbox can
// reach it.
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Mode is how much of the network a sandbox reaches.
type Mode string

const (
	// ModeNone: no network at all (the sandbox has only its loopback).
	ModeNone Mode = "none"
	// ModeOpen: anywhere but the deny list, link-local addresses (cloud
	// metadata services) and the host.
	ModeOpen Mode = "open"
	// ModeRestricted: only the allow list (and DNS), minus the deny list.
	ModeRestricted Mode = "restricted"
)

// Bounds of a policy.
const (
	maxRules   = 64
	maxHostLen = 253
)

// Policy is a sandbox's network policy.
type Policy struct {
	Mode Mode `json:"mode"`
	// Allow lists what a restricted sandbox may reach: CIDRs (an address
	// is its /32 or /128) and host names, honoured for HTTP (Host) and TLS
	// (SNI) on ports 80 and 443. A name "*.example.com" allows every name
	// under example.com (not example.com itself).
	Allow []string `json:"allow,omitempty"`
	// Deny lists CIDRs nothing reaches, whatever Allow says.
	Deny []string `json:"deny,omitempty"`
}

// ErrInvalid is a policy that cannot be enforced as written.
var ErrInvalid = errors.New("invalid network policy")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Normalize validates p and returns it in canonical form: a mode always
// set (empty is none), CIDRs masked and sorted, names lowercased and
// sorted, duplicates dropped.
func (p Policy) Normalize() (Policy, error) {
	switch p.Mode {
	case "":
		p.Mode = ModeNone
	case ModeNone, ModeOpen, ModeRestricted:
	default:
		return Policy{}, invalid("mode %q: must be none, open or restricted", p.Mode)
	}
	if len(p.Allow) > maxRules || len(p.Deny) > maxRules {
		return Policy{}, invalid("at most %d allow and %d deny rules", maxRules, maxRules)
	}
	switch {
	case p.Mode == ModeNone && (len(p.Allow) > 0 || len(p.Deny) > 0):
		return Policy{}, invalid("mode none takes no allow or deny rules")
	case p.Mode == ModeOpen && len(p.Allow) > 0:
		return Policy{}, invalid("mode open allows everything but the deny list: allow rules need mode restricted")
	}
	out := Policy{Mode: p.Mode}
	for _, a := range p.Allow {
		if pfx, err := parseCIDR(a); err == nil {
			out.Allow = append(out.Allow, pfx.String())
			continue
		}
		name, err := parseHost(a)
		if err != nil {
			return Policy{}, invalid("allow %q: neither a CIDR nor a host name", a)
		}
		out.Allow = append(out.Allow, name)
	}
	for _, d := range p.Deny {
		pfx, err := parseCIDR(d)
		if err != nil {
			return Policy{}, invalid("deny %q: %v", d, err)
		}
		out.Deny = append(out.Deny, pfx.String())
	}
	slices.Sort(out.Allow)
	slices.Sort(out.Deny)
	out.Allow, out.Deny = slices.Compact(out.Allow), slices.Compact(out.Deny)
	return out, nil
}

// HasNetwork reports whether the sandbox gets a network interface.
func (p Policy) HasNetwork() bool { return p.Mode == ModeOpen || p.Mode == ModeRestricted }

// CIDRs are p's allow and deny prefixes (p normalized).
func (p Policy) CIDRs() (allow, deny []netip.Prefix) {
	for _, a := range p.Allow {
		if pfx, err := netip.ParsePrefix(a); err == nil {
			allow = append(allow, pfx)
		}
	}
	for _, d := range p.Deny {
		if pfx, err := netip.ParsePrefix(d); err == nil { // always, for a normalized p
			deny = append(deny, pfx)
		}
	}
	return allow, deny
}

// Hosts are p's allowed host names (p normalized).
func (p Policy) Hosts() []string {
	var out []string
	for _, a := range p.Allow {
		if _, err := netip.ParsePrefix(a); err != nil {
			out = append(out, a)
		}
	}
	return out
}

// AllowsHost reports whether name (a Host header's or SNI's, port
// stripped) is one of p's host rules.
func (p Policy) AllowsHost(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, h := range p.Hosts() {
		if h == name {
			return true
		}
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			return true
		}
	}
	return false
}

// parseCIDR reads an IPv4 address or CIDR (an IPv4-mapped IPv6 one is
// read as the IPv4 it maps). IPv6 is refused: the sandboxes' network is
// IPv4 only, so an IPv6 rule could never be held as written.
func parseCIDR(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if addr, err := netip.ParseAddr(s); err == nil {
		if addr.Zone() != "" {
			return netip.Prefix{}, errors.New("an address with a zone")
		}
		pfx = netip.PrefixFrom(addr, addr.BitLen())
	} else if pfx, err = netip.ParsePrefix(s); err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR (%v)", err)
	}
	addr, bits := pfx.Addr(), pfx.Bits()
	if addr.Is4In6() {
		if bits < 96 {
			return netip.Prefix{}, errors.New("an IPv4-mapped prefix shorter than /96")
		}
		addr, bits = addr.Unmap(), bits-96
	}
	if !addr.Is4() {
		return netip.Prefix{}, errors.New("IPv6 rules are not supported: the sandboxes' network is IPv4 only")
	}
	out := netip.PrefixFrom(addr, bits).Masked()
	if !out.IsValid() {
		return netip.Prefix{}, errors.New("not a valid IPv4 CIDR")
	}
	return out, nil
}

// parseHost accepts a DNS name (letters, digits, '-', dots between
// labels of 1-63), optionally "*." first, and lowercases it.
func parseHost(s string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	rest := strings.TrimPrefix(name, "*.")
	if rest == "" || len(name) > maxHostLen || !strings.Contains(rest, ".") && rest != "localhost" {
		return "", errors.New("not a host name")
	}
	for _, label := range strings.Split(rest, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("not a host name")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", errors.New("not a host name")
			}
		}
	}
	return name, nil
}
