package service

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Templates, snapshots and forks are one thing underneath: an image the
// engine captured from a sandbox's filesystem (runtime.Images.Commit),
// recorded as a template of its owner's. A build runs a recipe's steps in
// a sandbox of the base image and captures it; a snapshot captures a
// sandbox as it is; a fork captures one and creates sandboxes from the
// capture, which is then removed once none of them is left.
//
// The capture is never the sandbox's configuration: the image's labels
// and entrypoint are the base image's, and its env the base image's plus
// a build's env or a snapshot's sandbox's (non-secret) env. No agent
// token and no secret env is ever in an image: the token's variable is
// there empty (runtime.Images.Commit), the secret env never was in the
// container.

// templateRepo is the engine repository of every template image; the tag
// is the template's id. Creates name templates, never these images.
const templateRepo = "sandboxd/template"

func templateRef(id string) string { return templateRepo + ":" + id }

// isTemplateImage reports whether ref names a template's image.
func isTemplateImage(ref string) bool {
	return strings.HasPrefix(ref, templateRepo+":") || strings.HasPrefix(ref, "docker.io/"+templateRepo+":")
}

// buildOwner owns the sandboxes builds run in: no token can have it, and
// a start destroys what a dead process left of them.
const buildOwner = "sandboxd:build"

// labelTemplate marks a template's image with its id.
const labelTemplate = "sandboxd.template"

// Bounds of a recipe's copy steps: the files and links, and their bytes
// together.
const (
	MaxCopySteps = 4096
	MaxCopyBytes = 8 << 20
)

// Bounds of a recipe and of a build.
const (
	maxRecipeSteps   = 64 // of the steps but copies
	maxCommandLen    = 16 << 10
	maxBuildLogBytes = 1 << 20
	buildTimeout     = 30 * time.Minute
	readyTimeout     = time.Minute
	maxForks         = 16
	maxTemplateTags  = 16
	// forkGrace keeps a fork's capture that no sandbox uses yet from the
	// sweep while its creates run.
	forkGrace = 10 * time.Minute
)

// TemplateState and TemplateKind are the store's, for the edges (which
// do not import the store).
type (
	TemplateState = store.TemplateState
	TemplateKind  = store.TemplateKind
)

// The states and kinds of a template.
const (
	TemplateBuilding = store.TemplateBuilding
	TemplateReady    = store.TemplateReady
	TemplateFailed   = store.TemplateFailed

	TemplateKindBuild    = store.TemplateBuild
	TemplateKindSnapshot = store.TemplateSnapshot
)

// Template is an image sandboxes can be created from.
type Template struct {
	ID        string              `json:"id"`
	Owner     string              `json:"owner"`
	Name      string              `json:"name,omitempty"`
	Kind      store.TemplateKind  `json:"kind"`
	State     store.TemplateState `json:"state"`
	BaseImage string              `json:"base_image,omitempty"`
	SourceID  string              `json:"source_id,omitempty"`
	SizeBytes int64               `json:"size_bytes"`
	Error     string              `json:"error,omitempty"`
	StartCmd  string              `json:"start_cmd,omitempty"`
	ReadyCmd  string              `json:"ready_cmd,omitempty"`
	// User runs the start command (a recipe's last user step).
	User string `json:"user,omitempty"`
	// Tags are the name:tag references that point to it now.
	Tags      []string  `json:"tags,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// templateSpec is what a template keeps for the sandboxes made from it
// (store.Template.Spec).
type templateSpec struct {
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`
	User     string `json:"user,omitempty"`
	Workdir  string `json:"workdir,omitempty"`
	// Tags are the tags of the template's name a build points at it once
	// it is ready.
	Tags []string `json:"tags,omitempty"`
}

func fromTemplateRow(t store.Template) Template {
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec) // written by us
	return Template{
		ID: t.ID, Owner: t.Owner, Name: t.Name, Kind: t.Kind, State: t.State, BaseImage: t.BaseImage,
		SourceID: t.SourceID, SizeBytes: t.SizeBytes, Error: t.Error, StartCmd: spec.StartCmd,
		ReadyCmd: spec.ReadyCmd, User: spec.User, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
	}
}

// Recipe is how to build a template: a base image and steps, run in order
// in a sandbox of the base (with no network) and captured.
type Recipe struct {
	// Name names the template once it is built: the build points
	// name:tag at it for each of Tags (default: latest), moving them
	// from a template they pointed to before (which stays, by its id).
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags,omitempty"`
	// Base is the image to build over (default: the daemon's), or
	// FromTemplate one of the owner's templates (an id or name[:tag]),
	// whose start command and ready check the build keeps unless it sets
	// its own.
	Base         string `json:"base,omitempty"`
	FromTemplate string `json:"from_template,omitempty"`
	Steps        []Step `json:"steps,omitempty"`
	// NoCache builds even when the owner built the same recipe before.
	NoCache bool `json:"no_cache,omitempty"`
	// StartCmd runs (as a shell line, in the background) in every sandbox
	// created from the template; ReadyCmd, when set, is run until it
	// exits 0 before the create answers.
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`

	// ID, set by an edge that hands out the id before the build (E2B),
	// is the new template's id; a build of an id the owner already has
	// is that template, however its recipe reads (a retry).
	ID string `json:"-"`
	// NewName refuses a Name that already points to another template
	// (Daytona's snapshot names are unique, not moved).
	NewName bool `json:"-"`
}

// Step is one step of a recipe: exactly one field is set, but for a run
// step's user.
type Step struct {
	// Run is a shell line (/bin/sh -c) run with the env, workdir and user
	// of the steps before it (User, when set beside it, for this step
	// only); a non-zero exit fails the build.
	Run string `json:"run,omitempty"`
	// Copy writes a file.
	Copy *CopyStep `json:"copy,omitempty"`
	// Env sets variables for later steps and for the template's sandboxes.
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the directory later steps and the start command run in
	// (created); the image's working directory.
	Workdir string `json:"workdir,omitempty"`
	// User runs later steps and the start command as this user; beside
	// Run, that step only.
	User string `json:"user,omitempty"`
}

// CopyStep writes Content to Path (parents created), as the steps' user,
// with Mode's permission bits when it is set and owned by Owner when it
// is set (written as root, then given to Owner); or, when Link is set,
// makes Path a symbolic link to Link.
type CopyStep struct {
	Path    string `json:"path"`
	Content []byte `json:"content,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Link    string `json:"link,omitempty"`
}

// safeWorkdir: the engine starts a container's first process in its
// image's working directory, before anything of the sandbox's runs, so a
// template's is never a path into the kernel's views (a /proc/self/fd
// path is how a working directory escapes the container's root).
func safeWorkdir(w string) bool {
	if !strings.HasPrefix(w, "/") || strings.ContainsRune(w, 0) || path.Clean(w) != w {
		return false
	}
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		if w == p || strings.HasPrefix(w, p+"/") {
			return false
		}
	}
	return true
}

// validTemplateName: a DNS label that is not an id's shape.
func validTemplateName(name string) bool {
	return naming.ValidLabel(name) && !strings.HasPrefix(name, "tpl-")
}

// validTag: an image tag's shape (letters, digits, '_', '.' and '-', at
// most 128, not starting with '.' or '-').
func validTag(tag string) bool {
	if tag == "" || len(tag) > 128 || tag[0] == '.' || tag[0] == '-' {
		return false
	}
	for _, c := range []byte(tag) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

const (
	msgTemplateName = "must be a DNS label (lowercase letters, digits and '-', at most 63) not starting with tpl-"
	msgTemplateTag  = "must be letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'"
)

// ParseTemplateRef splits a template reference, name or name:tag, into
// its name and tag (store.DefaultTag when it has none); ok is false when
// either is malformed.
func ParseTemplateRef(ref string) (name, tag string, ok bool) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !hasTag {
		tag = store.DefaultTag
	}
	return name, tag, validTemplateName(name) && validTag(tag)
}

