package daemon

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/ui"
	"github.com/sandboxd/sandboxd/internal/version"
)

// uiHandler builds the dashboard (package ui, registering its Close),
// whose pages call this daemon's API in process with the session's token,
// as /mcp's tools do.
func (d *Daemon) uiHandler() (*ui.Handler, error) {
	h, err := ui.New(ui.Options{
		// d.Handler is read per request: it is the whole handler (the
		// cluster's forwarding included) only once buildHandler returns.
		API:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.Handler.ServeHTTP(w, r) }),
		APIHost: d.ln.Addr().String(),
		Authenticate: func(ctx context.Context, token string) (auth.Principal, error) {
			return d.Auth.AuthenticateToken(ctx, token)
		},
		Terminal:       daytona.TerminalRoute,
		TerminalResize: daytona.TerminalResizeRoute,
		TCPHost:        d.Config.TCPHost,
		Version:        version.Version,
		Logger:         d.logger,
	})
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, h.Close)
	return h, nil
}
