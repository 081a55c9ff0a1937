package daemon

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/mcp"
	"github.com/sandboxd/sandboxd/internal/version"
)

// mcpHandler builds /mcp (package mcp, registering its Close): MCP's
// streamable HTTP transport behind the API's own token check, whose
// tools call this daemon's API in process with the caller's token, so
// that the API — and, in a cluster, its forwarding — decides everything
// a call may see or do.
func (d *Daemon) mcpHandler() http.Handler {
	h := mcp.NewHTTPHandler(mcp.HTTPOptions{
		// d.Handler is read per request: it is the whole handler (the
		// cluster's forwarding included) only once buildHandler returns.
		API:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.Handler.ServeHTTP(w, r) }),
		APIHost: d.ln.Addr().String(),
		Authenticate: func(r *http.Request) error {
			_, err := d.Auth.Authenticate(r.Context(), r)
			return err
		},
		Version: version.Version,
		Logger:  d.logger,
	})
	d.closers = append(d.closers, h.Close)
	return h
}