func validateTags(field string, tags []string) error {
	if len(tags) > maxTemplateTags {
		return invalid(field, "at most %d", maxTemplateTags)
	}
	for i, tag := range tags {
		if !validTag(tag) {
			return invalid(fmt.Sprintf("%s[%d]", field, i), msgTemplateTag)
		}
	}
	return nil
}

// validUser: a user name (or id) the agent can run as, or empty.
func validUser(u string) bool {
	return len(u) <= 64 && !strings.ContainsAny(u, ":/ \t\n\x00")
}

// recipeTags is the tags a build of r points at its template.
func recipeTags(r Recipe) []string {
	if r.Name == "" {
		return nil
	}
	if len(r.Tags) == 0 {
		return []string{store.DefaultTag}
	}
	return r.Tags
}

func (r Recipe) validate() error {
	if r.Name != "" && !validTemplateName(r.Name) {
		return invalid("name", msgTemplateName)
	}
	if err := validateTags("tags", r.Tags); err != nil {
		return err
	}
	if len(r.Tags) > 0 && r.Name == "" {
		return invalid("tags", "need a name")
	}
	if r.ID != "" && !validTemplateID(r.ID) {
		return invalid("id", "must be tpl- and 16 hex digits")
	}
	if r.FromTemplate != "" && r.Base != "" {
		return invalid("from_template", "give either base or from_template, not both")
	}
	if r.Base != "" {
		if err := validateImage(r.Base); err != nil {
			return invalid("base", "must be an image reference without spaces, at most %d bytes", maxImageLen)
		}
		if isTemplateImage(r.Base) {
			return invalid("base", "must be an image on this host, not a template's image")
		}
	}
	copies := 0
	for _, st := range r.Steps {
		if st.Copy != nil {
			copies++
		}
	}
	if len(r.Steps)-copies > maxRecipeSteps || copies > MaxCopySteps {
		return invalid("steps", "at most %d copy steps and %d others", MaxCopySteps, maxRecipeSteps)
	}
	copied := 0
	for i, st := range r.Steps {
		field := fmt.Sprintf("steps[%d]", i)
		set := 0
		// A run step's user is whom it runs as (that step only).
		for _, b := range []bool{st.Run != "", st.Copy != nil, st.Env != nil, st.Workdir != "", st.User != "" && st.Run == ""} {
			if b {
				set++
			}
		}
		if set != 1 {
			return invalid(field, "must set exactly one of run (with its user, if any), copy, env, workdir and user")
		}
		switch {
		case len(st.Run) > maxCommandLen || strings.ContainsRune(st.Run, 0):
			return invalid(field+".run", "must be at most %d bytes, without NUL", maxCommandLen)
		case st.Copy != nil:
			if err := validPath(st.Copy.Path); err != nil || !strings.HasPrefix(st.Copy.Path, "/") {
				return invalid(field+".copy.path", "must be an absolute path without NUL")
			}
			if st.Copy.Mode > 0o7777 {
				return invalid(field+".copy.mode", "must be permission bits (at most 07777)")
			}
			if st.Copy.Link != "" && (len(st.Copy.Content) > 0 || st.Copy.Mode != 0 || validPath(st.Copy.Link) != nil) {
				return invalid(field+".copy.link", "a link has a target without NUL, and no content or mode")
			}
			if !validUser(st.Copy.Owner) {
				return invalid(field+".copy.owner", "must be a user name")
			}
			if copied += len(st.Copy.Content); copied > MaxCopyBytes {
				return invalid(field+".copy.content", "the copy steps carry more than %d bytes together", MaxCopyBytes)
			}
		case st.Env != nil:
			if err := validateEnv(field+".env", st.Env); err != nil {
				return err
			}
		case st.Workdir != "" && !safeWorkdir(st.Workdir):
			return invalid(field+".workdir", "must be a clean absolute path without NUL, outside /proc, /sys and /dev")
		case !validUser(st.User):
			return invalid(field+".user", "must be a user name")
		}
	}
	for _, c := range []struct{ field, v string }{{"start_cmd", r.StartCmd}, {"ready_cmd", r.ReadyCmd}} {
		if len(c.v) > maxCommandLen || strings.ContainsRune(c.v, 0) {
			return invalid(c.field, "must be at most %d bytes, without NUL", maxCommandLen)
		}
	}
	if r.ReadyCmd != "" && r.StartCmd == "" {
		return invalid("ready_cmd", "needs a start_cmd")
	}
	return nil
}

// hash identifies what a build of r makes: its name, base, steps and
// commands and the id of the image it builds over (a rebuilt base is
// another build). The tags it points are not part of it: a build of the
// same recipe under another tag is a cache hit that moves the tag.
func (r Recipe) hash(baseID string) string {
	b, _ := json.Marshal(struct {
		Name         string `json:"name,omitempty"`
		Base         string `json:"base,omitempty"`
		FromTemplate string `json:"from_template,omitempty"`
		Steps        []Step `json:"steps,omitempty"`
		StartCmd     string `json:"start_cmd,omitempty"`
		ReadyCmd     string `json:"ready_cmd,omitempty"`
		BaseID       string
	}{r.Name, r.Base, r.FromTemplate, r.Steps, r.StartCmd, r.ReadyCmd, baseID}) // strings, maps and byte slices always marshal
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// NewTemplateID returns a fresh template id, for an edge that hands one
// out before its build (Recipe.ID).
func NewTemplateID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "tpl-" + hex.EncodeToString(b[:])
}

func validTemplateID(id string) bool {
	h, ok := strings.CutPrefix(id, "tpl-")
	_, err := hex.DecodeString(h)
	return ok && len(h) == 16 && err == nil && strings.ToLower(h) == h
}

// images returns the engine's image side, or ErrUnavailable.
func (s *Service) images() (runtime.Images, error) {
	if s.Images == nil {
		return nil, fmt.Errorf("templates need an engine that captures images: %w", ErrUnavailable)
	}
	return s.Images, nil
}

// checkStorage refuses a new template when the owner's templates already
// hold TemplateStorageMB.
func (s *Service) checkStorage(ctx context.Context, owner string) error {
	if s.cfg.TemplateStorageMB <= 0 {
		return nil
	}
	used, err := s.Store.TemplateBytes(ctx, owner)
	if err != nil {
		return err
	}
	if used >= s.cfg.TemplateStorageMB<<20 {
		return &QuotaError{Reason: fmt.Sprintf("the owner's templates and snapshots hold %d MB of %d MB", used>>20, s.cfg.TemplateStorageMB)}
	}
	return nil
}

