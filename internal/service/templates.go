package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// The templates part of the service is the template*.go files of this
// package; this file is its catalog (Template, ids, lookup, tags, list,
// delete). The others: templaterecipe.go (what a build is asked to do,
// and its validation), templatebuild.go (builds; their queue and logs are
// the sub-package builds, memory only),
// templatecapture.go (snapshots and forks), templatecreate.go (a create
// from a template: createAs calls it before and after the create chain),
// templatesweep.go (removing what nothing needs any more), and shared.go
// (cluster mode: templates on every node through the registry).
//
// What the part needs of the rest of the service: TemplateStore (its
// table), runtime.Images (Service.images: commit, remove, inspect),
// TemplateCatalog (cluster mode only), the create chain (a build runs in
// a sandbox of its own, createChain with buildOwner), agent clients (a
// build's steps) and admission (a build's hold). The rest of the service
// reaches it through resolveTemplate and startTemplate (createAs),
// checkImage, isTemplateImage and buildOwner (the image step and the
// pool's and network's exceptions for a build's sandbox), templateOfImage
// (cluster placement) and sweepTemplates (the reconciler).
//
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
	// Memory is set when the template holds its source's running
	// processes: every sandbox created from it starts with them.
	Memory bool `json:"memory,omitempty"`
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
	// Memory, for a capture with its source's memory, is what a restore
	// from it needs (forkmem.go).
	Memory *memorySpec `json:"memory,omitempty"`
}

// hasMemory reports whether t was captured with its source's memory.
func hasMemory(t store.Template) bool {
	var spec templateSpec
	return json.Unmarshal(t.Spec, &spec) == nil && spec.Memory != nil
}

// nodeLocal reports whether t stays this node's, never published to the
// cluster's catalog: a fork's capture, and a template with memory (its
// memory image is never copied to another node).
func nodeLocal(t store.Template) bool {
	return t.Kind == store.TemplateFork || hasMemory(t)
}

func fromTemplateRow(t store.Template) Template {
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec) // written by us
	return Template{
		ID: t.ID, Owner: t.Owner, Name: t.Name, Kind: t.Kind, State: t.State, BaseImage: t.BaseImage,
		SourceID: t.SourceID, SizeBytes: t.SizeBytes, Error: t.Error, StartCmd: spec.StartCmd,
		ReadyCmd: spec.ReadyCmd, User: spec.User, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		Memory: spec.Memory != nil,
	}
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
	if s.sharing() && nodeLocal(t) {
		// The cluster's names are every node's; this one's memory image
		// is its node's alone.
		return refuse(ErrConflict, nil, "template %s holds its source's memory, which stays on its node: the cluster's names cannot point at it (it keeps the name it was taken under there)", t.ID)
	}
	if s.sharing() {
		if err := s.shareExisting(ctx, t); err != nil {
			return err
		}
		if _, err := s.Catalog.SetTags(ctx, t.Owner, name, tags, t.ID, false, t.CreatedAt); err != nil {
			return mapTemplateErr(clusterErr(err, ""), t.ID)
		}
		s.readBackTags(ctx, t.Owner, name, tags)
		return nil
	}
	if err := s.Store.TagTemplate(ctx, t.Owner, name, tags, t.ID); err != nil {
		return mapTemplateErr(err, t.ID)
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
			return refuse(ErrConflict, err, "template %s: sandboxes made from it still exist; destroy them first", t.ID)
		}
		return mapTemplateErr(err, t.ID)
	}
	s.dropForkMemory(t.ID)
	if err := imgs.RemoveImage(ctx, t.Image); err != nil {
		// The row is gone; the image stays until a sandbox still using it
		// (one whose row went first) is gone and a sweep removes it.
		s.Logger.Warn("template: remove the image of a deleted template", "template", t.ID, "err", err)
	}
	return nil
}

func mapTemplateErr(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNameConflict):
		return fmt.Errorf("a template named %q already exists: %w", what, ErrNameConflict)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("template %q: %w", what, ErrNotFound)
	case errors.Is(err, store.ErrInvalidArgument):
		return refuse(ErrInvalidArgument, err, "%v", err)
	}
	return err
}
