package v1

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// registryJSON is a stored registry credential as answered: never its
// password or token.
type registryJSON struct {
	Host      string    `json:"host"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"created_at"`
}

func toRegistryJSON(c service.RegistryCredential) registryJSON {
	return registryJSON{Host: c.Host, Username: c.Username, CreatedAt: c.CreatedAt}
}

// putRegistry stores the caller's credential for a registry host
// (replacing its previous one): 200 with it, without the secret.
func (s *server) putRegistry(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Host     string `json:"host"`
		Username string `json:"username"`
		Password string `json:"password"`
		Token    string `json:"token"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if body.Password != "" && body.Token != "" {
		return fieldError("password", "give password or token, not both")
	}
	secret := body.Password
	if secret == "" {
		secret = body.Token
	}
	c, err := s.svc.PutRegistryCredential(r.Context(), caller(r), service.RegistryCredentialInput{Host: body.Host, Username: body.Username, Password: secret})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toRegistryJSON(c))
	return nil
}

// listRegistries answers the caller's registry credentials, without
// secrets.
func (s *server) listRegistries(w http.ResponseWriter, r *http.Request) error {
	cs, err := s.svc.ListRegistryCredentials(r.Context(), caller(r))
	if err != nil {
		return err
	}
	out := listJSON[registryJSON]{Items: []registryJSON{}}
	for _, c := range cs {
		out.Items = append(out.Items, toRegistryJSON(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteRegistry removes the caller's credential for a host: 204; 404
// when it has none.
func (s *server) deleteRegistry(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.DeleteRegistryCredential(r.Context(), caller(r), r.PathValue("host")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// imageJSON is what this node has of an image.
type imageJSON struct {
	Ref     string `json:"ref"`
	Present bool   `json:"present"`
	Pulling bool   `json:"pulling"`
	// BytesDone and BytesTotal are a pull's progress (total grows as the
	// engine announces layers).
	BytesDone  int64 `json:"bytes_done,omitempty"`
	BytesTotal int64 `json:"bytes_total,omitempty"`
	SizeBytes  int64 `json:"size_bytes,omitempty"`
}

func toImageJSON(st service.PullState) imageJSON {
	return imageJSON{Ref: st.Ref, Present: st.Present, Pulling: st.Pulling, BytesDone: st.Done, BytesTotal: st.Total, SizeBytes: st.Size}
}

// getImage answers whether this node has an image, or is pulling it.
func (s *server) getImage(w http.ResponseWriter, r *http.Request) error {
	st, err := s.svc.ImageStatus(r.Context(), caller(r), r.PathValue("ref"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toImageJSON(st))
	return nil
}

// pullImage makes an image present on this node, pulling it with the
// caller's credential (or joining the pull under way): 200 once it is
// there. Safe to repeat.
func (s *server) pullImage(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Ref string `json:"ref"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if err := s.svc.PullImage(r.Context(), caller(r), body.Ref); err != nil {
		return err
	}
	st, err := s.svc.ImageStatus(r.Context(), caller(r), body.Ref)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toImageJSON(st))
	return nil
}