// BuildTemplate starts a build of r for the caller's owner and returns
// its template, building. The same recipe over the same base again is the
// same template (cached is set): a ready one gets r's tags at once, a
// building one is answered only to a retry (the same tags), as a failed
// one is built anew. The build goes on in the background; FollowBuildLog
// streams its output.
func (s *Service) BuildTemplate(ctx context.Context, c Caller, r Recipe) (t Template, cached bool, err error) {
	imgs, err := s.images()
	if err != nil {
		return Template{}, false, err
	}
	if err := s.requireReady(); err != nil {
		return Template{}, false, err
	}
	if err := r.validate(); err != nil {
		return Template{}, false, err
	}
	if r.ID != "" {
		if found, err := s.Store.GetTemplate(ctx, r.ID); err == nil {
			if found.Owner != c.Owner {
				return Template{}, false, fmt.Errorf("template id %s is taken: %w", r.ID, ErrConflict)
			}
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		}
	}
	spec := templateSpec{StartCmd: r.StartCmd, ReadyCmd: r.ReadyCmd, Tags: recipeTags(r)}
	if r.FromTemplate != "" {
		from, err := s.lookupTemplate(ctx, c, r.FromTemplate)
		if err != nil || from.Kind == store.TemplateFork {
			return Template{}, false, &FieldError{Field: "from_template", Reason: fmt.Sprintf("template %q not found", r.FromTemplate), Kind: ErrNotFound}
		}
		if from.State != store.TemplateReady {
			return Template{}, false, fmt.Errorf("template %s is %s, not ready: %w", from.ID, from.State, ErrConflict)
		}
		var fromSpec templateSpec
		_ = json.Unmarshal(from.Spec, &fromSpec) // written by us
		if spec.StartCmd == "" {
			spec.StartCmd, spec.ReadyCmd = fromSpec.StartCmd, fromSpec.ReadyCmd
		}
		spec.User, spec.Workdir = fromSpec.User, fromSpec.Workdir
		r.Base = from.Image
		if err := s.ensureCopy(ctx, from.Image); err != nil { // another node's template
			return Template{}, false, err
		}
	}
	baseRef := cmp.Or(r.Base, s.cfg.DefaultImage)
	if r.FromTemplate == "" && !isTemplateImage(baseRef) {
		// A base the engine lacks is pulled (pull.go).
		if err := s.ensureImage(ctx, c.Owner, baseRef); err != nil {
			return Template{}, false, err
		}
	}
	base, err := imgs.InspectImage(ctx, baseRef)
	if errors.Is(err, runtime.ErrImageNotFound) {
		return Template{}, false, &FieldError{Field: "base", Reason: fmt.Sprintf("image %q is not present on this host", baseRef), Kind: ErrImageNotPresent}
	}
	if err != nil {
		return Template{}, false, err
	}
	if r.FromTemplate == "" && base.Config.Labels[labelTemplate] != "" {
		return Template{}, false, &FieldError{Field: "base", Reason: fmt.Sprintf("image %q is not present on this host", baseRef), Kind: ErrImageNotPresent}
	}
	hash := r.hash(base.ID)
	if !r.NoCache {
		found, err := s.Store.FindTemplateByRecipe(ctx, c.Owner, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return Template{}, false, err
		case found.State == store.TemplateReady && r.ID != "":
			// The edge handed out r.ID: the build is a new template that
			// is the found one's image under another reference.
			t, err := s.copyTemplate(ctx, imgs, found, r)
			return t, true, err
		case found.State == store.TemplateReady:
			if err := s.checkNewName(ctx, c, r, found.ID); err != nil {
				return Template{}, false, err
			}
			if tags := recipeTags(r); len(tags) > 0 {
				if err := s.pointTags(ctx, found, r.Name, tags); err != nil {
					return Template{}, false, err
				}
			}
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		case sameTags(found, spec.Tags):
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		}
	}
	if err := s.checkNewName(ctx, c, r, ""); err != nil {
		return Template{}, false, err
	}
	if err := s.checkStorage(ctx, c.Owner); err != nil {
		return Template{}, false, err
	}
	queued, err := s.builds.enqueue(c.Owner)
	if err != nil {
		return Template{}, false, err
	}
	job := buildJob{recipe: r, base: base, user: spec.User, workdir: spec.Workdir}
	job.recipe.Base = baseRef
	for _, st := range r.Steps {
		if st.Run == "" {
			spec.User = cmp.Or(st.User, spec.User)
		}
		spec.Workdir = cmp.Or(st.Workdir, spec.Workdir)
	}
	specJSON, _ := json.Marshal(spec)
	id := cmp.Or(r.ID, NewTemplateID())
	// The build's sandbox counts against the owner's quota (sandboxes,
	// CPU, memory) and the host's capacity from now until the build ends,
	// however it ends (runBuild releases it), queued or running: a build
	// the quota has no room for is refused now, with the quota's error,
	// rather than failing after its wait or holding a sandbox past it.
	hold := buildHold(id)
	err = s.Admission.ReserveWithin(hold, buildRequest(c.Owner), c.Quota)
	// As for a create: idle sandboxes of the pool make room on a full host.
	for ex := (*admission.ExhaustedError)(nil); errors.As(err, &ex) && s.evictIdle(ctx); {
		err = s.Admission.ReserveWithin(hold, buildRequest(c.Owner), c.Quota)
	}
	if err != nil {
		queued.cancel()
		return Template{}, false, admissionErr(err)
	}
	row, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: id, Owner: c.Owner, Name: r.Name, Kind: store.TemplateBuild, Image: templateRef(id),
		BaseImage: baseRef, RecipeHash: hash, Spec: specJSON,
	})
	if err != nil {
		queued.cancel()
		s.Admission.Release(hold)
	}
	if errors.Is(err, store.ErrIDConflict) && r.ID != "" {
		// A retry of the same id that raced this one: that one's.
		if found, gerr := s.Store.GetTemplate(ctx, r.ID); gerr == nil && found.Owner == c.Owner {
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		}
	}
	if err != nil {
		return Template{}, false, s.mapTemplateErr(err, r.Name)
	}
	job.t, job.log, job.queued, job.hold = row, s.builds.open(id), queued, hold
	go s.runBuild(job)
	return fromTemplateRow(row), false, nil
}

// copyTemplate makes template r.ID, ready, of the image of from (a
// build of the same recipe): the engine's tag of the same image, no
// copy. It counts from's size against the owner's storage again, which
// overstates what the engine holds rather than understate it once from is
// deleted. A failure leaves neither the row nor the tag.
func (s *Service) copyTemplate(ctx context.Context, imgs runtime.Images, from store.Template, r Recipe) (Template, error) {
	if err := s.checkNewName(ctx, Caller{Owner: from.Owner}, r, ""); err != nil {
		return Template{}, err
	}
	if err := s.checkStorage(ctx, from.Owner); err != nil {
		return Template{}, err
	}
	if err := s.ensureCopy(ctx, from.Image); err != nil { // another node's build of the recipe
		return Template{}, err
	}
	var spec templateSpec
	_ = json.Unmarshal(from.Spec, &spec) // written by us
	spec.Tags = recipeTags(r)
	specJSON, _ := json.Marshal(spec)
	row, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: r.ID, Owner: from.Owner, Name: r.Name, Kind: store.TemplateBuild, Image: templateRef(r.ID),
		BaseImage: from.BaseImage, RecipeHash: from.RecipeHash, Spec: specJSON,
	})
	if err != nil {
		return Template{}, s.mapTemplateErr(err, r.Name)
	}
	err = imgs.TagImage(ctx, from.Image, row.Image)
	if err == nil {
		row, err = s.finishTemplate(ctx, row, from.SizeBytes, spec.Tags)
	}
	if err != nil {
		s.dropTemplate(context.WithoutCancel(ctx), imgs, row)
		return Template{}, fmt.Errorf("template %s as %s: %w", from.ID, r.ID, err)
	}
	return s.withTags(ctx, fromTemplateRow(row)), nil
}

// checkNewName refuses, for a recipe that wants a new name, a name that
// points to a template other than except.
func (s *Service) checkNewName(ctx context.Context, c Caller, r Recipe, except string) error {
	if !r.NewName || r.Name == "" {
		return nil
	}
	t, err := s.Store.GetTemplateByTag(ctx, c.Owner, r.Name, store.DefaultTag)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case t.ID != except:
		return fmt.Errorf("a template named %q already exists: %w", r.Name, ErrNameConflict)
	}
	return nil
}

// sameTags reports whether building template t will point tags.
func sameTags(t store.Template, tags []string) bool {
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec)
	return slices.Equal(spec.Tags, tags)
}

// buildHold names an admission reservation for a build of template id:
// not a sandbox id, and one per call, so a racing retry of the same id
// that loses never releases the winner's.
func buildHold(id string) string { return "build:" + id + ":" + NewTemplateID() }

// buildRequest is what a build's sandbox holds for owner: a sandbox of
// the default size (the build creates its sandbox with no size).
func buildRequest(owner string) admission.Request {
	return admission.Request{MilliCPU: defaultMilliCPU, MemoryMB: defaultMemoryMB, Owner: owner}
}

