package e2b

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/service"
)

// The parts of E2B's API the facade does not implement. They answer 501
// in E2B's error shape with a message naming what is missing, never 404:
// the SDK reads a 404 as "sandbox not found" (network) or "already gone",
// which would be a lie.
// This table is the facade's whole catch-all; the routes it does serve are
// in routes (sandboxes.go).

// unsupportedAPIs maps a ServeMux pattern to what it is, for the message.
// Patterns without a method take every method; the prefix patterns
// ("/templates/") take every path below them.
var unsupportedAPIs = map[string]string{
	"/templates":                     "templates (building and managing them)",
	"/templates/":                    "templates (building and managing them)",
	"/v2/templates":                  "templates (building and managing them)",
	"/v2/templates/":                 "templates (building and managing them)",
	"/v3/templates":                  "templates (building and managing them)",
	"/v3/templates/":                 "templates (building and managing them)",
	"/snapshots":                     "snapshots (but listing them)",
	"/snapshots/":                    "snapshots (but listing them)",
	"/teams":                         "teams",
	"/teams/":                        "teams",
	"/secrets":                       "secrets",
	"/secrets/":                      "secrets",
	"/volumes":                       "the volumes API",
	"/volumes/":                      "the volumes API",
	"POST /sandboxes/{id}/refreshes": "refreshes (use setTimeout)",
}

// unsupportedHint adds what to do instead, where there is something.
var unsupportedHint = map[string]string{
	"templates (building and managing them)": "; sandboxd serves Template.build, exists, getTags, assignTags, removeTags and delete, and any image present on the host is a template ID",
}

// unsupported answers a request for what: after the API key is checked and,
// for a sandbox's route, the sandbox is found (an unknown sandbox is 404,
// as E2B answers), 501 with a message the SDK prints as is.
func (f *Facade) unsupported(what string) handler {
	return func(w http.ResponseWriter, r *http.Request, c service.Caller) error {
		if id := r.PathValue("id"); id != "" {
			if _, err := f.svc.Get(r.Context(), c, id); err != nil {
				return err
			}
		}
		return errorf(http.StatusNotImplemented, "sandboxd does not implement %s (%s %s)%s", what, r.Method, r.URL.Path, unsupportedHint[what])
	}
}
