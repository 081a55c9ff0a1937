package v1

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/api/router"
)

// access is who may call a route.
type access int

const (
	public    access = iota // no token
	user                    // any valid token; sandboxes are scoped to its owner
	adminOnly               // an admin token; a user token gets permission_denied
)

// bodyKind says how a route's request is bounded: its body's size, and
// whether the whole request gets Options.RequestTimeout.
type bodyKind int

const (
	jsonBody bodyKind = iota // capped at Options.MaxBodyBytes (413 beyond); bounded in time
	rawBody                  // streamed, uncapped (file upload); no time bound
	// streamed is capped like jsonBody, but its answer is a stream or may
	// wait as long as the caller asked (exec with timeout_s, the exec
	// WebSocket, a download, a build's log): no time bound.
	streamed
)

// route is one row of the route table.
type route struct {
	method string
	// path is a net/http.ServeMux pattern; its {wildcards} are also the
	// OpenAPI path template, so spec and server share one spelling.
	path   string
	access access
	body   bodyKind
	handle func(s *server, w http.ResponseWriter, r *http.Request) error
}

// routes is the route table: the one list that registers the handlers and
// that the OpenAPI test compares spec/openapi.yaml with.
func routes() []route {
	return []route{
		{http.MethodGet, "/healthz", public, jsonBody, (*server).healthz},
		{http.MethodGet, "/readyz", public, jsonBody, (*server).readyz},
		{http.MethodGet, "/metrics", adminOnly, jsonBody, (*server).serveMetrics},

		{http.MethodPost, "/v1/sandboxes", user, jsonBody, (*server).createSandbox},
		{http.MethodGet, "/v1/sandboxes", user, jsonBody, (*server).listSandboxes},
		{http.MethodGet, "/v1/sandboxes/{id}", user, jsonBody, (*server).getSandbox},
		{http.MethodPatch, "/v1/sandboxes/{id}", user, jsonBody, (*server).updateSandbox},
		{http.MethodDelete, "/v1/sandboxes/{id}", user, jsonBody, (*server).destroySandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/start", user, jsonBody, (*server).startSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/stop", user, jsonBody, (*server).stopSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/pause", user, jsonBody, (*server).pauseSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/hibernate", user, jsonBody, (*server).hibernateSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/resume", user, jsonBody, (*server).resumeSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/snapshots", user, jsonBody, (*server).snapshotSandbox},
		{http.MethodPost, "/v1/sandboxes/{id}/fork", user, jsonBody, (*server).forkSandbox},

		{http.MethodPost, "/v1/sandboxes/{id}/exec", user, streamed, (*server).exec},
		{http.MethodGet, "/v1/sandboxes/{id}/exec/stream", user, streamed, (*server).execStream},
		{http.MethodGet, "/v1/sandboxes/{id}/logs", user, streamed, (*server).sandboxLogs},
		{http.MethodGet, "/v1/sandboxes/{id}/metrics", user, jsonBody, (*server).sandboxMetrics},

		{http.MethodPost, "/v1/sandboxes/{id}/sessions", user, jsonBody, (*server).createSession},
		{http.MethodGet, "/v1/sandboxes/{id}/sessions", user, jsonBody, (*server).listSessions},
		{http.MethodGet, "/v1/sandboxes/{id}/sessions/{sid}", user, jsonBody, (*server).getSession},
		{http.MethodDelete, "/v1/sandboxes/{id}/sessions/{sid}", user, jsonBody, (*server).deleteSession},
		{http.MethodPost, "/v1/sandboxes/{id}/sessions/{sid}/exec", user, streamed, (*server).sessionExec},
		{http.MethodGet, "/v1/sandboxes/{id}/sessions/{sid}/commands/{cid}", user, jsonBody, (*server).sessionCommand},
		{http.MethodGet, "/v1/sandboxes/{id}/sessions/{sid}/commands/{cid}/logs", user, streamed, (*server).sessionLogs},
		{http.MethodPost, "/v1/sandboxes/{id}/sessions/{sid}/commands/{cid}/input", user, jsonBody, (*server).sessionInput},

		{http.MethodPut, "/v1/sandboxes/{id}/files", user, rawBody, (*server).uploadFile},
		{http.MethodGet, "/v1/sandboxes/{id}/files", user, streamed, (*server).downloadFile},
		{http.MethodDelete, "/v1/sandboxes/{id}/files", user, jsonBody, (*server).removeFile},
		{http.MethodGet, "/v1/sandboxes/{id}/files/list", user, jsonBody, (*server).listFiles},
		{http.MethodPut, "/v1/sandboxes/{id}/files/archive", user, rawBody, (*server).uploadArchive},
		{http.MethodGet, "/v1/sandboxes/{id}/files/archive", user, streamed, (*server).downloadArchive},

		{http.MethodPost, "/v1/sandboxes/{id}/ports", user, jsonBody, (*server).exposePort},
		{http.MethodGet, "/v1/sandboxes/{id}/ports", user, jsonBody, (*server).listPorts},
		{http.MethodDelete, "/v1/sandboxes/{id}/ports/{port}", user, jsonBody, (*server).unexposePort},

		{http.MethodPost, "/v1/sandboxes/{id}/domains", user, jsonBody, (*server).addDomain},
		{http.MethodGet, "/v1/sandboxes/{id}/domains", user, jsonBody, (*server).listDomains},
		{http.MethodDelete, "/v1/sandboxes/{id}/domains/{hostname}", user, jsonBody, (*server).removeDomain},
		{http.MethodPost, "/v1/sandboxes/{id}/domains/{hostname}/verify", user, jsonBody, (*server).verifyDomain},

		{http.MethodPost, "/v1/templates", user, jsonBody, (*server).buildTemplate},
		{http.MethodGet, "/v1/templates", user, jsonBody, (*server).listTemplates},
		{http.MethodGet, "/v1/templates/{id}", user, jsonBody, (*server).getTemplate},
		{http.MethodDelete, "/v1/templates/{id}", user, jsonBody, (*server).deleteTemplate},
		{http.MethodGet, "/v1/templates/{id}/logs", user, streamed, (*server).templateLogs},
		{http.MethodPost, "/v1/templates/{id}/tags", user, jsonBody, (*server).tagTemplate},
		{http.MethodDelete, "/v1/templates/{id}/tags/{tag}", user, jsonBody, (*server).untagTemplate},

		{http.MethodPost, "/v1/registries", user, jsonBody, (*server).putRegistry},
		{http.MethodGet, "/v1/registries", user, jsonBody, (*server).listRegistries},
		{http.MethodDelete, "/v1/registries/{host}", user, jsonBody, (*server).deleteRegistry},
		{http.MethodPost, "/v1/images/pull", user, jsonBody, (*server).pullImage},
		{http.MethodGet, "/v1/images/{ref...}", user, jsonBody, (*server).getImage},

		{http.MethodGet, "/v1/pools", adminOnly, jsonBody, (*server).listPools},
		{http.MethodPut, "/v1/pools", adminOnly, jsonBody, (*server).setPools},

		{http.MethodPost, "/v1/tokens", adminOnly, jsonBody, (*server).createToken},
		{http.MethodGet, "/v1/tokens", adminOnly, jsonBody, (*server).listTokens},
		{http.MethodDelete, "/v1/tokens/{id}", adminOnly, jsonBody, (*server).revokeToken},
	}
}

// Route is the native API's registration with the daemon's router
// (package router): POST /v1/sandboxes is a create, and
// /v1/sandboxes/{id}[/…] names sandbox {id} (an id or a name), whose
// DELETE is its destroy. A lost sandbox's owner is told so (SaysLost).
func Route(r *http.Request) router.Ref {
	seg, ok := router.Under(r, "v1", "sandboxes")
	switch {
	case !ok:
		return router.Ref{}
	case len(seg) == 0:
		return router.Collection(r)
	}
	return router.Ref{Sandbox: seg[0], Destroy: len(seg) == 1 && r.Method == http.MethodDelete, SaysLost: true}
}
