package v1

import (
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/internal/service"
)

// exposeRequest is the body of POST /v1/sandboxes/{id}/ports. An empty or
// absent protocol means http (the Go SDK sends "" for its zero value).
type exposeRequest struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Public   bool   `json:"public"`
}

// portJSON is an exposed port. HostPort is present for tcp only.
type portJSON struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Public   bool   `json:"public"`
	URL      string `json:"url"`
	HostPort int    `json:"host_port,omitempty"`
}

func toPortJSON(e service.Exposure) portJSON {
	return portJSON{Port: e.Port, Protocol: e.Protocol, Public: e.Public, URL: e.URL, HostPort: e.HostPort}
}

// exposePort makes a sandbox port reachable: 200 with its URL (and host
// port for tcp). Repeating it returns the first call's exposure — same URL,
// same host port, and the public flag the first call set; unexpose first to
// change it. Another protocol for an exposed port is conflict; a host-port
// pool with nothing free is capacity_exhausted with Retry-After.
func (s *server) exposePort(w http.ResponseWriter, r *http.Request) error {
	var body exposeRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	e, err := s.svc.ExposePort(r.Context(), caller(r), r.PathValue("id"), body.Port, body.Protocol, body.Public)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toPortJSON(e))
	return nil
}

// listPorts answers a sandbox's exposures, ordered by port.
func (s *server) listPorts(w http.ResponseWriter, r *http.Request) error {
	es, err := s.svc.ListPorts(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	out := listJSON[portJSON]{Items: make([]portJSON, len(es))}
	for i, e := range es {
		out.Items[i] = toPortJSON(e)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// unexposePort removes an exposure — route, host-port listener, live
// connections — and answers 204, also when the port was not exposed, so a
// retry succeeds. not_found is only for the sandbox.
func (s *server) unexposePort(w http.ResponseWriter, r *http.Request) error {
	port, err := portParam(r)
	if err != nil {
		return err
	}
	if err := s.svc.UnexposePort(r.Context(), caller(r), r.PathValue("id"), port); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// portParam parses the path's {port}: a decimal from 1 to 65535.
func portParam(r *http.Request) (int, error) {
	s := r.PathValue("port")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '+' || s[0] == '0' {
		return 0, errorf(CodeInvalidArgument, "port %q: want a number from 1 to 65535", s)
	}
	return n, nil
}