// buildJob is one build: template t from recipe over base (Recipe.Base
// is its reference), its steps starting as user in workdir (a base
// template's).
type buildJob struct {
	t             store.Template
	recipe        Recipe
	base          runtime.Image
	user, workdir string
	log           *buildLog
	queued        *queuedBuild
	// hold is the build's admission reservation (buildHold).
	hold string
}

// runBuild builds a template in a sandbox of the base image and settles
// it: ready with its image, or failed with the reason (its image
// removed). The build sandbox is destroyed either way.
func (s *Service) runBuild(job buildJob) {
	t, r, log := job.t, job.recipe, job.log
	defer s.Admission.Release(job.hold) // BuildTemplate reserved it; released below, this is for a panic
	qctx, qcancel := context.WithTimeout(context.Background(), buildTimeout)
	err := job.queued.wait(qctx, log)
	qcancel()
	defer job.queued.cancel() // its slot, once it has one
	// The build's own time starts with its slot.
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	start := time.Now()
	if err == nil {
		err = s.build(ctx, job)
	}
	// The build's sandbox is gone (build destroys it before it returns):
	// its hold goes before anyone can see the build end (its state, its
	// log), so that a create made on seeing it is not refused for it.
	s.Admission.Release(job.hold)
	if err == nil {
		var img runtime.Image
		if img, err = s.Images.InspectImage(ctx, t.Image); err == nil {
			_, err = s.finishTemplate(ctx, t, img.Size, recipeTags(r))
		}
	}
	if err != nil {
		log.printf("build failed: %v\n", err)
		if _, ferr := s.Store.FailTemplate(context.WithoutCancel(ctx), t.ID, err.Error()); ferr != nil {
			s.Logger.Warn("template: mark a failed build", "template", t.ID, "err", ferr)
		}
		if rerr := s.Images.RemoveImage(context.WithoutCancel(ctx), t.Image); rerr != nil {
			s.Logger.Warn("template: remove the image of a failed build", "template", t.ID, "err", rerr)
		}
	} else {
		log.printf("built %s in %s\n", t.ID, time.Since(start).Round(time.Millisecond))
	}
	log.finish()
	time.AfterFunc(buildLogKeep, func() { s.builds.drop(t.ID) })
}

func (s *Service) build(ctx context.Context, job buildJob) error {
	t, r, log := job.t, job.recipe, job.log
	log.printf("build %s from %s\n", t.ID, cmp.Or(r.FromTemplate, r.Base))
	// The base was checked by BuildTemplate: an image that is no
	// template's, or a template of the owner's, whose start command a
	// build does not run.
	sb, err := s.createChain(ctx, CreateRequest{Owner: buildOwner, Image: r.Base, Timeout: buildTimeout}, "", nil, nil)
	if err != nil {
		return fmt.Errorf("start the build sandbox: %w", err)
	}
	defer s.destroyDetached(ctx, sb.ID, "its build ended")
	ac, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return err
	}
	env := map[string]string{}
	workdir, user := job.workdir, job.user
	for i, st := range r.Steps {
		switch {
		case st.Run != "":
			log.printf("step %d: run %s\n", i+1, st.Run)
			if err := s.buildRun(ctx, ac, st.Run, env, workdir, cmp.Or(st.User, user), log); err != nil {
				return fmt.Errorf("step %d (run): %w", i+1, err)
			}
		case st.Copy != nil:
			if err := s.buildCopy(ctx, ac, st.Copy, user, log); err != nil {
				return fmt.Errorf("step %d (copy to %s): %w", i+1, st.Copy.Path, err)
			}
		case st.Env != nil:
			log.printf("step %d: env %s\n", i+1, strings.Join(slices.Sorted(maps.Keys(st.Env)), " "))
			maps.Copy(env, st.Env)
		case st.Workdir != "":
			log.printf("step %d: workdir %s\n", i+1, st.Workdir)
			if err := s.buildRun(ctx, ac, `mkdir -p "$1"`+" && chown \"${2:-root}\" \"$1\"", nil, "", "", log, st.Workdir, user); err != nil {
				return fmt.Errorf("step %d (workdir %s): %w", i+1, st.Workdir, err)
			}
			workdir = st.Workdir
		case st.User != "": // (beside Run, the case above)
			log.printf("step %d: user %s\n", i+1, st.User)
			user = st.User
		}
	}
	cfg := job.base.Config
	cfg.Env = mergeEnvList(cfg.Env, env)
	cfg.WorkingDir = cmp.Or(workdir, cfg.WorkingDir)
	cfg.User = "" // the agent runs as root; the recipe's user runs the start command
	cfg.Labels = s.templateLabels(cfg.Labels, t.ID)
	log.printf("capture\n")
	if _, err := s.Images.Commit(ctx, sb.ID, t.Image, cfg); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// buildCopy runs a copy step: a file or a link, as user, or as root and
// then given to its owner.
func (s *Service) buildCopy(ctx context.Context, ac *agent.Client, c *CopyStep, user string, log *buildLog) error {
	if c.Owner != "" {
		user = "root"
	}
	if c.Link != "" {
		log.printf("link %s to %s\n", c.Path, c.Link)
		if err := s.buildRun(ctx, ac, `mkdir -p "$(dirname -- "$2")" && ln -sfn -- "$1" "$2"`, nil, "", user, log, c.Link, c.Path); err != nil {
			return err
		}
	} else {
		log.printf("copy %d bytes to %s\n", len(c.Content), c.Path)
		if err := ac.Upload(ctx, c.Path, bytes.NewReader(c.Content), user); err != nil {
			return agentErr(err)
		}
		if c.Mode != 0 {
			if err := s.buildRun(ctx, ac, `chmod "$1" "$2"`, nil, "", "", log, strconv.FormatUint(uint64(c.Mode), 8), c.Path); err != nil {
				return err
			}
		}
	}
	if c.Owner != "" {
		if err := s.buildRun(ctx, ac, `chown -h "$1" "$2"`, nil, "", "", log, c.Owner, c.Path); err != nil {
			return err
		}
	}
	return nil
}

// buildRun runs one shell line of a build, its output into the log.
func (s *Service) buildRun(ctx context.Context, ac *agent.Client, line string, env map[string]string, cwd, user string, log *buildLog, args ...string) error {
	cmd := append([]string{"/bin/sh", "-c", line, "sh"}, args...)
	p, err := ac.StartProcess(ctx, agent.StartRequest{Cmd: cmd, Env: env, Cwd: cwd, User: user})
	if err != nil {
		return agentErr(err)
	}
	defer p.Close()
	for {
		out, err := p.Recv()
		if err != nil {
			break // the end of the stream; Wait says how it ended
		}
		log.write(out.Data)
	}
	st, err := p.Wait()
	if err != nil {
		return agentErr(err)
	}
	if !st.Exited || st.Code != 0 {
		return fmt.Errorf("exit code %d", st.Code)
	}
	return nil
}

// mergeEnvList is an image's env (KEY=value) with add's variables set
// over it.
func mergeEnvList(base []string, add map[string]string) []string {
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := add[k]; !replaced {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(add)) {
		out = append(out, k+"="+add[k])
	}
	return out
}

// templateLabels are a template image's labels: its base's, its id, and
// the node that made it (so that a node's cleanup finds its images; a
// container made from it has its own node label over this one).
func (s *Service) templateLabels(base map[string]string, id string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	out[labelTemplate] = id
	out[runtime.LabelNode] = s.cfg.NodeID
	return out
}

// Snapshot captures a sandbox's filesystem (running, paused or stopped)
// as a template of its owner's; a name given moves name:latest to it. It
// holds the sandbox's transition lock: no
// pause, resume, stop or start runs during the capture.
func (s *Service) Snapshot(ctx context.Context, c Caller, idOrName, name string) (Template, error) {
	if name != "" && !validTemplateName(name) {
		return Template{}, invalid("name", msgTemplateName)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Template{}, err
	}
	defer unlock()
	t, err := s.capture(ctx, row, name, store.TemplateSnapshot)
	if err != nil {
		return Template{}, err
	}
	return s.withTags(ctx, fromTemplateRow(t)), nil
}

