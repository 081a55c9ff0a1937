package e2b

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// E2B's template builds (Template.build in the SDK), on the service's
// templates (internal/service/templates.go). The SDK's sequence:
//
//  1. POST /v3/templates {name[:tag], tags} → 202 {templateID, buildID}:
//     the facade hands out the build's id (the template id the service
//     will give it) and keeps the name and tags until step 3. E2B's
//     templateID is the name: names are per owner, and Sandbox.create,
//     getTags and delete take it.
//  2. For each COPY step, GET /templates/{templateID}/files/{hash} and,
//     when not present, a PUT of the files' tar to the answered URL
//     (buildfiles.go).
//  3. POST /v2/templates/{templateID}/builds/{buildID} with the steps →
//     202: the steps become a service recipe and its build starts.
//  4. GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N,
//     polled until ready or error; logEntries are the build's output
//     lines from the N-th on (the SDK adds up their count).
//
// Tags are the service's name:tag pointers; E2B's tag "default" is the
// service's "latest" (a name without a tag).

// e2bDefaultTag is E2B's tag of a name given without one.
const e2bDefaultTag = "default"

// maxTemplateTags is the service's bound of a build's tags.
const maxTemplateTags = 16

// Bounds of the builds handed out: those requested (step 1) and not yet
// started (step 3), per owner; and all of them, started ones kept for
// their status (their oldest make room).
const (
	pendingBuildLife  = time.Hour
	maxPendingOfOwner = 32
	maxPendingBuilds  = 4096
	// maxBuildSteps bounds a build's E2B steps (each is one service
	// step, or a COPY's files).
	maxBuildSteps = 256
)

// pendingBuild is a build requested by POST /v3/templates: its name and
// tags until its steps come, then the template it became (a cached build
// is another template than the id handed out).
type pendingBuild struct {
	owner, name string
	tags        []string // the service's
	templateID  string   // set once started
	expires     time.Time
}

// pendingBuilds are the builds handed out, by build id. A daemon that
// restarts between a build's request and its start forgets it; the
// start then answers 404 and the SDK's next build asks again.
type pendingBuilds struct {
	mu     sync.Mutex
	builds map[string]*pendingBuild
	now    func() time.Time
}

func (p *pendingBuilds) add(id string, b *pendingBuild) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	n := 0
	var oldest string
	for k, v := range p.builds {
		switch {
		case now.After(v.expires):
			delete(p.builds, k)
		case v.templateID == "" && v.owner == b.owner:
			n++
		case v.templateID != "" && (oldest == "" || v.expires.Before(p.builds[oldest].expires)):
			oldest = k
		}
	}
	if n >= maxPendingOfOwner {
		return errorf(http.StatusTooManyRequests, "%d template builds requested and not started; start them or wait an hour", n)
	}
	if len(p.builds) >= maxPendingBuilds {
		if oldest == "" {
			return errorf(http.StatusTooManyRequests, "too many template builds requested and not started; try again later")
		}
		delete(p.builds, oldest) // its template answers its status by id
	}
	b.expires = now.Add(pendingBuildLife)
	p.builds[id] = b
	return nil
}

// get returns owner's pending build id (a copy).
func (p *pendingBuilds) get(owner, id string) (pendingBuild, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.builds[id]
	if !ok || b.owner != owner || p.now().After(b.expires) {
		return pendingBuild{}, false
	}
	return *b, true
}

func (p *pendingBuilds) started(id, templateID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.builds[id]; ok {
		b.templateID = templateID
	}
}

// templateName splits E2B's "name[:tag]" into the service's name and tag
// (E2B's default tag is the service's latest).
func templateName(ref string) (name, tag string, err error) {
	name, tag, _ = strings.Cut(ref, ":")
	tag = serviceTag(cmp.Or(tag, e2bDefaultTag))
	if _, _, ok := service.ParseTemplateRef(name + ":" + tag); !ok {
		return "", "", badRequest("template name %q: names on sandboxd are DNS labels (lowercase letters, digits and '-', at most 63, not starting with tpl-), tags letters, digits, '_', '.' and '-'", ref)
	}
	return name, tag, nil
}

