package e2b

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Snapshots and forks on the E2B wire. A snapshot is a service template of
// kind "snapshot" (Service.Snapshot, synchronous: the sandbox's running
// processes and memory where its runtime can checkpoint them, else its
// filesystem); its snapshotID is the template's id (tpl-…), which
// Sandbox.create takes as a templateID (resolveTemplate). A fork is
// Service.Fork: the source's filesystem, not its memory, so processes do
// not carry over (Docker copies files only; E2B forks a running VM).

// kindSnapshot is service.Template.Kind of a snapshot (the store's
// TemplateSnapshot; the service does not name its kinds).
const kindSnapshot = "snapshot"

// defaultTag is the tag E2B puts after a template name or snapshot id
// ("abc123:default"); a templateID ending in it names the same template.
const defaultTag = ":default"

// Fork bounds, from E2B's SandboxForkRequest.
const (
	maxForkCount       = 16
	defaultForkTimeout = 15 * time.Second
)

// snapshotBody is the body of POST /sandboxes/{id}/snapshots.
type snapshotBody struct {
	Name string `json:"name"`
}

// snapshotInfo is SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(t service.Template) snapshotInfo {
	names := []string{}
	if t.Name != "" {
		names = append(names, t.Name)
	}
	return snapshotInfo{SnapshotID: t.ID, Names: names}
}

// forkBody is SandboxForkRequest.
type forkBody struct {
	Timeout *int64 `json:"timeout"`
	Count   *int   `json:"count"`
}

// forkResult is SandboxForkResult: one of sandbox or error.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *errorBody   `json:"error,omitempty"`
}

// createSnapshot is POST /sandboxes/{id}/snapshots {name?}: 201
// SnapshotInfo once the capture is done (the SDK does not wait or poll).
// The sandbox keeps running. As E2B's, the snapshot holds the running
// processes where the sandbox's runtime can checkpoint them (it pauses for
// that); elsewhere, its file system only. A name that is a built-in template's
// would never be reached by Sandbox.create (built-ins win), so it is 400.
func (f *Facade) createSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body snapshotBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if _, builtin := f.images[body.Name]; builtin && body.Name != "" {
		return badRequest("name %q is a built-in template's", body.Name)
	}
	t, err := f.svc.Snapshot(r.Context(), c, r.PathValue("id"), body.Name, service.SnapshotMemoryIfAble)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotOf(t))
	return nil
}

// maxSnapshotLimit caps one page of GET /snapshots.
const maxSnapshotLimit = 100

// listSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: a
// bare SnapshotInfo[] of the caller's snapshots (an admin's: everyone's),
// oldest first, filtered by the sandbox they were taken of and by name
// (a default tag stripped), and paged: the next page's token is in
// x-next-token, absent on the last page. A token is the last snapshot's
// creation time and id, so a page neither repeats nor skips a snapshot
// when others are made or deleted between pages.
func (f *Facade) listSnapshots(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	q := r.URL.Query()
	limit := maxSnapshotLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit must be a positive integer")
		}
		limit = min(n, maxSnapshotLimit)
	}
	after, err := parseSnapshotToken(q.Get("nextToken"))
	if err != nil {
		return err
	}
	all, err := f.svc.ListTemplates(r.Context(), c)
	if err != nil {
		return err
	}
	sandboxID := q.Get("sandboxID")
	name := strings.TrimSuffix(q.Get("name"), defaultTag)
	var page []service.Template
	for _, t := range all {
		switch {
		case string(t.Kind) != kindSnapshot,
			sandboxID != "" && t.SourceID != sandboxID,
			name != "" && t.Name != name && t.ID != name:
			continue
		}
		page = append(page, t)
	}
	slices.SortFunc(page, compareSnapshots)
	if after != nil {
		i, _ := slices.BinarySearchFunc(page, *after, compareSnapshots)
		if i < len(page) && page[i].ID == after.ID {
			i++
		}
		page = page[i:]
	}
	if len(page) > limit {
		page = page[:limit]
		w.Header().Set("X-Next-Token", snapshotToken(page[len(page)-1]))
	}
	out := make([]snapshotInfo, 0, len(page))
	for _, t := range page {
		out = append(out, snapshotOf(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// compareSnapshots orders snapshots by creation time, then id.
func compareSnapshots(a, b service.Template) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// snapshotToken is the opaque page token after t.
func snapshotToken(t service.Template) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.CreatedAt.UnixNano(), 10) + "/" + t.ID))
}

// parseSnapshotToken reads a snapshotToken: nil for none.
func parseSnapshotToken(tok string) (*service.Template, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, badRequest("invalid nextToken")
	}
	ns, id, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, badRequest("invalid nextToken")
	}
	return &service.Template{ID: id, CreatedAt: time.Unix(0, n)}, nil
}