// capture captures row's sandbox as a template of kind, under its
// transition lock (the caller's).
func (s *Service) capture(ctx context.Context, row store.Sandbox, name string, kind store.TemplateKind) (store.Template, error) {
	imgs, err := s.images()
	if err != nil {
		return store.Template{}, err
	}
	switch {
	case row.Owner == store.PoolOwner || row.Owner == buildOwner:
		return store.Template{}, fmt.Errorf("sandbox %q: %w", row.ID, ErrNotFound)
	case row.State == store.StateCreating || row.State == store.StateError:
		return store.Template{}, fmt.Errorf("sandbox %s is %s: %w", row.ID, row.State, ErrConflict)
	}
	// One capture of an owner's at a time: the storage check and the
	// capture it allows are not raced by another.
	unlockOwner, err := s.captures.lock(ctx, row.Owner)
	if err != nil {
		return store.Template{}, err
	}
	defer unlockOwner()
	if err := s.checkStorage(ctx, row.Owner); err != nil {
		return store.Template{}, err
	}
	// A sandbox made from a template keeps the template's start command.
	var spec json.RawMessage
	baseImage := row.Image
	if from, ok := s.templateOfImage(ctx, row.Image); ok {
		spec, baseImage = from.Spec, from.BaseImage
	}
	base, err := imgs.InspectImage(ctx, row.Image)
	if err != nil {
		return store.Template{}, fmt.Errorf("the image of sandbox %s: %w", row.ID, err)
	}
	id := NewTemplateID()
	t, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: id, Owner: row.Owner, Name: name, Kind: kind, Image: templateRef(id),
		BaseImage: baseImage, SourceID: row.ID, Spec: spec,
	})
	if err != nil {
		return store.Template{}, s.mapTemplateErr(err, name)
	}
	cfg := base.Config
	cfg.Env = mergeEnvList(cfg.Env, row.Env) // what the container has of it: the engine would copy it anyway
	cfg.Labels = s.templateLabels(cfg.Labels, id)
	// The engine finishes a commit whatever the caller does, so the
	// caller's going away does not cut it short here either: its image
	// is then either recorded or removed.
	cctx := context.WithoutCancel(ctx)
	img, err := imgs.Commit(cctx, row.ID, t.Image, cfg)
	if err == nil {
		t, err = s.finishTemplate(cctx, t, img.Size, recipeTags(Recipe{Name: name}))
	}
	if err != nil {
		// The caller hears why; a failed capture is not kept.
		s.dropTemplate(context.WithoutCancel(ctx), imgs, t)
		return store.Template{}, s.engineErr(ctx, "capture", row.ID, err)
	}
	return t, nil
}

// templateOfImage returns the template whose image ref is, if any.
func (s *Service) templateOfImage(ctx context.Context, ref string) (store.Template, bool) {
	if !isTemplateImage(ref) {
		return store.Template{}, false
	}
	t, err := s.Store.GetTemplate(ctx, templateIDOf(ref))
	return t, err == nil && t.Image == ref
}