func serviceTag(tag string) string {
	if tag == e2bDefaultTag {
		return "latest"
	}
	return tag
}

func serviceTags(tags []string) []string {
	out := make([]string, len(tags))
	for i, t := range tags {
		out[i] = serviceTag(t)
	}
	return out
}

func e2bTag(tag string) string {
	if tag == "latest" {
		return e2bDefaultTag
	}
	return tag
}

// requestBuildBody is TemplateBuildRequestV3.
type requestBuildBody struct {
	Name  string   `json:"name"`
	Alias string   `json:"alias"`
	Tags  []string `json:"tags"`
}

// requestBuild is POST /v3/templates: 202 TemplateRequestResponseV3.
// cpuCount, memoryMB and minFreeDiskMb are not the template's on
// sandboxd (a create takes its resources), so they are not read.
func (f *Facade) requestBuild(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body requestBuildBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if c.Owner == "" {
		return errorf(http.StatusForbidden, "an admin token owns no templates: build with a tenant's API key")
	}
	ref := cmp.Or(body.Name, body.Alias)
	name, tag, err := templateName(ref)
	if err != nil {
		return err
	}
	if _, builtin := f.images[name]; builtin {
		return badRequest("name %q is a built-in template's", name)
	}
	// The tags: the name's own, when it has one, and those given; the
	// default when there are none.
	var tags []string
	if strings.Contains(ref, ":") {
		tags = append(tags, tag)
	}
	for _, t := range body.Tags {
		if t = serviceTag(t); !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		tags = []string{tag}
	}
	if len(tags) > maxTemplateTags {
		return badRequest("at most %d tags", maxTemplateTags)
	}
	for _, t := range tags {
		if _, _, ok := service.ParseTemplateRef(name + ":" + t); !ok {
			return badRequest("tag %q: tags are letters, digits, '_', '.' and '-', at most 128", t)
		}
	}
	id := service.NewTemplateID()
	if err := f.pending.add(id, &pendingBuild{owner: c.Owner, name: name, tags: tags}); err != nil {
		return err
	}
	e2bTags := make([]string, len(tags))
	for i, t := range tags {
		e2bTags[i] = e2bTag(t)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": id, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": e2bTags,
	})
	return nil
}

// fileUpload is GET /templates/{templateID}/files/{hash}: 201
// TemplateBuildFileUpload, present, or not with the URL to PUT the
// files' archive to.
func (f *Facade) fileUpload(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	hash := strings.ToLower(r.PathValue("hash"))
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return badRequest("files hash %q is not a SHA-256 in hex", hash)
	}
	if f.uploads.has(c.Owner, hash) {
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return nil
	}
	tok, err := f.uploads.token(c.Owner, hash)
	if err != nil {
		return err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: r.Host, Path: "/templates/" + url.PathEscape(r.PathValue("templateID")) + "/files/" + hash,
		RawQuery: url.Values{"token": {tok}}.Encode()}
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": u.String()})
	return nil
}

