package v1

import (
	"net/http"

	"github.com/sandboxd/sandboxd/internal/service"
)

// domainRequest is the body of POST /v1/sandboxes/{id}/domains.
type domainRequest struct {
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
}

// domainJSON is a custom hostname bound to a sandbox port.
type domainJSON struct {
	Hostname  string `json:"hostname"`
	Port      int    `json:"port"`
	SandboxID string `json:"sandbox_id"`
}

func domainToJSON(d service.Domain) domainJSON {
	return domainJSON{Hostname: d.Hostname, Port: d.Port, SandboxID: d.SandboxID}
}

// addDomain binds a hostname (lower-cased, without a trailing dot) to a
// sandbox port: 200 with the binding. Binding it again to the same sandbox
// and port answers the same 200; a hostname another sandbox, or another
// port, holds is hostname_conflict. Requests reach the sandbox once the
// port is exposed as http.
func (s *server) addDomain(w http.ResponseWriter, r *http.Request) error {
	var body domainRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	d, err := s.svc.AddDomain(r.Context(), caller(r), r.PathValue("id"), body.Hostname, body.Port)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, domainToJSON(d))
	return nil
}

// listDomains answers a sandbox's custom hostnames.
func (s *server) listDomains(w http.ResponseWriter, r *http.Request) error {
	ds, err := s.svc.ListDomains(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	out := listJSON[domainJSON]{Items: make([]domainJSON, len(ds))}
	for i, d := range ds {
		out.Items[i] = domainToJSON(d)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// removeDomain unbinds a hostname from the sandbox and answers 204, also
// when it was not bound (a retry succeeds). A binding another sandbox
// holds is never touched.
func (s *server) removeDomain(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.RemoveDomain(r.Context(), caller(r), r.PathValue("id"), r.PathValue("hostname")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