// Fork makes n sandboxes (1 to 16) from a sandbox's current filesystem,
// each with its own id, token and ports and the source's size, env,
// secret env, tags, network and runtime (not its volumes). All or none:
// when one cannot be made, those made are destroyed. The capture they
// are made from is removed once none of them is left.
func (s *Service) Fork(ctx context.Context, c Caller, idOrName string, n int) ([]*Created, error) {
	if n < 1 || n > maxForks {
		return nil, invalid("count", "must be from 1 to %d", maxForks)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	t, err := s.capture(ctx, row, "", store.TemplateFork)
	unlock()
	if err != nil {
		return nil, err
	}
	req, err := s.forkRequest(ctx, row, t, c)
	if err != nil {
		return nil, err
	}
	out := make([]*Created, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = s.createAs(ctx, req, "", nil, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, cr := range out {
			if cr != nil {
				s.destroyDetached(ctx, cr.ID, "another sandbox of its fork failed")
			}
		}
		return nil, err
	}
	return out, nil
}

// forkRequest is the create of one sandbox of a fork of row from t.
func (s *Service) forkRequest(ctx context.Context, row store.Sandbox, t store.Template, c Caller) (CreateRequest, error) {
	var spec sandboxSpec
	_ = json.Unmarshal(row.Spec, &spec) // written by us
	req := CreateRequest{
		Owner: row.Owner, MilliCPU: row.CPUMillis, MemoryMB: row.MemoryMB, DiskMB: spec.DiskMB, Env: row.Env, Tags: row.Tags,
		Network: spec.Network, Runtime: spec.Runtime, Annotations: spec.Annotations, Quota: c.Quota,
		PauseOnTimeout: spec.PauseOnTimeout, Template: t.ID,
	}
	if len(row.SealedSecrets) > 0 {
		plain, err := s.Keyring.Open(row.SealedSecrets, secretEnvAD(row.ID))
		if err != nil {
			return CreateRequest{}, fmt.Errorf("open the secret env of %s: %w", row.ID, err)
		}
		if err := json.Unmarshal(plain, &req.SecretEnv); err != nil {
			return CreateRequest{}, fmt.Errorf("decode the secret env of %s: %w", row.ID, err)
		}
	}
	if !row.ExpiresAt.IsZero() {
		req.Timeout = max(time.Minute, row.ExpiresAt.Sub(s.Clock()))
	}
	return req, nil
}

// resolveTemplate turns req.Template into the image it creates from, and
// returns what the sandbox runs once created. A template image named as
// an image is refused: only its owner, by the template, creates from it.
func (s *Service) resolveTemplate(ctx context.Context, req *CreateRequest) (templateSpec, error) {
	if req.Template == "" {
		return templateSpec{}, s.checkImage(ctx, "image", req.Image)
	}
	if req.Image != "" {
		return templateSpec{}, invalid("template", "give either image or template, not both")
	}
	t, err := s.lookupTemplate(ctx, Caller{Owner: req.Owner}, req.Template)
	if err != nil {
		return templateSpec{}, err
	}
	if t.State != store.TemplateReady {
		return templateSpec{}, fmt.Errorf("template %s is %s, not ready: %w", t.ID, t.State, ErrConflict)
	}
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec)
	req.Image, req.Template = t.Image, ""
	return spec, nil
}

// checkImage refuses an image a tenant names when it is a template's,
// however it is named: the engine takes a tag, a digest, a registry
// host's spelling, an image id or any unique prefix of one, so the image
// is looked up and its label read. The answer is the one for an image
// that is not there: a template's existence is not told to whoever is
// not its owner. Verdicts on images that are not templates' are kept a
// minute, so a create of the same image pays the engine round trip once.
func (s *Service) checkImage(ctx context.Context, field, ref string) error {
	notPresent := &FieldError{Field: field, Reason: fmt.Sprintf("image %q is not present on this host", ref), Kind: ErrImageNotPresent}
	switch {
	case ref == "":
		return nil // the daemon's default
	case isTemplateImage(ref):
		return notPresent
	case s.Images == nil:
		return nil
	}
	if until, ok := s.imageVerdicts.Load(ref); ok && s.Clock().Before(until.(time.Time)) {
		return nil
	}
	img, err := s.Images.InspectImage(ctx, ref)
	switch {
	case errors.Is(err, runtime.ErrImageNotFound):
		return nil // the create says so, as before
	case err != nil:
		return fmt.Errorf("inspect image %q: %w", ref, err)
	case img.Config.Labels[labelTemplate] != "":
		return notPresent
	}
	if byID, err := s.byIDFromPrivate(ctx, ref, img); err != nil || byID {
		return cmp.Or(err, byIDRefused(ref)) // never cached
	}
	if s.imageVerdictCount.Add(1) > maxImageVerdicts {
		s.imageVerdicts.Clear()
		s.imageVerdictCount.Store(0)
	}
	s.imageVerdicts.Store(ref, s.Clock().Add(imageVerdictTTL))
	return nil
}

// Bounds of checkImage's memory.
const (
	imageVerdictTTL  = time.Minute
	maxImageVerdicts = 4096
)

// startTemplate runs a template's start command in a sandbox just created
// from it, and its ready check until it passes.
func (s *Service) startTemplate(ctx context.Context, id string, spec templateSpec) error {
	if spec.StartCmd == "" {
		return nil
	}
	ac, err := s.Agent(ctx, id)
	if err != nil {
		return err
	}
	p, err := ac.StartProcess(ctx, agent.StartRequest{Cmd: []string{"/bin/sh", "-c", spec.StartCmd}, Cwd: spec.Workdir, User: spec.User, Tag: "template-start"})
	if err != nil {
		return fmt.Errorf("the template's start command: %w", agentErr(err))
	}
	p.Close() // it runs on
	if spec.ReadyCmd == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		res, err := ac.Exec(rctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", spec.ReadyCmd}, Cwd: spec.Workdir, User: spec.User})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("the template's ready check did not pass within %s: %w", readyTimeout, ErrUnavailable)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lookupTemplate finds a template the caller may see by id or by a
// name[:tag]; a bare name no tag points to finds the name's newest build
// while it is building or once it failed.
func (s *Service) lookupTemplate(ctx context.Context, c Caller, idOrName string) (store.Template, error) {
	return s.findTemplate(ctx, c, idOrName, s.sharing())
}

// findTemplate is lookupTemplate, which asks the cluster's catalog when
// this node's copy misses only with fetch.
func (s *Service) findTemplate(ctx context.Context, c Caller, idOrName string, fetch bool) (store.Template, error) {
	var (
		t   store.Template
		err error
	)
	if strings.HasPrefix(idOrName, "tpl-") {
		t, err = s.Store.GetTemplate(ctx, idOrName)
	} else if name, tag, ok := ParseTemplateRef(idOrName); ok {
		t, err = s.Store.GetTemplateByTag(ctx, c.Owner, name, tag)
		if errors.Is(err, store.ErrNotFound) && tag == store.DefaultTag && !strings.Contains(idOrName, ":") {
			// A name no tag points to yet: its first build, building or
			// failed (which is how its maker learns how it went).
			t, err = s.Store.GetNewestTemplateNamed(ctx, c.Owner, name)
			if err == nil && t.State == store.TemplateReady {
				err = store.ErrNotFound // a build whose tags were moved or removed
			}
		}
	} else {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) && fetch {
		// Another node's, which this node's mirror has not seen yet.
		t, err = s.fetchShared(ctx, c, idOrName)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Template{}, err
		}
	}
	if err != nil || !c.canSee(t.Owner) {
		return store.Template{}, fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
	}
	return t, nil
}

// TemplateID is the id of the template owner's idOrName names, if any
// (cluster placement asks, to prefer the nodes that hold its image).
func (s *Service) TemplateID(ctx context.Context, owner, idOrName string) (string, bool) {
	// This node's copy of the catalog only: most creates name no
	// template, and a miss costs the cluster a read.
	t, err := s.findTemplate(ctx, Caller{Owner: owner}, idOrName, false)
	return t.ID, err == nil && t.State == store.TemplateReady
}

// GetTemplate returns a template the caller may see, by id or by a
// name[:tag] of its owner's.
func (s *Service) GetTemplate(ctx context.Context, c Caller, idOrName string) (Template, error) {
	t, err := s.lookupTemplate(ctx, c, idOrName)
	if err != nil || t.Kind == store.TemplateFork {
		return Template{}, fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
	}
	return s.withTags(ctx, fromTemplateRow(t)), nil
}

// withTags fills t.Tags (best effort: a failed read leaves them out).
func (s *Service) withTags(ctx context.Context, t Template) Template {
	tags, err := s.Store.ListTemplateTags(ctx, store.TagFilter{Owner: t.Owner, TemplateID: t.ID})
	if err != nil {
		return t
	}
	t.Tags = tagsOf(tags)[t.ID]
	return t
}

// tagsOf maps template ids to their name:tag references, sorted.
func tagsOf(tags []store.TemplateTag) map[string][]string {
	out := map[string][]string{}
	for _, g := range tags {
		out[g.TemplateID] = append(out[g.TemplateID], g.Name+":"+g.Tag)
	}
	for _, refs := range out {
		slices.Sort(refs)
	}
	return out
}

// TemplateTag is one name:tag and the template it points to.
type TemplateTag struct {
	Name       string    `json:"name"`
	Tag        string    `json:"tag"`
	TemplateID string    `json:"template_id"`
	CreatedAt  time.Time `json:"created_at"`
}

// TagTemplate points name:tag, for each of tags, at the template target
// names (an id or a name[:tag]) of the caller's owner, which must be
// ready. A tag that pointed elsewhere moves.
func (s *Service) TagTemplate(ctx context.Context, c Caller, target, name string, tags []string) (Template, error) {
	switch {
	case !validTemplateName(name):
		return Template{}, invalid("name", msgTemplateName)
	case len(tags) == 0:
		return Template{}, invalid("tags", "at least one")
	}
	if err := validateTags("tags", tags); err != nil {
		return Template{}, err
	}
	t, err := s.lookupTemplate(ctx, c, target)
	if err != nil || t.Kind == store.TemplateFork {
		return Template{}, fmt.Errorf("template %q: %w", target, ErrNotFound)
	}
	if t.State != store.TemplateReady {
		return Template{}, fmt.Errorf("template %s is %s, not ready: %w", t.ID, t.State, ErrConflict)
	}
	if err := s.pointTags(ctx, t, name, tags); err != nil {
		return Template{}, err
	}
	return s.withTags(ctx, fromTemplateRow(t)), nil
}

// pointTags points t's owner's name:tag at ready template t, for each of
// tags: in a cluster in its catalog (publishing t if it never was), then
// this node's copy from what the catalog says after the write
// (readBackTags); on a single node here.
func (s *Service) pointTags(ctx context.Context, t store.Template, name string, tags []string) error {
	if s.sharing() {
		if err := s.shareExisting(ctx, t); err != nil {
			return err
		}
		if _, err := s.Catalog.SetTags(ctx, t.Owner, name, tags, t.ID, false, t.CreatedAt); err != nil {
			return s.mapTemplateErr(clusterErr(err, ""), t.ID)
		}
		s.readBackTags(ctx, t.Owner, name, tags)
		return nil
	}
	if err := s.Store.TagTemplate(ctx, t.Owner, name, tags, t.ID); err != nil {
		return s.mapTemplateErr(err, t.ID)
	}
	return nil
}

// UntagTemplate removes name:tag for each of tags; ErrNotFound when none
// of them was there. The templates stay, by their ids; but a build made
// under a name, once no tag points to it and no sandbox uses it, is
// removed by the sweep (sweepSuperseded) after its grace.
func (s *Service) UntagTemplate(ctx context.Context, c Caller, name string, tags []string) error {
	if !validTemplateName(name) {
		return invalid("name", msgTemplateName)
	}
	if err := validateTags("tags", tags); err != nil {
		return err
	}
	var (
		n   int
		err error
	)
	if s.sharing() {
		n, err = s.Catalog.RemoveTags(ctx, c.Owner, name, tags)
		err = clusterErr(err, "")
		if err == nil {
			s.readBackTags(ctx, c.Owner, name, tags)
			// Tags of a template the catalog does not have yet are this
			// node's alone.
			k, lerr := s.untagUnshared(ctx, c.Owner, name, tags)
			n, err = n+k, lerr
		}
	} else {
		n, err = s.Store.UntagTemplates(ctx, c.Owner, name, tags)
	}
	if err != nil {
		return err
	}
	if n == 0 && len(tags) > 0 {
		return fmt.Errorf("template %s: no such tags: %w", name, ErrNotFound)
	}
	return nil
}

// untagUnshared removes owner's name:tag, of tags, where it points to a
// template of this node's that is not in the cluster's catalog.
func (s *Service) untagUnshared(ctx context.Context, owner, name string, tags []string) (int, error) {
	have, err := s.Store.ListTemplateTags(ctx, store.TagFilter{Owner: owner, Name: name})
	if err != nil {
		return 0, err
	}
	var local []string
	for _, g := range have {
		if !slices.Contains(tags, g.Tag) {
			continue
		}
		if t, err := s.Store.GetTemplate(ctx, g.TemplateID); err == nil && !t.Shared && t.Origin == "" {
			local = append(local, g.Tag)
		}
	}
	if len(local) == 0 {
		return 0, nil
	}
	return s.Store.UntagTemplates(ctx, owner, name, local)
}

// TemplateTags lists the tags of the caller's name, newest first;
// ErrNotFound when it has none.
func (s *Service) TemplateTags(ctx context.Context, c Caller, name string) ([]TemplateTag, error) {
	tags, err := s.Store.ListTemplateTags(ctx, store.TagFilter{Owner: c.Owner, Name: name})
	if err != nil {
		return nil, err
	}
	var out []TemplateTag
	for _, g := range tags {
		out = append(out, TemplateTag{Name: g.Name, Tag: g.Tag, TemplateID: g.TemplateID, CreatedAt: g.CreatedAt})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("template %q: %w", name, ErrNotFound)
	}
	return out, nil
}

// ListTemplates lists the caller's templates and snapshots (an admin's:
// everyone's), forks' captures left out.
func (s *Service) ListTemplates(ctx context.Context, c Caller) ([]Template, error) {
	owner := c.Owner
	if c.Admin {
		owner = ""
	}
	rows, err := s.Store.ListTemplates(ctx, owner, false)
	if err != nil {
		return nil, err
	}
	tags, err := s.Store.ListTemplateTags(ctx, store.TagFilter{Owner: owner})
	if err != nil {
		return nil, err
	}
	byID := tagsOf(tags)
	out := make([]Template, len(rows))
	for i, r := range rows {
		out[i] = fromTemplateRow(r)
		out[i].Tags = byID[r.ID]
	}
	return out, nil
}

// DeleteTemplate deletes a template and its image. One a sandbox was made
// from and still exists is refused (ErrConflict), as is one still
// building; a deleted one is ErrNotFound (a retry after success).
func (s *Service) DeleteTemplate(ctx context.Context, c Caller, idOrName string) error {
	imgs, err := s.images()
	if err != nil {
		return err
	}
	t, err := s.lookupTemplate(ctx, c, idOrName)
	if err != nil || t.Kind == store.TemplateFork {
		return fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
	}
	if t.State == store.TemplateBuilding {
		return fmt.Errorf("template %s is still building: %w", t.ID, ErrConflict)
	}
	if s.sharing() {
		// Every node's sandboxes count: this node's rows (sandboxes made
		// before their placements named templates too), then the
		// catalog, whose delete holds only while no placement made from
		// the template exists. Then every node drops its copy.
		if n, err := s.Store.SandboxesOfImage(ctx, t.Image); err != nil {
			return err
		} else if n > 0 {
			return fmt.Errorf("template %s: %d sandboxes made from it still exist: %w", t.ID, n, ErrConflict)
		}
		if err := s.templateUsedElsewhere(t.ID); err != nil {
			return err
		}
		if err := s.dropFromCatalog(ctx, t.ID, t.Owner, false); err != nil {
			return fmt.Errorf("template %s: %w", t.ID, clusterErr(err, ""))
		}
		s.copies.Delete(t.ID)
		// This node's mirror may drop its row first (the deletion's echo).
		if err := s.removeTemplate(ctx, imgs, t); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	}
	return s.removeTemplate(ctx, imgs, t)
}

func (s *Service) removeTemplate(ctx context.Context, imgs runtime.Images, t store.Template) error {
	if _, err := s.Store.DeleteTemplate(ctx, t.ID); err != nil {
		if errors.Is(err, store.ErrTemplateInUse) {
			return fmt.Errorf("template %s: sandboxes made from it still exist (%w): %w", t.ID, err, ErrConflict)
		}
		return s.mapTemplateErr(err, t.ID)
	}
	if err := imgs.RemoveImage(ctx, t.Image); err != nil {
		// The row is gone; the image stays until a sandbox still using it
		// (one whose row went first) is gone and a sweep removes it.
		s.Logger.Warn("template: remove the image of a deleted template", "template", t.ID, "err", err)
	}
	return nil
}

// sweepTemplates removes the fork captures no sandbox uses any more (past
// their grace) and, at startup, fails the builds and captures a dead
// process left building and destroys its build sandboxes.
func (s *Service) sweepTemplates(ctx context.Context, startup bool) error {
	imgs, err := s.images()
	if err != nil {
		return nil // no templates without an image side
	}
	var errs []error
	if startup {
		cut, err := s.Store.FailBuildingTemplates(ctx, "cut short: the daemon stopped while it was being made")
		errs = append(errs, err)
		for _, t := range cut {
			if s.sharing() && t.Kind != store.TemplateFork {
				s.unshare(t) // its record, if it was published before the cut
			}
			if t.Kind != store.TemplateBuild {
				s.dropTemplate(ctx, imgs, t) // nobody is told of a capture cut short
				continue
			}
			errs = append(errs, imgs.RemoveImage(ctx, t.Image))
		}
		rows, _, err := s.Store.ListSandboxes(ctx, store.ListFilter{Owner: buildOwner, Limit: store.MaxListLimit})
		errs = append(errs, err)
		for _, row := range rows {
			s.destroyDetached(ctx, row.ID, "its build was cut short")
		}
	}
	errs = append(errs, s.sweepForks(ctx, imgs, forkGrace), s.sweepSuperseded(ctx, imgs, forkGrace), s.sweepShared(ctx))
	return errors.Join(errs...)
}

// sweepSuperseded removes the named builds no tag points to any more (a
// newer build of the name took them) and no sandbox uses, once grace has
// passed since they were last changed: what a rebuild leaves, as an
// engine's dangling images. Snapshots and builds made without a name
// stay until deleted.
func (s *Service) sweepSuperseded(ctx context.Context, imgs runtime.Images, grace time.Duration) error {
	before := s.Clock().Add(-grace)
	builds, err := s.Store.SupersededBuilds(ctx, before)
	errs := []error{err}
	for _, t := range builds {
		if s.sharing() && t.Shared {
			// A sandbox elsewhere keeps it; the catalog goes first (the
			// other nodes drop their copies).
			if s.templateUsedElsewhere(t.ID) != nil {
				continue
			}
			if err := s.dropFromCatalog(ctx, t.ID, t.Owner, true); err != nil {
				if !errors.Is(err, ErrConflict) { // in use, or tagged elsewhere: kept
					errs = append(errs, err)
				}
				continue
			}
		}
		// Deleted only if still superseded: a tag may have come back
		// since the list was read.
		deleted, err := s.Store.DeleteSupersededBuild(ctx, t.ID, before)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			if err := imgs.RemoveImage(ctx, t.Image); err != nil {
				s.Logger.Warn("template: remove the image of a superseded build", "template", t.ID, "err", err)
			}
		}
	}
	return errors.Join(errs...)
}

// sweepForks removes the fork captures no sandbox uses that are older
// than grace.
func (s *Service) sweepForks(ctx context.Context, imgs runtime.Images, grace time.Duration) error {
	forks, err := s.Store.UnusedForks(ctx)
	errs := []error{err}
	for _, t := range forks {
		if s.Clock().Sub(t.UpdatedAt) < grace {
			continue
		}
		if err := s.removeTemplate(ctx, imgs, t); err != nil && !errors.Is(err, ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DropUnusedForks removes every fork capture no sandbox uses, whatever
// its age: a daemon that stops (its forks' creates have ended) leaves
// none behind.
func (s *Service) DropUnusedForks(ctx context.Context) error {
	imgs, err := s.images()
	if err != nil {
		return nil
	}
	return s.sweepForks(ctx, imgs, 0)
}

// dropTemplate deletes a capture that failed, row and image; what it
// cannot remove the next start's sweep does.
func (s *Service) dropTemplate(ctx context.Context, imgs runtime.Images, t store.Template) {
	if _, err := s.Store.DeleteTemplate(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.Logger.Warn("template: delete a failed capture", "template", t.ID, "err", err)
	}
	if err := imgs.RemoveImage(ctx, t.Image); err != nil {
		s.Logger.Warn("template: remove the image of a failed capture", "template", t.ID, "err", err)
	}
}

func (s *Service) mapTemplateErr(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNameConflict):
		return fmt.Errorf("a template named %q already exists: %w", what, ErrNameConflict)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("template %q: %w", what, ErrNotFound)
	case errors.Is(err, store.ErrInvalidArgument):
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return err
}

// buildLogs keeps the output of this process's builds, each bounded, for
// FollowBuildLog: a finished build's for buildLogKeep, then only its
// template's error.
type buildLogs struct {
	mu      sync.Mutex
	logs    map[string]*buildLog
	running map[string]int // builds running, per owner
	queued  map[string]int // builds waiting for a slot, per owner
	total   int
	opened  uint64        // logs opened
	freed   chan struct{} // closed and replaced when a slot is freed
}

// Bounds of the builds running at once: each is a sandbox that no
// tenant's quota counts, so they are bounded here. A build past them
// waits, its template building, for a slot; past the waiting bound too,
// it is refused.
const (
	maxBuildsPerOwner = 2
	maxBuilds         = 4
	maxQueuedPerOwner = 8
)

// queuedBuild is a build's place: waiting for a slot, then holding it.
type queuedBuild struct {
	b       *buildLogs
	owner   string
	mu      sync.Mutex
	running bool
	done    bool
}

// enqueue gives owner's build a place, or says the owner has too many.
func (b *buildLogs) enqueue(owner string) (*queuedBuild, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == nil {
		b.running, b.queued = map[string]int{}, map[string]int{}
		b.freed = make(chan struct{})
	}
	if n := b.running[owner] + b.queued[owner]; n >= maxBuildsPerOwner+maxQueuedPerOwner {
		return nil, &QuotaError{Reason: fmt.Sprintf("%d builds of the owner's are running or waiting; at most %d", n, maxBuildsPerOwner+maxQueuedPerOwner)}
	}
	b.queued[owner]++
	return &queuedBuild{b: b, owner: owner}, nil
}

// wait waits for a slot (the owner's and the host's), saying so in the
// build's log when it has to.
func (q *queuedBuild) wait(ctx context.Context, log *buildLog) error {
	b := q.b
	said := false
	for {
		b.mu.Lock()
		if b.running[q.owner] < maxBuildsPerOwner && b.total < maxBuilds {
			if b.queued[q.owner]--; b.queued[q.owner] == 0 {
				delete(b.queued, q.owner)
			}
			b.running[q.owner]++
			b.total++
			b.mu.Unlock()
			q.mu.Lock()
			q.running = true
			q.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		if !said {
			log.printf("waiting for a build slot (at most %d builds of an owner's and %d of the host's run at once)\n", maxBuildsPerOwner, maxBuilds)
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited for a build slot: %w", ctx.Err())
		case <-freed:
		}
	}
}

// cancel gives the place up: the slot when it holds one, its wait
// otherwise. Once.
func (q *queuedBuild) cancel() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return
	}
	q.done = true
	b := q.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.running {
		b.total--
		if b.running[q.owner]--; b.running[q.owner] == 0 {
			delete(b.running, q.owner)
		}
		close(b.freed)
		b.freed = make(chan struct{})
		return
	}
	if b.queued[q.owner]--; b.queued[q.owner] == 0 {
		delete(b.queued, q.owner)
	}
}

const buildLogKeep = 10 * time.Minute

// truncatedNote ends a build's output that reached maxBuildLogBytes.
const truncatedNote = "\n[build output truncated: it passed 1 MiB]\n"

// buildLog is one build's output: appended to until finish.
type buildLog struct {
	mu        sync.Mutex
	buf       []byte
	truncated bool
	done      bool
	changed   chan struct{} // closed and replaced on every change
	seq       uint64        // its place among the logs opened
}

// maxKeptBuildLogs bounds the finished builds' logs kept (each at most
// maxBuildLogBytes): past it, a new build drops the oldest finished ones
// (their templates still say how they ended).
const maxKeptBuildLogs = 64

func (b *buildLogs) open(id string) *buildLog {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.logs == nil {
		b.logs = map[string]*buildLog{}
	}
	b.opened++
	for len(b.logs) >= maxKeptBuildLogs {
		oldest, seq := "", uint64(0)
		for k, l := range b.logs {
			if l.finished() && (oldest == "" || l.seq < seq) {
				oldest, seq = k, l.seq
			}
		}
		if oldest == "" {
			break // all running or waiting: bounded by the build slots
		}
		delete(b.logs, oldest)
	}
	l := &buildLog{changed: make(chan struct{}), seq: b.opened}
	b.logs[id] = l
	return l
}

func (l *buildLog) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func (b *buildLogs) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.logs, id)
}

