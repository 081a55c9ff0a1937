package forward

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// RefKind says what a request names.
type RefKind int

// The kinds of Ref.
const (
	None    RefKind = iota // nothing cluster-wide: served where it lands
	Sandbox                // one sandbox, by ID or Name
	Create                 // a create: placed (Locator.Place)
	List                   // a list of sandboxes (served locally for now)
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
	case List:
		return "list"
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
	// Name is an idOrName segment that is not an id: a DNS label not
	// starting with "sb-" (native v1, Daytona and the E2B control plane
	// resolve names too, per owner).
	Name string
	// Host is, for Kind Host, the normalized Host header to resolve as a
	// custom domain.
	Host string
	// Port is the sandbox port when the ref came from a preview host
	// "<port>-<id>.<domain>"; else 0.
	Port int
	// PathKind is, for Kind Host, what the path alone names (Create,
	// Sandbox with ID or Name, List, None): a Host that no sandbox has
	// bound is an API host the node was not told of, and the request is
	// the API's, routed by its path.
	PathKind RefKind
}

// E2B's single-host routing header (internal/api/e2b).
const headerE2BSandboxID = "E2b-Sandbox-Id"

// RefOf says what r names, mirroring the order in which the daemon's
// handler (internal/daemon buildHandler) routes one listener:
//
//  1. A preview host "<port>-<id>.<domain>" (any port, 49983 and 49999
//     included) names that sandbox, whatever the path or headers; Port is
//     set. One whose label is not a sandbox id names nothing.
//  2. A Host that is not the API's — not an IP literal, "localhost", one
//     of apiHosts, the preview domain or a name under it, and a valid DNS
//     name — is Kind Host: a custom domain wins over the path, as in the
//     ingress. ID or Name is also set when the request would name a
//     sandbox by rule 3, for the Locator to use when Host is bound to no
//     sandbox (an API host not listed in apiHosts).
//  3. An E2b-Sandbox-Id header names that sandbox whatever the path (the
//     E2B facade claims it first); a value that is not an id names
//     nothing. Then the paths:
//     - native: POST /v1/sandboxes is Create, GET (HEAD) is List;
//     /v1/sandboxes/{idOrName}[/…] is Sandbox.
//     - E2B: POST /sandboxes and POST /v2/sandboxes are Create, GET
//     (HEAD) List; GET /sandboxes/metrics (every sandbox's metrics) is
//     None; /sandboxes/{idOrName}[/…] and /v2/sandboxes/{idOrName}[/…]
//     are Sandbox (the facade resolves names like the service).
//     - Daytona: POST /daytona/api/sandbox is Create, GET (HEAD) List;
//     /daytona/api/sandbox/{idOrName}[/…] and
//     /daytona/api/toolbox/{idOrName}[/…] are Sandbox.
//  4. Anything else is None.
//
// A segment names a sandbox by ID when it is "sb-" and 16 lowercase hex
// digits, by Name when it is a DNS label not starting with "sb-"; any
// other segment names nothing (the edges answer 404 for it wherever it
// is served). A path ServeMux would redirect (not clean) names nothing.
// RefOf reads only r.Host, r.URL, r.Method and that header.
func RefOf(r *http.Request, domain string, apiHosts []string) Ref {
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
	ref := pathRef(r)
	if customDomain(host, domain, apiHosts) {
		h := Ref{Kind: Host, Host: host, PathKind: ref.Kind}
		if ref.Kind == Sandbox {
			h.ID, h.Name = ref.ID, ref.Name
		}
		return h
	}
	return ref
}

// pathRef is rule 3 of RefOf: the E2B header, then the path.
func pathRef(r *http.Request) Ref {
	if v := r.Header.Get(headerE2BSandboxID); v != "" {
		if !validID(v) {
			return Ref{}
		}
		return Ref{Kind: Sandbox, ID: v}
	}
	if r.URL == nil {
		return Ref{}
	}
	seg, ok := segments(r.URL.EscapedPath())
	if !ok {
		return Ref{}
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	collection := func() Ref {
		switch {
		case r.Method == http.MethodPost:
			return Ref{Kind: Create}
		case read:
			return Ref{Kind: List}
		}
		return Ref{}
	}
	switch {
	case hasPrefix(seg, "v1", "sandboxes"):
		seg = seg[2:]
	case hasPrefix(seg, "v2", "sandboxes"):
		seg = seg[2:]
	case hasPrefix(seg, "sandboxes"):
		if len(seg) == 2 && seg[1] == "metrics" && read {
			return Ref{} // GET /sandboxes/metrics: E2B's batch metrics
		}
		seg = seg[1:]
	case hasPrefix(seg, "daytona", "api", "sandbox"):
		seg = seg[3:]
	case hasPrefix(seg, "daytona", "api", "toolbox"):
		if len(seg) == 3 {
			return Ref{}
		}
		seg = seg[3:]
	default:
		return Ref{}
	}
	if len(seg) == 0 {
		return collection()
	}
	return sandboxRef(seg[0])
}

// sandboxRef is the Ref of an idOrName path segment.
func sandboxRef(s string) Ref {
	switch {
	case validID(s):
		return Ref{Kind: Sandbox, ID: s}
	case strings.HasPrefix(s, "sb-") || !naming.ValidLabel(s):
		return Ref{} // the service reads "sb-…" as an id, and this one is none
	}
	return Ref{Kind: Sandbox, Name: s}
}

// segments splits an escaped absolute path into its unescaped segments,
// as net/http.ServeMux matches them. ok is false for a path the mux would
// redirect rather than serve (empty segments, "." or "..") or that does
// not unescape.
func segments(escaped string) (seg []string, ok bool) {
	rest, found := strings.CutPrefix(escaped, "/")
	if !found {
		return nil, false
	}
	if rest == "" {
		return nil, true
	}
	for part := range strings.SplitSeq(rest, "/") {
		s, err := url.PathUnescape(part)
		if err != nil || s == "" || s == "." || s == ".." {
			return nil, false
		}
		seg = append(seg, s)
	}
	return seg, true
}

func hasPrefix(seg []string, prefix ...string) bool {
	if len(seg) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		if seg[i] != p {
			return false
		}
	}
	return true
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
