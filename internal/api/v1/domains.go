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

// domainJSON is a custom hostname bound to a sandbox port. Until verified
// it routes nothing; verification names the TXT record that proves control.
type domainJSON struct {
	Hostname     string           `json:"hostname"`
	Port         int              `json:"port"`
	SandboxID    string           `json:"sandbox_id"`
	Verified     bool             `json:"verified"`
	Verification verificationJSON `json:"verification"`
}

// verificationJSON is the DNS record a pending binding waits for.
type verificationJSON struct {
	Type  string `json:"type"` // always "TXT"
	Name  string `json:"name"`
	Value string `json:"value"`
	// Error says why the last look-up did not verify it.
	Error string `json:"error,omitempty"`
}

func domainToJSON(d service.Domain) domainJSON {
	return domainJSON{
		Hostname: d.Hostname, Port: d.Port, SandboxID: d.SandboxID, Verified: d.Verified,
		Verification: verificationJSON{Type: "TXT", Name: d.TXTName, Value: d.TXTValue, Error: d.CheckError},
	}
}

// addDomain binds a hostname (lower-cased, without a trailing dot) to a
// sandbox port: 200 with the binding, verified: false (it routes nothing
// yet) unless the caller is an admin. Binding it again to the same sandbox
// and port answers the binding as it is; a hostname this sandbox holds on
// another port, or another sandbox holds verified, is hostname_conflict.
// Requests reach the sandbox once the binding is verified and the port is
// exposed as http.
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

// verifyDomain looks up the TXT record of a pending binding and answers
// the binding: verified when the record holds its value. A resolver that
// does not answer is 503 unavailable; another sandbox holding the
// hostname verified is hostname_conflict.
func (s *server) verifyDomain(w http.ResponseWriter, r *http.Request) error {
	d, err := s.svc.VerifyDomain(r.Context(), caller(r), r.PathValue("id"), r.PathValue("hostname"))
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
