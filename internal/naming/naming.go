// Package naming holds the rules for the names sandboxd hands out and
// reads back: DNS labels (sandbox ids, sandbox names, volume names), DNS
// hostnames (custom domains, the preview domain) and preview hosts
// ("<port>-<sandbox-id>.<domain>"). Each rule lives here once; every
// package that checks or parses such a name calls these functions.
//
// The rules:
//
//   - A label is 1..63 bytes of lowercase ASCII letters, digits and
//     hyphens, not starting or ending with a hyphen. Uppercase is not a
//     label: callers lowercase input that is case-insensitive (hosts)
//     and reject input that is not (names, ids).
//   - A hostname is at most 253 bytes and at least two labels.
//   - A port is decimal 1..65535, no sign, no leading zero.
//   - A preview host is exactly one label "<port>-<id>" directly under the
//     domain; the id is a label. Hosts and domains are compared after
//     NormalizeHost (case, a trailing dot and a :port do not matter).
package naming

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// MaxLabel is the longest DNS label (RFC 1035).
const MaxLabel = 63

// MaxHostname is the longest DNS name in text form, without a trailing dot.
const MaxHostname = 253

// ValidLabel reports whether s is a DNS label: 1..63 lowercase letters,
// digits and hyphens, not starting or ending with a hyphen. Sandbox ids,
// sandbox names and volume names are labels, so they can stand in
// hostnames, container names and path elements.
func ValidLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxLabel || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidHostname reports whether s is a DNS name of at least two labels,
// at most 253 bytes. It does not normalize: "App.example.com" and
// "app.example.com." are not valid (see NormalizeHost). It says nothing
// about IP literals: "10.0.0.1" is four labels.
func ValidHostname(s string) bool {
	if len(s) > MaxHostname || !strings.Contains(s, ".") {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !ValidLabel(label) {
			return false
		}
	}
	return true
}

// ValidPort reports whether n is a TCP port a sandbox can expose: 1..65535.
func ValidPort(n int) bool { return n >= 1 && n <= 65535 }

// NormalizeHost lowercases a Host header or SNI name and drops a :port and
// one trailing dot: "8080-sb-1.LocalHost.:7070" → "8080-sb-1.localhost".
func NormalizeHost(h string) string {
	if strings.Contains(h, ":") {
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// PreviewHost is the hostname of a sandbox port's preview URL,
// "<port>-<sandbox-id>.<domain>". Callers add the scheme and, in local
// mode, the daemon's listener port. It does not validate; for a valid id
// and port and a normalized domain, ParsePreviewHost inverts it.
func PreviewHost(domain, sandboxID string, port int) string {
	return strconv.Itoa(port) + "-" + sandboxID + "." + domain
}

// ParsePreviewHost splits a preview host "<port>-<sandbox-id>.<domain>"
// into its sandbox id and port. host may be a raw Host header or SNI name
// (any case, a trailing dot, a :listen-port); domain is normalized the
// same way and must not be empty. ok is false for any host without the
// preview shape (see the package rules); it says nothing about whether
// the sandbox or the route exists.
func ParsePreviewHost(host, domain string) (sandboxID string, port int, ok bool) {
	host, domain = NormalizeHost(host), NormalizeHost(domain)
	if domain == "" {
		return "", 0, false
	}
	label, found := strings.CutSuffix(host, "."+domain)
	if !found || strings.Contains(label, ".") {
		return "", 0, false
	}
	portStr, id, found := strings.Cut(label, "-")
	if !found || !ValidLabel(id) {
		return "", 0, false
	}
	port, ok = parsePort(portStr)
	if !ok {
		return "", 0, false
	}
	return id, port, true
}

// parsePort accepts a decimal port 1..65535 without sign or leading zero.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, ValidPort(n)
}

// IsLoopbackHost reports whether host, with a port or without, names this
// host's loopback: "localhost" or a loopback address.
func IsLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
