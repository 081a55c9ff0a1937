package daytona

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/service"
)

// A Daytona snapshot is one of the owner's templates (service/templates.go):
// sandbox.createSnapshot captures a sandbox, snapshot.create builds an
// image name or a Dockerfile-only Image, and create({snapshot}) creates
// from one by name. Its id is the template's id (tpl-…), its name the
// template's name (an unnamed one's is its id). The names of
// Options.Images (base) are snapshots too: listed, resolvable, active and
// never deletable. A fork is a capture the service removes once no
// sandbox made from it is left; it never shows as a snapshot.

// Resources a snapshot reports: the service's defaults for a create
// without resources (service/request.go). Daytona's disk is not enforced.
const (
	snapshotCPU    = 1
	snapshotMemory = 0.5 // GiB
	snapshotDisk   = 0
)

// Paging of GET /snapshots.
const (
	defaultSnapshotPage = 100
	maxSnapshotPage     = 200
)

// snapshotDTO is Daytona's SnapshotDto.
type snapshotDTO struct {
	ID              string   `json:"id"`
	Name            string   `json:"name"`
	ImageName       string   `json:"imageName,omitempty"`
	State           string   `json:"state"`
	General         bool     `json:"general"`
	Size            *float64 `json:"size"` // GB
	Entrypoint      []string `json:"entrypoint"`
	CPU             float64  `json:"cpu"`
	GPU             float64  `json:"gpu"`
	Mem             float64  `json:"mem"`
	Disk            float64  `json:"disk"`
	ErrorReason     *string  `json:"errorReason"`
	CreatedAt       string   `json:"createdAt"`
	UpdatedAt       string   `json:"updatedAt"`
	LastUsedAt      *string  `json:"lastUsedAt"`
	SourceSandboxID *string  `json:"sourceSandboxId"`
}

// snapshotPage is Daytona's PaginatedSnapshots: an object, never a bare
// array (the SDK reads items).
type snapshotPage struct {
	Items      []snapshotDTO `json:"items"`
	Total      int           `json:"total"`
	Page       int           `json:"page"`
	TotalPages int           `json:"totalPages"`
}

// createSnapshotBody is Daytona's CreateSnapshot: an image name, or a
// Dockerfile (buildInfo).
type createSnapshotBody struct {
	Name         string     `json:"name"`
	ImageName    string     `json:"imageName"`
	Entrypoint   []string   `json:"entrypoint"`
	BuildInfo    *buildInfo `json:"buildInfo"`
	CPU          *float64   `json:"cpu"`
	GPU          *float64   `json:"gpu"`
	GPUType      []string   `json:"gpuType"`
	Memory       *float64   `json:"memory"`
	Disk         *float64   `json:"disk"`
	SandboxClass string     `json:"sandboxClass"`
	// regionId is accepted and ignored: the SDK sends its target.
}

// sandboxSnapshotBody is CreateSandboxSnapshot.
type sandboxSnapshotBody struct {
	Name          string `json:"name"`
	IncludeMemory bool   `json:"includeMemory"`
}

// forkBody is ForkSandbox.
type forkBody struct {
	Name string `json:"name"`
}

// snapshotState is Daytona's name for a template state.
func snapshotState(s service.TemplateState) string {
	switch s {
	case service.TemplateReady:
		return "active"
	case service.TemplateBuilding:
		return "building"
	case service.TemplateFailed:
		return "build_failed"
	}
	return "error"
}

// snapshotOf renders t.
func snapshotOf(t service.Template) snapshotDTO {
	d := snapshotDTO{
		ID:        t.ID,
		Name:      cmp.Or(t.Name, t.ID),
		State:     snapshotState(t.State),
		CPU:       snapshotCPU,
		Mem:       snapshotMemory,
		Disk:      snapshotDisk,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano),
		UpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	if t.SizeBytes > 0 {
		gb := math.Round(float64(t.SizeBytes)/(1<<30)*1000) / 1000
		d.Size = &gb
	}
	if t.Error != "" {
		d.ErrorReason = &t.Error
	}
	if t.SourceID != "" {
		d.SourceSandboxID = &t.SourceID
	}
	return d
}