// putFiles is the PUT of an archive to the URL fileUpload answered: no
// API key, the token in the URL is the credential, checked before the
// body is read. 200, empty; again with a spent token (a retry), 200 and
// nothing changes.
func (f *Facade) putFiles(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		tok := r.URL.Query().Get("token")
		done, err := f.uploads.check(tok)
		if err != nil || done {
			return err
		}
		data, err := f.uploads.receive(w, r)
		if err != nil {
			return err
		}
		return f.uploads.put(tok, data)
	}()
	if err != nil {
		f.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// buildStartBody is TemplateBuildStartV2.
type buildStartBody struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry map[string]any  `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
	Steps             []buildStepBody `json:"steps"`
}

// buildStepBody is TemplateStep.
type buildStepBody struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// startBuild is POST /v2/templates/{templateID}/builds/{buildID}: the
// steps of a requested build become a recipe and its build starts; 202,
// empty. Again for a started build: 202, nothing more.
func (f *Facade) startBuild(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body buildStartBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	id := r.PathValue("buildID")
	b, ok := f.pending.get(c.Owner, id)
	if !ok || b.name != r.PathValue("templateID") {
		return errorf(http.StatusNotFound, "build %s of template %s not found: request it again (POST /v3/templates)", id, r.PathValue("templateID"))
	}
	if b.templateID == "" {
		recipe, err := f.recipeOf(c.Owner, body)
		if err != nil {
			return err
		}
		recipe.Name, recipe.Tags, recipe.ID = b.name, b.tags, id
		t, _, err := f.svc.BuildTemplate(r.Context(), c, recipe)
		if service.Is(err, service.ErrImageNotPresent) && !service.IsPullRefusal(err) {
			return badRequest("%v", err)
		}
		if err != nil {
			return err
		}
		f.pending.started(id, t.ID)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// recipeOf turns E2B's steps into the service's recipe.
func (f *Facade) recipeOf(owner string, body buildStartBody) (service.Recipe, error) {
	var rec service.Recipe
	// Over a built-in base (which has E2B's user), the template's user,
	// who runs the start command and is envd's default, is E2B's "user"
	// unless a USER step says otherwise. The steps run as root.
	builtinBase := false
	switch {
	case len(body.FromImageRegistry) > 0:
		return rec, badRequest("fromImageRegistry: sandboxd takes registry credentials through its own API (POST /v1/registries), never in a build; store them there and name the image in fromImage")
	case body.FromTemplate != "":
		from := strings.TrimSuffix(body.FromTemplate, ":"+e2bDefaultTag)
		if img, builtin := f.images[from]; builtin {
			rec.Base, builtinBase = img, true // "" is the daemon's default
		} else {
			rec.FromTemplate = from
		}
	case body.FromImage == "" || body.FromImage == e2bBaseImage:
		builtinBase = true // the daemon's default
	default:
		rec.Base = body.FromImage
		if img, builtin := f.images[body.FromImage]; builtin {
			rec.Base, builtinBase = img, true // "" is the daemon's default
		}
	}
	rec.StartCmd, rec.ReadyCmd, rec.NoCache = body.StartCmd, body.ReadyCmd, body.Force
	if len(body.Steps) > maxBuildSteps {
		return rec, badRequest("steps: at most %d", maxBuildSteps)
	}
	// The working directory as far as the translation knows it: "" until
	// an absolute WORKDIR (the base's, which only the build knows; a
	// relative WORKDIR before any absolute one goes to the service as it
	// is and resolves there against the base's, as Docker's does).
	workdir := ""
	budget := newCopyBudget()
	for i, st := range body.Steps {
		rec.NoCache = rec.NoCache || st.Force
		arg := func(k int) string {
			if k < len(st.Args) {
				return st.Args[k]
			}
			return ""
		}
		bad := func(format string, args ...any) error {
			return badRequest("steps[%d] (%s): %s", i, st.Type, fmt.Sprintf(format, args...))
		}
		switch st.Type {
		case "RUN":
			if arg(0) == "" {
				return rec, bad("a command is required")
			}
			rec.Steps = append(rec.Steps, service.Step{Run: arg(0), User: arg(1)}) // this step's user only
		case "COPY":
			archive, ok := f.uploads.get(owner, strings.ToLower(st.FilesHash))
			if !ok {
				return rec, bad("the files of %q (hash %s) were not uploaded, or were dropped: build again", arg(0), st.FilesHash)
			}
			mode, err := parseMode(arg(3))
			if err != nil {
				return rec, bad("%v", err)
			}
			steps, err := copySteps(archive, copyArgs{src: arg(0), dest: arg(1), workdir: workdir, mode: mode, owner: arg(2)}, budget)
			if err != nil {
				return rec, bad("%v", err)
			}
			rec.Steps = append(rec.Steps, steps...)
		case "ENV":
			if len(st.Args)%2 != 0 {
				return rec, bad("args must be name, value pairs")
			}
			env := map[string]string{}
			for k := 0; k < len(st.Args); k += 2 {
				env[st.Args[k]] = st.Args[k+1]
			}
			if len(env) > 0 {
				rec.Steps = append(rec.Steps, service.Step{Env: env})
			}
		case "WORKDIR":
			if arg(0) == "" {
				return rec, bad("a directory is required")
			}
			step := path.Clean(arg(0)) // a relative one is under the last
			switch {
			case path.IsAbs(step):
				workdir = step
			case workdir != "":
				workdir = path.Join(workdir, step)
				step = workdir
			}
			rec.Steps = append(rec.Steps, service.Step{Workdir: step})
		case "USER":
			if arg(0) == "" {
				return rec, bad("a user is required")
			}
			rec.Steps = append(rec.Steps, service.Step{User: arg(0)})
		default:
			return rec, bad("sandboxd builds RUN, COPY, ENV, WORKDIR and USER steps")
		}
	}
	if builtinBase && !slices.ContainsFunc(rec.Steps, func(st service.Step) bool { return st.User != "" && st.Run == "" }) {
		rec.Steps = append(rec.Steps, service.Step{User: "user"})
	}
	return rec, nil
}

// e2bBaseImage is the SDK's default base image: the daemon's default.
const e2bBaseImage = "e2bdev/base"

// buildStatus is GET /templates/{templateID}/builds/{buildID}/status
// ?logsOffset=N: TemplateBuildInfo, its log entries the build's output
// lines from the N-th on.
func (f *Facade) buildStatus(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	id := r.PathValue("buildID")
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return badRequest("logsOffset must be a non-negative integer")
		}
		offset = n
	}
	templateID := id
	if b, ok := f.pending.get(c.Owner, id); ok {
		if b.templateID == "" {
			writeJSON(w, http.StatusOK, buildInfo(r.PathValue("templateID"), id, "waiting", nil, ""))
			return nil
		}
		templateID = b.templateID
	}
	t, err := f.svc.GetTemplate(r.Context(), c, templateID)
	if err != nil {
		return errorf(http.StatusNotFound, "build %s not found", id)
	}
	lines, err := f.svc.BuildLogLines(r.Context(), c, t.ID, offset)
	if err != nil {
		return err
	}
	status := map[service.TemplateState]string{
		service.TemplateBuilding: "building", service.TemplateReady: "ready", service.TemplateFailed: "error",
	}[t.State]
	writeJSON(w, http.StatusOK, buildInfo(r.PathValue("templateID"), id, status, lines, t.Error))
	return nil
}

// logEntry is BuildLogEntry.
type logEntry struct {
	Timestamp string `json:"timestamp"`
	Level     string `json:"level"`
	Message   string `json:"message"`
}

func buildInfo(templateID, buildID, status string, lines []string, failure string) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	entries := make([]logEntry, len(lines))
	logs := make([]string, len(lines))
	for i, l := range lines {
		entries[i] = logEntry{Timestamp: now, Level: "info", Message: l}
		logs[i] = now + " " + l
	}
	out := map[string]any{
		"templateID": templateID, "buildID": buildID, "status": status, "logEntries": entries, "logs": logs,
	}
	if status == "error" {
		out["reason"] = map[string]any{"message": cmp.Or(failure, "the build failed")}
	}
	return out
}

// templatePair is GET /templates/{a}/{b}: /templates/aliases/{alias}
// and /templates/{templateID}/tags, which one ServeMux pattern each
// would make ambiguous (/templates/aliases/tags matches both).
func (f *Facade) templatePair(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "aliases":
		return f.aliasExists(w, r, c, b)
	case b == "tags":
		return f.templateTags(w, r, c, a)
	}
	return errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path)
}

// aliasExists is GET /templates/aliases/{alias}: 200
// TemplateAliasResponse when the caller has a template of that name (or
// it is a built-in's), else 404.
func (f *Facade) aliasExists(w http.ResponseWriter, r *http.Request, c service.Caller, alias string) error {
	if _, builtin := f.images[alias]; builtin {
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
		return nil
	}
	if _, err := f.svc.TemplateTags(r.Context(), c, alias); err != nil {
		if service.Is(err, service.ErrNotFound) {
			return errorf(http.StatusNotFound, "template %q not found", alias)
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
	return nil
}

// templateTags is GET /templates/{templateID}/tags: TemplateTag[],
// newest first.
func (f *Facade) templateTags(w http.ResponseWriter, r *http.Request, c service.Caller, templateID string) error {
	tags, err := f.svc.TemplateTags(r.Context(), c, templateID)
	if err != nil {
		return err
	}
	out := make([]map[string]any, len(tags))
	for i, t := range tags {
		out[i] = map[string]any{"tag": e2bTag(t.Tag), "buildID": t.TemplateID, "createdAt": t.CreatedAt.Format(time.RFC3339Nano)}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// assignTagsBody is AssignTemplateTagsRequest.
type assignTagsBody struct {
	Target string   `json:"target"`
	Tags   []string `json:"tags"`
}

// assignTags is POST /templates/tags {target: "name:tag", tags}: the
// tags of target's name point to the build target points to; 201
// AssignedTemplateTags.
func (f *Facade) assignTags(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body assignTagsBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	name, tag, err := templateName(body.Target)
	if err != nil {
		return err
	}
	tags := serviceTags(body.Tags)
	t, err := f.svc.TagTemplate(r.Context(), c, name+":"+tag, name, tags)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": t.ID, "tags": body.Tags})
	return nil
}

// removeTagsBody is DeleteTemplateTagsRequest.
type removeTagsBody struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// removeTags is DELETE /templates/tags {name, tags}: 204, whether the
// name had them or not.
func (f *Facade) removeTags(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body removeTagsBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	name, _, err := templateName(body.Name)
	if err != nil {
		return err
	}
	tags := serviceTags(body.Tags)
	// Tags already gone are no error: a retried removal is answered as
	// the first one was.
	if err := f.svc.UntagTemplate(r.Context(), c, name, tags); err != nil && !service.Is(err, service.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteNamedTemplate deletes every build of the caller's template name
// (E2B deletes a template with all its builds): the ones its tags point
// to and the others made under it, but a build a tag of another name
// points to (which keeps that name). A build sandboxes were created from
// and still exist stays, and the call answers 409 naming it; the rest
// are deleted.
func (f *Facade) deleteNamedTemplate(ctx context.Context, c service.Caller, name string) error {
	all, err := f.svc.ListTemplates(ctx, c)
	if err != nil {
		return err
	}
	var inUse []string
	found := false
	for _, t := range all {
		ofName, ofOther := t.Name == name && t.Kind == service.TemplateKindBuild, false
		for _, ref := range t.Tags {
			n, _, _ := strings.Cut(ref, ":")
			ofName, ofOther = ofName || n == name, ofOther || n != name
		}
		if t.Owner != c.Owner || !ofName || ofOther {
			continue
		}
		found = true
		err := f.svc.DeleteTemplate(ctx, c, t.ID)
		switch {
		case service.Is(err, service.ErrConflict):
			inUse = append(inUse, t.ID)
		case err != nil && !service.Is(err, service.ErrNotFound):
			return err
		}
	}
	// What is left of the name (tags on builds another name also holds).
	if tags, err := f.svc.TemplateTags(ctx, c, name); err == nil {
		found = true
		left := make([]string, len(tags))
		for i, t := range tags {
			left[i] = t.Tag
		}
		if err := f.svc.UntagTemplate(ctx, c, name, left); err != nil && !service.Is(err, service.ErrNotFound) {
			return err
		}
	}
	switch {
	case !found:
		return errorf(http.StatusNotFound, "template %q not found", name)
	case len(inUse) > 0:
		return errorf(http.StatusConflict, "template %s: builds %s are in use (kill the sandboxes created from them, or wait for their builds to end)", name, strings.Join(inUse, ", "))
	}
	return nil
}

// readAllLimit reads r's body, at most limit bytes.
func readAllLimit(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, errorf(http.StatusRequestEntityTooLarge, "the archive is larger than %d bytes", limit)
	}
	if err != nil {
		return nil, badRequest("read body: %v", err)
	}
	return b, nil
}
