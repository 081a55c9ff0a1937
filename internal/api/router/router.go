// Package router is what the API edges tell the daemon's router, and the
// edges' side of cluster placement (docs/cluster.md, "Placement and
// forwarding").
//
// # Registration
//
// Each edge (internal/api/v1, e2b, daytona) answers one question of a
// request with a small function of its own: which sandbox, if any, its
// path or headers name (Ref.Sandbox, an id or a name as the edge's route
// has it), and whether it is a create. Of composes them in the order the
// daemon's handler tries the edges. The cluster's forwarder
// (internal/cluster/forward) forwards by that answer alone and knows no
// edge's URLs; a new route or field is the edge's change only.
//
// # Placement
//
// The router never places a create: it cannot read a body. The edge
// decodes the create into the service's typed request as it always does,
// then asks Placer.Elsewhere, which asks the service (PlaceCreate: volumes
// pin a create here, template holders are preferred, a key binds its
// retries to one node) and, when the create belongs on another node,
// forwards the original request there (its body as the client sent it,
// kept by the forwarder as the edge read it), signed by this node, so
// that the receiving node serves it without placing it again.
package router

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Ref is what an edge says a request names.
type Ref struct {
	// Sandbox is the sandbox the request is for, by id or name, as the
	// edge's path or header spells it ("" for none). The router checks
	// its shape (an id, else a name the service could resolve); the edge
	// need not.
	Sandbox string
	// Create is a create: placed by the service (Placer), never by the
	// router.
	Create bool
	// Destroy is the destroy of Sandbox itself.
	Destroy bool
	// SaysLost is set by an edge that tells a lost sandbox's owner so
	// (410; its Destroy frees its keys and answers 204) rather than
	// answering not found: the native API.
	SaysLost bool
}

// Edge is an API edge as the router sees it: whether a request is its
// (Match) and what it names (Route).
type Edge interface {
	Match(r *http.Request) bool
	Route(r *http.Request) Ref
}

// Func is an edge's Route alone.
type Func func(r *http.Request) Ref

// Of is the router's view of edges tried in order, then of fallback (the
// edge that serves what no other matches): the Ref of the first edge that
// matches r.
func Of(fallback Func, edges ...Edge) Func {
	return func(r *http.Request) Ref {
		for _, e := range edges {
			if e.Match(r) {
				return e.Route(r)
			}
		}
		return fallback(r)
	}
}

// Collection is the Ref of a request to a collection of sandboxes: a
// POST creates, anything else names none.
func Collection(r *http.Request) Ref {
	return Ref{Create: r.Method == http.MethodPost}
}

// Segments splits an escaped absolute path into its unescaped segments,
// as net/http.ServeMux matches them. ok is false for a path the mux would
// redirect rather than serve (empty segments, "." or "..") or that does
// not unescape: such a path names nothing.
func Segments(escaped string) (seg []string, ok bool) {
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

// Under returns what follows prefix in r's path segments (Segments), and
// whether r's path starts with it.
func Under(r *http.Request, prefix ...string) (rest []string, ok bool) {
	if r.URL == nil {
		return nil, false
	}
	seg, ok := Segments(r.URL.EscapedPath())
	if !ok || len(seg) < len(prefix) {
		return nil, false
	}
	for i, p := range prefix {
		if seg[i] != p {
			return nil, false
		}
	}
	return seg[len(prefix):], true
}

// Service is what Placer needs of the domain: *service.Service.
type Service interface {
	PlaceCreate(ctx context.Context, c service.Caller, r service.CreateOnceRequest) (n service.Node, here bool, err error)
}

var _ Service = (*service.Service)(nil)

// Placer places the creates an edge decoded. A nil *Placer places every
// create here (a single node).
type Placer struct {
	Service Service
	// Forward serves r on node n: the cluster's forwarder, which signs it
	// so that n serves it without placing it again, and sends the body
	// as the client sent it.
	Forward func(w http.ResponseWriter, r *http.Request, n service.Node)
	// Placed reports whether r came from another node (its signature
	// verified): it was placed there, and is this node's.
	Placed func(r *http.Request) bool
}

// Elsewhere places create, which the edge decoded from r for c before
// any side effect. When it belongs on another node, Elsewhere forwards r
// there, which answers the client, and reports true: the edge answers
// nothing more. A request another node forwarded is this node's, as is
// every create on a single node. An error (retryable: the cluster cannot
// place it now) is the edge's to answer; nothing was done.
func (p *Placer) Elsewhere(w http.ResponseWriter, r *http.Request, c service.Caller, create service.CreateOnceRequest) (bool, error) {
	if p == nil || p.Service == nil || (p.Placed != nil && p.Placed(r)) {
		return false, nil
	}
	n, here, err := p.Service.PlaceCreate(r.Context(), c, create)
	if err != nil || here {
		return false, err
	}
	p.Forward(w, r, n)
	return true, nil
}
