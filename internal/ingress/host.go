package ingress

import (
	"net"
	"strconv"
	"strings"
)

// PreviewHost is the hostname of a sandbox port's preview URL,
// "<port>-<sandbox-id>.<domain>". The service adds the scheme and, in
// local mode, the daemon's listener port.
func PreviewHost(domain, sandboxID string, port int) string {
	return strconv.Itoa(port) + "-" + sandboxID + "." + domain
}

// parsePreviewHost splits a preview hostname (already normalized, no
// port) under domain into its sandbox id and port. ok is false for any
// host that does not have the preview shape; it says nothing about
// whether the route exists.
func parsePreviewHost(host, domain string) (sandboxID string, port int, ok bool) {
	label, found := strings.CutSuffix(host, "."+domain)
	if !found || strings.Contains(label, ".") {
		return "", 0, false
	}
	portStr, id, found := strings.Cut(label, "-")
	if !found || !validLabel(id) {
		return "", 0, false
	}
	port, ok = parsePort(portStr)
	return id, port, ok
}

// parsePort accepts a decimal port 1..65535 without sign or leading zero.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || !validPort(n) || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func validPort(n int) bool { return n >= 1 && n <= 65535 }

// normalizeHost lowercases a Host header or SNI name and drops a port
// and a trailing dot: "8080-sb-1.LocalHost.:7070" → "8080-sb-1.localhost".
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// validLabel reports whether s is a DNS label: 1..63 lowercase letters,
// digits and hyphens, not starting or ending with a hyphen. Sandbox ids
// are labels, so they can stand in hostnames and URL hosts.
func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
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

// validHostname reports whether s (normalized) is a DNS name of at least
// two labels.
func validHostname(s string) bool {
	if len(s) > 253 || !strings.Contains(s, ".") {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !validLabel(label) {
			return false
		}
	}
	return true
}
