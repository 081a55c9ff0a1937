package v1

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Templates, snapshots and forks (internal/service/templates.go). The
// recipe and the template are on the wire as the service's own JSON tags
// spell them; wire_internal_test.go pins those names.

// buildTemplate starts a build of the recipe in the body: 202 with the
// template, building. The same recipe over the same base again answers
// the template it made (whatever its state but failed) with 200 and
// "Template-Cached: true".
func (s *server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	var recipe service.Recipe
	if err := decodeJSON(r, &recipe); err != nil {
		return err
	}
	t, cached, err := s.svc.BuildTemplate(r.Context(), caller(r), recipe)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if cached {
		w.Header().Set("Template-Cached", "true")
		status = http.StatusOK
	}
	writeJSON(w, status, t)
	return nil
}

// listTemplates answers the caller's templates and snapshots (an admin's:
// everyone's); forks' captures are left out.
func (s *server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.svc.ListTemplates(r.Context(), caller(r))
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []service.Template{}
	}
	writeJSON(w, http.StatusOK, listJSON[service.Template]{Items: ts})
	return nil
}

func (s *server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	t, err := s.svc.GetTemplate(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// deleteTemplate answers 204; not_found when it is gone (so a retried
// DELETE learns that its first try won), conflict while it builds or
// while a sandbox made from it exists.
func (s *server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.DeleteTemplate(r.Context(), caller(r), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// templateLogs streams a build's output as text, each chunk flushed as it
// comes, until the build ends. An error before the first chunk (an
// unknown template) is an ordinary JSON error; after it, the status is
// out and the body just ends. A client that stops reading for
// writeTimeout loses the stream.
func (s *server) templateLogs(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	started := false
	begin := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
	}
	err := s.svc.FollowBuildLog(r.Context(), caller(r), r.PathValue("id"), func(b []byte) error {
		begin()
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	})
	switch {
	case err != nil && !started:
		return err
	case err != nil && r.Context().Err() == nil:
		s.log.WarnContext(r.Context(), "build log cut short", "request_id", requestID(r), "err", err)
	}
	begin() // a template with no output here: an empty log
	return nil
}

// tagRequest is the body of POST /v1/templates/{id}/tags.
type tagRequest struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// tagTemplate points name:tag, for each tag, at the template: 200 with
// it. Repeating it changes nothing more.
func (s *server) tagTemplate(w http.ResponseWriter, r *http.Request) error {
	var body tagRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	t, err := s.svc.TagTemplate(r.Context(), caller(r), r.PathValue("id"), body.Name, body.Tags)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// untagTemplate removes the tag {tag} of the name {id}: 204; not_found
// when it is not there (a retry learns its first try won).
func (s *server) untagTemplate(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.UntagTemplate(r.Context(), caller(r), r.PathValue("id"), []string{r.PathValue("tag")}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// snapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots; it
// may be empty.
type snapshotRequest struct {
	Name string `json:"name"`
	// Memory: the snapshot holds the running sandbox's processes too, and
	// every sandbox created from it starts with them.
	Memory bool `json:"memory"`
}

// snapshotSandbox captures the sandbox's filesystem (with memory: and its
// running processes) as a template: 201 with it, ready.
func (s *server) snapshotSandbox(w http.ResponseWriter, r *http.Request) error {
	var body snapshotRequest
	if err := decodeOptionalJSON(r, &body); err != nil {
		return err
	}
	memory := service.SnapshotFiles
	if body.Memory {
		memory = service.SnapshotWithMemory
	}
	t, err := s.svc.Snapshot(r.Context(), caller(r), r.PathValue("id"), body.Name, memory)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// forkRequest is the body of POST /v1/sandboxes/{id}/fork; it may be
// empty. Count absent is 1; the service checks its range.
type forkRequest struct {
	Count *int `json:"count"`
	// Memory: the forks start with the sandbox's running processes
	// (service.ForkWithMemory).
	Memory bool `json:"memory"`
}

// forkSandbox makes count sandboxes from the sandbox's filesystem, all or
// none: 201 with each as a create answers it (its private key included).
func (s *server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	var body forkRequest
	if err := decodeOptionalJSON(r, &body); err != nil {
		return err
	}
	n := 1
	if body.Count != nil {
		n = *body.Count
	}
	fork := s.svc.Fork
	if body.Memory {
		fork = s.svc.ForkWithMemory
	}
	created, err := fork(r.Context(), caller(r), r.PathValue("id"), n)
	if err != nil {
		return err
	}
	out := struct {
		Sandboxes []sandboxJSON `json:"sandboxes"`
	}{make([]sandboxJSON, len(created))}
	for i, c := range created {
		out.Sandboxes[i] = toCreatedJSON(c)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