// deleteTemplate is DELETE /templates/{templateID}, which the SDK's
// deleteSnapshot (an id) and Template.delete (a name: every build of it,
// deleteNamedTemplate) send: 204; a template that does not exist (or was
// deleted) is 404 with body code 404, which deleteSnapshot reads as
// false; one that sandboxes were created from and still exist is 409.
func (f *Facade) deleteTemplate(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	id := strings.TrimSuffix(r.PathValue("templateID"), defaultTag)
	if !strings.HasPrefix(id, "tpl-") {
		if err := f.deleteNamedTemplate(r.Context(), c, id); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	err := f.svc.DeleteTemplate(r.Context(), c, id)
	if service.Is(err, service.ErrConflict) {
		return errorf(http.StatusConflict, "template %s is in use: kill the sandboxes created from it first, or wait for its build to end (%v)", id, err)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fork is POST /sandboxes/{id}/fork {timeout?, count?}: count (1 to 16,
// default 1) new sandboxes with the source's filesystem as it is now, its
// env, metadata and E2B settings (the annotations: template id, user,
// lifecycle, network posture), each answered like a create and running
// when the answer goes out (a code-interpreter fork's server started); the
// source keeps running. timeout is each fork's life in seconds (default
// 15, E2B's). Processes do not carry over: Docker copies files, not
// memory. All or none: when one fork fails, none is left and the whole
// call answers the error. An unknown source is HTTP 404, which is what
// the SDK reads.
func (f *Facade) fork(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body forkBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	n := 1
	if body.Count != nil {
		n = *body.Count
	}
	if n < 1 || n > maxForkCount {
		return badRequest("count must be from 1 to %d", maxForkCount)
	}
	timeout, err := timeoutOf(body.Timeout, defaultForkTimeout)
	if err != nil {
		return err
	}
	forks, err := f.svc.Fork(r.Context(), c, r.PathValue("id"), n)
	if err != nil {
		return err
	}
	out := make([]forkResult, len(forks))
	for i, cr := range forks {
		sb, err := f.settleFork(r.Context(), c, cr.Sandbox, timeout)
		if err != nil {
			f.destroyForks(r.Context(), c, forks)
			return err
		}
		js := f.sandbox(r, sb)
		out[i] = forkResult{Sandbox: &js}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// settleFork gives a new fork its timeout and what its template runs
// beyond the container (a code interpreter's server), as create does.
func (f *Facade) settleFork(ctx context.Context, c service.Caller, sb service.Sandbox, timeout time.Duration) (service.Sandbox, error) {
	sb, err := f.svc.UpdateSandbox(ctx, c, sb.ID, service.Update{SetTimeout: true, Timeout: timeout})
	if err != nil {
		return sb, err
	}
	return sb, f.ensureInterpreter(ctx, sb)
}

// destroyForks destroys the forks of a fork call that failed after the
// service made them, with a context that outlives the request's.
func (f *Facade) destroyForks(ctx context.Context, c service.Caller, forks []*service.Created) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, cr := range forks {
		if err := f.svc.Destroy(ctx, c, cr.ID); err != nil && !service.Is(err, service.ErrNotFound) {
			f.log.Warn("e2b: fork: destroy a fork of a failed call", "sandbox", cr.ID, "err", err)
		}
	}
}

// templateFor resolves a create's templateID to one of the caller's
// templates (by id or name, a default tag stripped): ok is false when it
// names none, and the create falls back to an image of that name. (A
// template still building, or one that failed, is found: the create then
// answers 409.)
func (f *Facade) templateFor(ctx context.Context, c service.Caller, templateID string) (t service.Template, ok bool, err error) {
	idOrName := strings.TrimSuffix(templateID, defaultTag)
	if idOrName == "" {
		return service.Template{}, false, nil
	}
	t, err = f.svc.GetTemplate(ctx, c, idOrName)
	switch {
	case service.Is(err, service.ErrNotFound):
		return service.Template{}, false, nil
	case err != nil:
		return service.Template{}, false, err
	}
	return t, true, nil
}

// templateUser is envd's default user in a sandbox created from template
// t: the user of the sandbox it was taken of, while that sandbox exists;
// else "user" when it descends from a built-in image (which has E2B's
// user), else none (the image's).
func (f *Facade) templateUser(ctx context.Context, c service.Caller, t service.Template) string {
	if t.User != "" {
		return t.User // a build's USER step
	}
	if t.SourceID != "" {
		if src, err := f.svc.Get(ctx, c, t.SourceID); err == nil {
			return src.Annotations[annUser]
		}
	}
	for _, img := range f.images {
		if img != "" && img == t.BaseImage {
			return "user"
		}
	}
	return ""
}
