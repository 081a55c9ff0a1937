package forward

import (
	"net"
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// RefKind says what a request names.
type RefKind int

// The kinds of Ref.
const (
	None    RefKind = iota // nothing cluster-wide: served where it lands
	Sandbox                // one sandbox, by ID or Name
	Create                 // a create: served here, where its edge places it
	Host                   // a custom domain (Ref.Host)
)

func (k RefKind) String() string {
	switch k {
	case None:
		return "none"
	case Sandbox:
		return "sandbox"
	case Create:
		return "create"
	case Host:
		return "host"
	}
	return "RefKind(?)"
}

// Ref is what a request names, as far as routing goes.
type Ref struct {
	Kind RefKind
	// ID is a sandbox id ("sb-" and 16 lowercase hex digits) when the
	// request names one by id. Never anything else.
	ID string
	// Name is a sandbox the request names that is not an id: a DNS label
	// not starting with "sb-" (resolved per owner).
	Name string
	// Host is, for Kind Host, the normalized Host header to resolve as a
	// custom domain.
	Host string
	// Port is the sandbox port when the ref came from a preview host
	// "<port>-<id>.<domain>"; else 0.
	Port int
	// PathKind is, for Kind Host, what the request names without its
	// Host (Create, Sandbox with ID or Name, None): a Host that no
	// sandbox has bound is an API host the node was not told of, and the
	// request is the API's, routed as if it had none.
	PathKind RefKind
}

// Route is what the API edges registered (package internal/api/router,
// composed by the daemon): the sandbox r names by its path or headers,
// by id or name ("" for none), and whether r is a create. This package
// knows no edge's URLs.
type Route func(r *http.Request) (sandbox string, create bool)

// RefOf says what r names, mirroring the order in which the daemon's
// handler routes one listener:
//
//  1. A preview host "<port>-<id>.<domain>" (any port) names that
//     sandbox, whatever the path or headers; Port is set. One whose label
//     is not a sandbox id names nothing.
//  2. A Host that is not the API's — not an IP literal, "localhost", one
//     of apiHosts, the preview domain or a name under it, and a valid DNS
//     name — is Kind Host: a custom domain wins over the path, as in the
//     ingress. ID or Name is also set when route names a sandbox, for the
//     Locator to use when Host is bound to no sandbox (an API host not
//     listed in apiHosts).
//  3. Else what route says: Create, or Sandbox, or None.
//
// What route names is a sandbox by ID when it is "sb-" and 16 lowercase
// hex digits, by Name when it is a DNS label not starting with "sb-";
// anything else names nothing (the edges answer 404 for it wherever it is
// served). A nil route names nothing. RefOf reads r.Host and whatever
// route reads.
func RefOf(r *http.Request, domain string, apiHosts []string, route Route) Ref {
	host := naming.NormalizeHost(r.Host)
	domain = naming.NormalizeHost(domain)
	if domain != "" {
		if id, port, ok := naming.ParsePreviewHost(host, domain); ok {
			if !validID(id) {
				return Ref{}
			}
			return Ref{Kind: Sandbox, ID: id, Port: port}
		}
	}
	ref := routeRef(r, route)
	if customDomain(host, domain, apiHosts) {
		h := Ref{Kind: Host, Host: host, PathKind: ref.Kind}
		if ref.Kind == Sandbox {
			h.ID, h.Name = ref.ID, ref.Name
		}
		return h
	}
	return ref
}

// routeRef is rule 3 of RefOf.
func routeRef(r *http.Request, route Route) Ref {
	if route == nil {
		return Ref{}
	}
	sandbox, create := route(r)
	switch {
	case create:
		return Ref{Kind: Create}
	case sandbox == "":
		return Ref{}
	}
	return sandboxRef(sandbox)
}

// sandboxRef is the Ref of an idOrName.
func sandboxRef(s string) Ref {
	switch {
	case validID(s):
		return Ref{Kind: Sandbox, ID: s}
	case strings.HasPrefix(s, "sb-") || !naming.ValidLabel(s):
		return Ref{} // the service reads "sb-…" as an id, and this one is none
	}
	return Ref{Kind: Sandbox, Name: s}
}

// idLen is len("sb-") + 16 hex digits.
const idLen = 3 + 16

// validID reports whether s is a sandbox id as the service makes them:
// "sb-" and 16 lowercase hex digits.
func validID(s string) bool {
	if len(s) != idLen || !strings.HasPrefix(s, "sb-") {
		return false
	}
	for i := 3; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// customDomain reports whether host (normalized) could be a sandbox's
// custom domain: the service binds only DNS names of two labels or more
// that are not IP literals, not the daemon's own hosts and not in the
// preview domain (service.AddDomain).
func customDomain(host, domain string, apiHosts []string) bool {
	if !naming.ValidHostname(host) || net.ParseIP(host) != nil {
		return false
	}
	if domain != "" && (host == domain || strings.HasSuffix(host, "."+domain)) {
		return false
	}
	for _, a := range apiHosts {
		if naming.NormalizeHost(a) == host {
			return false
		}
	}
	return true
}