func (b *buildLogs) get(id string) *buildLog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logs[id]
}

func (l *buildLog) write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.truncated {
		return
	}
	if room := maxBuildLogBytes - len(truncatedNote) - len(l.buf); room < len(p) {
		p, l.truncated = append(p[:room:room], truncatedNote...), true
	}
	l.buf = append(l.buf, p...)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *buildLog) printf(format string, args ...any) { l.write(fmt.Appendf(nil, format, args...)) }

func (l *buildLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the output from offset on, whether the build ended, and a
// channel closed at the next change.
func (l *buildLog) since(offset int) ([]byte, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.buf[min(offset, len(l.buf)):]), l.done, l.changed
}

// BuildLogLines returns the lines of a template's build output from
// the offset-th on: the whole lines, and the last one once the build has
// ended. A build of another process, or one whose output is no longer
// kept, has none.
func (s *Service) BuildLogLines(ctx context.Context, c Caller, idOrName string, offset int) ([]string, error) {
	t, err := s.GetTemplate(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	l := s.builds.get(t.ID)
	if l == nil || offset < 0 {
		return nil, nil
	}
	b, done, _ := l.since(0)
	lines := strings.Split(string(b), "\n")
	last := lines[len(lines)-1]
	lines = lines[:len(lines)-1]
	if done && last != "" {
		lines = append(lines, last)
	}
	if offset >= len(lines) {
		return nil, nil
	}
	return lines[offset:], nil
}

// FollowBuildLog writes a template's build output to w as it comes, until
// the build ends or ctx does. A build of another process (or a template
// that was not built) has no output here: its error, if any, is written.
func (s *Service) FollowBuildLog(ctx context.Context, c Caller, idOrName string, w func([]byte) error) error {
	t, err := s.GetTemplate(ctx, c, idOrName)
	if err != nil {
		return err
	}
	l := s.builds.get(t.ID)
	if l == nil {
		if t.Error != "" {
			return w([]byte("build failed: " + t.Error + "\n"))
		}
		return nil
	}
	for offset := 0; ; {
		b, done, changed := l.since(offset)
		if len(b) > 0 {
			if err := w(b); err != nil {
				return err
			}
			offset += len(b)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