// defaultSnapshot renders a name of Options.Images: active, general.
func defaultSnapshot(name, image string) snapshotDTO {
	epoch := time.Unix(0, 0).UTC().Format(time.RFC3339Nano)
	return snapshotDTO{
		ID: name, Name: name, ImageName: image, State: "active", General: true,
		CPU: snapshotCPU, Mem: snapshotMemory, Disk: snapshotDisk, CreatedAt: epoch, UpdatedAt: epoch,
	}
}

// lookupSnapshot finds a snapshot by id or name: a default one, or a
// template of the caller's.
func (f *Facade) lookupSnapshot(ctx context.Context, c service.Caller, idOrName string) (snapshotDTO, error) {
	if img, ok := f.images[idOrName]; ok {
		return defaultSnapshot(idOrName, img), nil
	}
	t, err := f.svc.GetTemplate(ctx, c, idOrName)
	if err != nil {
		return snapshotDTO{}, err
	}
	return snapshotOf(t), nil
}

// listSnapshots is GET /snapshots?page=&limit=&sourceSandboxId=: the
// default snapshots, then the caller's templates (an admin's: everyone's),
// paged as {items, total, page, totalPages}. sourceSandboxId keeps the
// snapshots captured from that sandbox (by id).
func (f *Facade) listSnapshots(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	q := r.URL.Query()
	page, limit := 1, defaultSnapshotPage
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("page must be a positive integer")
		}
		page = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit must be a positive integer")
		}
		limit = min(n, maxSnapshotPage)
	}
	source := q.Get("sourceSandboxId")
	ts, err := f.svc.ListTemplates(r.Context(), c)
	if err != nil {
		return err
	}
	var all []snapshotDTO
	if source == "" {
		for _, name := range slices.Sorted(maps.Keys(f.images)) {
			all = append(all, defaultSnapshot(name, f.images[name]))
		}
	}
	for _, t := range ts {
		if source == "" || t.SourceID == source {
			all = append(all, snapshotOf(t))
		}
	}
	out := snapshotPage{Items: []snapshotDTO{}, Total: len(all), Page: page, TotalPages: (len(all) + limit - 1) / limit}
	if from := (page - 1) * limit; from < len(all) {
		out.Items = all[from:min(from+limit, len(all))]
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getSnapshot is GET /snapshots/{idOrName}, and POST
// /snapshots/{id}/activate (a snapshot here is always active: activating
// one answers it as it is).
func (f *Facade) getSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	d, err := f.lookupSnapshot(r.Context(), c, r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// deleteSnapshot is DELETE /snapshots/{idOrName}: the template and its
// image are gone when it answers (200, no body). One a sandbox made from
// it still exists is 409, as is one still building; a default is 403.
func (f *Facade) deleteSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	d, err := f.lookupSnapshot(r.Context(), c, r.PathValue("sid"))
	if err != nil {
		return err
	}
	switch {
	case d.General:
		return errorf(http.StatusForbidden, "snapshot %q is the daemon's default and cannot be deleted", d.Name)
	case d.State == "building":
		return errorf(http.StatusConflict, "snapshot %q is still building; delete it once the build ends", d.Name)
	}
	err = f.svc.DeleteTemplate(r.Context(), c, d.ID)
	if service.Is(err, service.ErrConflict) {
		return errorf(http.StatusConflict, "snapshot %q is in use: sandboxes created from it still exist; delete them first", d.Name)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// msgNoOwner refuses a snapshot, fork or build for no owner: templates
// belong to an owner (service/templates.go), and the admin token, and the
// sandboxes it creates, have none.
const msgNoOwner = "snapshots and forks belong to a tenant, and %s has none (it was made with an admin token " +
	"without an owner); use a user token (POST /v1/tokens with role \"user\" and an owner) for sandboxes you snapshot or fork"

// ownedSandbox returns the sandbox idOrName if it has an owner a template
// can belong to.
func (f *Facade) ownedSandbox(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error) {
	sb, err := f.svc.Get(ctx, c, idOrName)
	if err != nil {
		return service.Sandbox{}, err
	}
	if sb.Owner == "" {
		return service.Sandbox{}, errorf(http.StatusForbidden, msgNoOwner, "sandbox "+sb.ID)
	}
	return sb, nil
}

// checkSnapshotName refuses a snapshot name the service would not take,
// in Daytona's words, and the names of the default snapshots.
func (f *Facade) checkSnapshotName(name string) error {
	if _, ok := f.images[name]; ok {
		return errorf(http.StatusConflict, "snapshot %q already exists (it is the daemon's default)", name)
	}
	if !naming.ValidLabel(name) {
		return badRequest("name %q: snapshot names on sandboxd are DNS labels (lowercase letters, digits and '-', at most 63 characters)", name)
	}
	return nil
}

// createSnapshot is POST /snapshots: a build of an image name (imageName)
// or of a Dockerfile-only Image (buildInfo, see dockerfile.go), named
// name. It answers at once with the snapshot building (or as it is, when
// the same build exists); the SDK polls GET /snapshots/{name} until it is
// active or build_failed, streaming build-logs meanwhile.
func (f *Facade) createSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var b createSnapshotBody
	if err := f.decodeJSON(w, r, &b); err != nil {
		return err
	}
	if c.Owner == "" {
		return errorf(http.StatusForbidden, msgNoOwner, "this token")
	}
	if err := f.checkSnapshotName(b.Name); err != nil {
		return err
	}
	switch {
	case (b.GPU != nil && *b.GPU > 0) || len(b.GPUType) > 0:
		return badRequest("gpu: sandboxd has no GPUs")
	case (b.CPU != nil && *b.CPU > 0) || (b.Memory != nil && *b.Memory > 0) || (b.Disk != nil && *b.Disk > 0):
		return badRequest("resources: a snapshot on sandboxd has no resources of its own; pass them to create")
	case b.SandboxClass != "":
		return badRequest("sandboxClass: not supported by sandboxd's Daytona facade; leave it unset")
	case len(b.Entrypoint) > 0 && !slices.Equal(b.Entrypoint, []string{"sleep", "infinity"}):
		return badRequest("entrypoint: sandboxd runs its own init in every sandbox; leave it unset")
	}
	recipe := service.Recipe{Name: b.Name, NewName: true}
	switch {
	case b.BuildInfo != nil && b.BuildInfo.DockerfileContent != "":
		if len(b.BuildInfo.ContextHashes) > 0 {
			return errorf(http.StatusNotImplemented, "%s", msgImageContext)
		}
		base, steps, err := recipeFromDockerfile(b.BuildInfo.DockerfileContent, f.images)
		if err != nil {
			return err
		}
		recipe.Base, recipe.Steps = base, steps
	case b.ImageName != "":
		recipe.Base = b.ImageName
		if img, ok := f.images[b.ImageName]; ok {
			recipe.Base = img
		}
	default:
		return badRequest("give imageName or buildInfo.dockerfileContent")
	}
	t, _, err := f.svc.BuildTemplate(r.Context(), c, recipe)
	if errors.Is(err, service.ErrImageNotPresent) && !service.IsPullRefusal(err) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotOf(t))
	return nil
}

// snapshotLogsURL is GET /snapshots/{id}/build-logs-url: {url} of the
// snapshot's build-logs stream on the host the client reached, without a
// query (the SDK appends ?follow=true).
func (f *Facade) snapshotLogsURL(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	d, err := f.lookupSnapshot(r.Context(), c, r.PathValue("sid"))
	if err != nil {
		return err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusOK, urlResponse{URL: scheme + "://" + r.Host + Prefix + "/snapshots/" + url.PathEscape(d.ID) + "/build-logs"})
	return nil
}

// snapshotLogs is GET /snapshots/{id}/build-logs: the build's output as
// plain text, flushed as it comes, ending when the build does (follow is
// accepted; the stream always follows a running build, as the SDK asks).
// A snapshot that was not built here, or whose build ended before this
// process started, has no output beyond its error.
func (f *Facade) snapshotLogs(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	d, err := f.lookupSnapshot(r.Context(), c, r.PathValue("sid"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if d.General {
		return nil
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	err = f.svc.FollowBuildLog(r.Context(), c, d.ID, func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		f.log.WarnContext(r.Context(), "daytona: build log stream ended early", "snapshot", d.ID, "err", err)
	}
	return nil // the status is written; the client sees the stream end
}

// sandboxSnapshot is POST /sandbox/{idOrName}/snapshot {name}: the
// sandbox's filesystem is captured as snapshot name (synchronously; no
// processes or memory) and the sandbox answered as it is, so the SDK's
// wait for the end of "snapshotting" ends at once.
func (f *Facade) sandboxSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var b sandboxSnapshotBody
	if err := f.decodeJSON(w, r, &b); err != nil {
		return err
	}
	if b.IncludeMemory {
		return badRequest("includeMemory: sandboxd snapshots capture the filesystem only")
	}
	if b.Name != "" {
		if err := f.checkSnapshotName(b.Name); err != nil {
			return err
		}
		// Daytona's snapshot names are unique; the service's move to the
		// newest capture. (Two captures racing for a new name both land,
		// the later one holding it.)
		if _, err := f.svc.GetTemplate(r.Context(), c, b.Name); err == nil {
			return errorf(http.StatusConflict, "snapshot %q already exists", b.Name)
		}
	}
	sb, err := f.ownedSandbox(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := f.svc.Snapshot(r.Context(), c, sb.ID, b.Name, service.SnapshotFiles); err != nil {
		return err
	}
	if sb, err = f.svc.Get(r.Context(), c, sb.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// fork is POST /sandbox/{idOrName}/fork: a new sandbox, started, with a
// copy of the source's filesystem (not its processes or memory) and its
// env, labels and settings; the source runs on. The new sandbox's name
// cannot be chosen (it is its id): a name is refused.
func (f *Facade) fork(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var b forkBody
	if err := f.decodeJSON(w, r, &b); err != nil {
		return err
	}
	if b.Name != "" {
		return badRequest("name: a fork's name cannot be chosen on sandboxd; fork without one (the fork is named by its id)")
	}
	src, err := f.ownedSandbox(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	made, err := f.svc.Fork(r.Context(), c, src.ID, 1)
	if err != nil {
		return err
	}
	sb := made[0].Sandbox
	if l := src.Lifecycle; l != sb.Lifecycle {
		// The fork keeps its source's intervals, as on Daytona.
		if sb, err = f.svc.UpdateSandbox(r.Context(), c, sb.ID, service.Update{Lifecycle: &l}); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// snapshotTemplate returns the template a create's snapshot names, if it
// names one of the caller's (the default snapshots and images do not).
func (f *Facade) snapshotTemplate(ctx context.Context, c service.Caller, snapshot string) (string, bool, error) {
	if snapshot == "" {
		return "", false, nil
	}
	if _, ok := f.images[snapshot]; ok {
		return "", false, nil
	}
	t, err := f.svc.GetTemplate(ctx, c, snapshot)
	if service.Is(err, service.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if t.State != service.TemplateReady {
		return "", false, badRequest("snapshot %q is %s, not active", snapshot, snapshotState(t.State))
	}
	return t.ID, true, nil
}
