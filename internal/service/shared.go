package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Templates shared by a cluster (docs/cluster.md, "Templates are the
// cluster's").
//
// The node that makes a template (a build or a snapshot; never a fork's
// capture) publishes it before it reports it ready: its image pushed to
// the cluster's registry (Config.Registry), then its record and its tags
// put in the catalog (TemplateCatalog). Every node keeps a copy of the
// catalog's records and tags in its own store (the mirror: the
// TemplateEvents methods below, fed by the catalog's watch), so reads,
// lists, tags and name lookups are local. A node that creates from
// another node's template the first time pulls its image by digest
// (ensureCopy, once per node however many creates wait) and tags it as
// its copy's image, copyRef: its own reference, so that nodes sharing an
// engine never remove each other's images. A template in use by a
// sandbox on any node (its placement names it) is not deleted.
//
// The catalog is the authority: a copy whose record is gone is dropped
// (once no local sandbox uses it), and a node that was away reconciles
// its copies with the catalog when its watch starts (ResetTemplates).

// TemplateCatalog is the cluster's catalog of templates; nil on a single
// node. Every call is bounded; a cluster that cannot answer is an error
// matching ErrUnavailable.
type TemplateCatalog interface {
	// Put publishes a template's record.
	Put(ctx context.Context, t SharedTemplate) error
	// Info is the record of id as this node's watch last saw it.
	Info(id string) (SharedTemplate, bool)
	// Fresh reads the record of id from the cluster (linearizable).
	Fresh(ctx context.Context, id string) (SharedTemplate, bool, error)
	// FreshTag reads what owner's name:tag points to from the cluster.
	FreshTag(ctx context.Context, owner, name, tag string) (string, bool, error)
	// SetTags points owner's name:tag at id for each of tags (ErrNotFound
	// when id has no record); with onlyNewer a tag that points to a
	// template made after createdAt stays. It returns the tags it set.
	SetTags(ctx context.Context, owner, name string, tags []string, id string, onlyNewer bool, createdAt time.Time) ([]string, error)
	// RemoveTags removes owner's name:tag for each of tags and says how
	// many there were.
	RemoveTags(ctx context.Context, owner, name string, tags []string) (int, error)
	// Delete removes id's record, its tags and its holders; ErrConflict
	// while a sandbox made from it exists on any node, or, with
	// untaggedOnly, while a tag points to it.
	// It returns the deleted record's image.
	Delete(ctx context.Context, id, owner string, untaggedOnly bool) (image string, err error)
	// ImageShared reports whether a record other than except's names
	// image (a cached build under another id is the same image).
	ImageShared(ctx context.Context, image, except string) (bool, error)
	// Hold says this node holds id's image (placement prefers holders);
	// Unhold that it no longer does.
	Hold(ctx context.Context, id string) error
	Unhold(ctx context.Context, id string) error
	// Users lists the sandboxes on any node made from id.
	Users(id string) []string
}

// SharedTemplate is the catalog's record of a template.
type SharedTemplate struct {
	ID, Owner, Name, Kind           string
	BaseImage, SourceID, RecipeHash string
	Spec                            json.RawMessage
	SizeBytes                       int64
	CreatedAt                       time.Time
	// Node made it; Image is its image in the cluster's registry, by
	// digest ("" when the cluster has no registry).
	Node, Image string
}

// SharedTag is one of the catalog's tags: owner's name:tag points to ID.
type SharedTag struct{ Owner, Name, Tag, ID string }

// sharedRepo is the registry repository templates are pushed to, under
// Config.Registry; the tag is the template's id.
const sharedRepo = "sandboxd/templates"

// Bounds of sharing.
const (
	// mirrorTimeout bounds the mirror's handling of one catalog event.
	mirrorTimeout = 30 * time.Second
	// pushTimeout bounds one push of a template's image.
	pushTimeout = 15 * time.Minute
	// missTTL is how long a lookup the catalog missed is not asked of
	// it again (a create naming an image, not a template, asks each
	// time otherwise); maxMisses bounds their memory.
	missTTL   = time.Second
	maxMisses = 4096
)

// copyRef is this node's engine reference of its copy of another node's
// template id.
func (s *Service) copyRef(id string) string {
	h := sha256.Sum256([]byte(s.cfg.NodeID))
	return templateRef(id) + ".n" + hex.EncodeToString(h[:4])
}

// templateIDOf is the template id in a template image reference (a
// maker's or a copy's).
func templateIDOf(ref string) string {
	tag := ref[strings.LastIndex(ref, ":")+1:]
	id, _, _ := strings.Cut(tag, ".")
	return id
}

// registryHost is the host of the cluster's registry, "" for none.
func (s *Service) registryHost() string {
	host, _, _ := strings.Cut(s.cfg.Registry, "/")
	return strings.ToLower(host)
}

// sharing reports whether templates are published: cluster mode.
func (s *Service) sharing() bool { return s.Catalog != nil }

// finishTemplate settles a template that is made (its image captured):
// in cluster mode it is published first (share), so that every node can
// create from it the moment anyone sees it ready; then it is marked ready
// and shared here with exactly the tags the catalog set. A template the
// cluster cannot take now (its registry or etcd is down) is not lost: it
// is made ready here, unshared, usable on this node, and published by
// runPublish once the cluster takes it. An error leaves the row building for the
// caller to fail or drop.
func (s *Service) finishTemplate(ctx context.Context, t store.Template, size int64, tags []string) (store.Template, error) {
	if !s.sharing() || nodeLocal(t) {
		return s.Store.FinishTemplate(ctx, t.ID, size, tags...)
	}
	t.SizeBytes = size
	set, err := s.share(ctx, t, tags, true)
	if err != nil {
		s.Logger.Warn("template: made here, published to the cluster later", "template", t.ID, "err", err)
		return s.Store.FinishTemplate(ctx, t.ID, size, tags...)
	}
	row, err := s.Store.FinishSharedTemplate(ctx, t.ID, size, set)
	if err != nil {
		s.unshare(t)
		return store.Template{}, err
	}
	s.copies.Store(t.ID, true)
	// The watch handed these tags on while the row was building (the copy
	// refused them then); one another node moved since is read back.
	s.readBackTags(ctx, t.Owner, t.Name, set)
	return row, nil
}

// readBackTags makes this node's copy of owner's name:tag, for each of
// tags, what the catalog says now: after a write of this node's, which
// its copy may have taken after a later write of another node's that the
// watch had already applied. A read the cluster does not answer leaves
// the copy to the watch.
func (s *Service) readBackTags(ctx context.Context, owner, name string, tags []string) {
	for _, tag := range tags {
		id, ok, err := s.Catalog.FreshTag(ctx, owner, name, tag)
		switch {
		case err != nil:
			s.Logger.Warn("template: read a tag back from the cluster", "name", name, "tag", tag, "err", err)
		case ok:
			s.TagPut(SharedTag{Owner: owner, Name: name, Tag: tag, ID: id})
		default:
			s.TagDeleted(owner, name, tag)
		}
	}
}

// share pushes t's image to the cluster's registry (when it names one),
// puts t's record in the catalog and points tags (of t's name) at it. It
// returns the tags it set.
func (s *Service) share(ctx context.Context, t store.Template, tags []string, onlyNewer bool) ([]string, error) {
	rec := SharedTemplate{
		ID: t.ID, Owner: t.Owner, Name: t.Name, Kind: string(t.Kind), BaseImage: t.BaseImage, SourceID: t.SourceID,
		RecipeHash: t.RecipeHash, Spec: t.Spec, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, Node: s.cfg.NodeID,
	}
	if s.cfg.Registry != "" && s.Pusher != nil {
		start := time.Now()
		repo := s.cfg.Registry + "/" + sharedRepo
		pctx, cancel := context.WithTimeout(ctx, pushTimeout)
		digest, err := s.Pusher.PushImage(pctx, t.Image, repo+":"+t.ID, s.cfg.RegistryAuth)
		cancel()
		if err != nil {
			return nil, Unavailable(fmt.Sprintf("template %s could not be pushed to the cluster's registry %s", t.ID, s.registryHost()), err)
		}
		rec.Image = repo + "@" + digest
		s.Logger.Info("template pushed", "template", t.ID, "image", rec.Image, "duration", time.Since(start).Round(time.Millisecond))
	}
	if err := s.Catalog.Put(ctx, rec); err != nil {
		return nil, clusterErr(err, "")
	}
	if t.Name == "" || len(tags) == 0 {
		return nil, nil
	}
	set, err := s.Catalog.SetTags(ctx, t.Owner, t.Name, tags, t.ID, onlyNewer, t.CreatedAt)
	if err != nil {
		s.unshare(t)
		return nil, clusterErr(err, "")
	}
	return set, nil
}

// unshare takes a template whose making failed after share out of the
// catalog again (best effort: a record left behind names a template no
// node has; the maker's next start drops it, ResetTemplates).
func (s *Service) unshare(t store.Template) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if err := s.dropFromCatalog(ctx, t.ID, t.Owner, false); err != nil {
		s.Logger.Warn("template: take a failed template out of the cluster's catalog", "template", t.ID, "err", err)
	}
}

// shareExisting publishes a ready template of this node's that the catalog
// lacks (made before the node shared templates, or while the cluster could
// not take it), with its tags.
func (s *Service) shareExisting(ctx context.Context, t store.Template) error {
	if t.Shared || t.Origin != "" || nodeLocal(t) || t.State != store.TemplateReady {
		return nil
	}
	tags, err := s.Store.ListTemplateTags(ctx, store.TagFilter{Owner: t.Owner, TemplateID: t.ID})
	if err != nil {
		return err
	}
	byName := map[string][]string{}
	for _, g := range tags {
		byName[g.Name] = append(byName[g.Name], g.Tag)
	}
	if _, err := s.share(ctx, t, nil, false); err != nil {
		return err
	}
	for name, ts := range byName {
		// Published late: a newer build of the name made meanwhile
		// elsewhere keeps its tags.
		if _, err := s.Catalog.SetTags(ctx, t.Owner, name, ts, t.ID, true, t.CreatedAt); err != nil {
			return clusterErr(err, "")
		}
	}
	return s.Store.MarkTemplateShared(ctx, t.ID)
}

// fetchShared finds, for a lookup this node's mirror missed, the
// template idOrName names in the catalog (its watch may not have
// delivered it yet) and puts its copy here.
func (s *Service) fetchShared(ctx context.Context, c Caller, idOrName string) (t store.Template, err error) {
	missKey := c.Owner + "\x00" + idOrName
	if until, ok := s.sharedMisses.Load(missKey); ok && s.Clock().Before(until.(time.Time)) {
		return store.Template{}, store.ErrNotFound
	}
	defer func() {
		if errors.Is(err, store.ErrNotFound) {
			if s.missCount.Add(1) > maxMisses {
				s.sharedMisses.Clear()
				s.missCount.Store(0)
			}
			s.sharedMisses.Store(missKey, s.Clock().Add(missTTL))
		}
	}()
	id := idOrName
	if !strings.HasPrefix(idOrName, "tpl-") {
		name, tag, ok := ParseTemplateRef(idOrName)
		if !ok {
			return store.Template{}, store.ErrNotFound
		}
		got, found, err := s.Catalog.FreshTag(ctx, c.Owner, name, tag)
		if err != nil {
			return store.Template{}, clusterErr(err, "")
		}
		if !found {
			return store.Template{}, store.ErrNotFound
		}
		id = got
	}
	if !validTemplateID(id) {
		return store.Template{}, store.ErrNotFound
	}
	rec, found, err := s.Catalog.Fresh(ctx, id)
	if err != nil {
		return store.Template{}, clusterErr(err, "")
	}
	if !found || !c.canSee(rec.Owner) {
		return store.Template{}, store.ErrNotFound
	}
	s.mirrorPut(ctx, rec)
	return s.Store.GetTemplate(ctx, id)
}

// ensureCopy makes the image of this node's copy of another node's
// template present: pulled from the cluster's registry by digest, once
// per node however many creates wait (one lock per template: the first
// pulls and tags, the others find it done), then given the copy's
// reference. Nothing to undo but the image, which is the copy's. ref is
// a template image reference; a maker's own does nothing.
func (s *Service) ensureCopy(ctx context.Context, ref string) error {
	if !s.sharing() || s.Images == nil {
		return nil
	}
	id := templateIDOf(ref)
	if _, ok := s.copies.Load(id); ok {
		return nil
	}
	t, err := s.Store.GetTemplate(ctx, id)
	if err != nil || t.Image != ref {
		return nil // none: the create says so
	}
	if t.Origin == "" {
		s.copies.Store(id, true) // this node's own: the engine has it
		return nil
	}
	unlock, err := s.copyLocks.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.copies.Load(id); ok {
		return nil
	}
	if _, err := s.Images.InspectImage(ctx, ref); err == nil {
		s.copies.Store(id, true)
		return nil
	}
	rec, ok := s.Catalog.Info(id)
	if !ok {
		if rec, ok, err = s.Catalog.Fresh(ctx, id); err != nil {
			return clusterErr(err, "")
		}
	}
	switch {
	case !ok:
		return fmt.Errorf("template %s was deleted: %w", id, ErrNotFound)
	case rec.Image == "" || s.Puller == nil:
		return Unavailable(fmt.Sprintf("template %s is on node %s only: the cluster names no registry to share templates through (--registry), or it was not pushed yet", id, rec.Node), nil)
	}
	named, err := reference.ParseNormalizedNamed(rec.Image)
	if err != nil {
		return Unavailable(fmt.Sprintf("template %s: its image %q in the catalog is no reference", id, rec.Image), err)
	}
	host := strings.ToLower(reference.Domain(named))
	if host != s.registryHost() {
		// A record names the cluster's registry only: a node is never
		// sent elsewhere for an image.
		return Unavailable(fmt.Sprintf("template %s's image is in registry %s, not the cluster's (%s)", id, host, s.registryHost()), nil)
	}
	start := time.Now()
	if err := s.pulls.join(ctx, s, rec.Image, host, s.cfg.RegistryAuth); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The cluster's registry, its account or its copy failing is the
		// operator's to fix, never the tenant's request.
		return Unavailable(fmt.Sprintf("template %s could not be pulled from the cluster's registry %s", id, host), err)
	}
	if err := s.Images.TagImage(ctx, rec.Image, ref); err != nil {
		return Unavailable(fmt.Sprintf("template %s: tag its pulled image", id), err)
	}
	// The digest reference was only the pull's: the copy's reference
	// holds the image now, and its removal removes it.
	_ = s.Images.RemoveImage(context.WithoutCancel(ctx), rec.Image)
	if _, err := s.Store.GetTemplate(ctx, id); err != nil {
		// Deleted while it was pulled: the image is nobody's.
		_ = s.Images.RemoveImage(context.WithoutCancel(ctx), ref)
		return fmt.Errorf("template %s was deleted: %w", id, ErrNotFound)
	}
	s.Logger.Info("template pulled from the cluster's registry", "template", id, "duration", time.Since(start).Round(time.Millisecond))
	if err := s.Catalog.Hold(ctx, id); err != nil {
		s.Logger.Warn("template: say this node holds it", "template", id, "err", err)
	}
	s.copies.Store(id, true)
	return nil
}

// clusterRegistryRef reports whether ref is an image of the cluster's
// template repository (a copy's pull: bounded by its owner's template
// storage, not --image-max-mb).
func (s *Service) clusterRegistryRef(ref string) bool {
	return s.cfg.Registry != "" && strings.HasPrefix(ref, s.cfg.Registry+"/"+sharedRepo+"@")
}

// templateUsedElsewhere is ErrConflict when a sandbox on any node was made
// from template id and is not deleted.
func (s *Service) templateUsedElsewhere(id string) error {
	if !s.sharing() {
		return nil
	}
	if users := s.Catalog.Users(id); len(users) > 0 {
		return fmt.Errorf("template %s: sandboxes made from it still exist (%s): %w", id, strings.Join(users[:min(len(users), 3)], ", "), ErrConflict)
	}
	return nil
}

// The mirror: the catalog's watch hands its changes to these, in order,
// from one goroutine.

// ResetTemplates makes this node's copies the catalog's recs and tags:
// copies put, copies (and this node's published templates) the catalog
// no longer has dropped once unused, tags set and removed. This node's
// templates the catalog never had are runPublish's.
func (s *Service) ResetTemplates(recs []SharedTemplate, tags []SharedTag) {
	ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
	defer cancel()
	byID := make(map[string]bool, len(recs))
	for _, r := range recs {
		byID[r.ID] = true
		s.mirrorPut(ctx, r)
		if r.Node == s.cfg.NodeID {
			s.dropOrphanRecord(ctx, r)
		}
	}
	local, err := s.Store.ListTemplates(ctx, "", false)
	if err != nil {
		s.Logger.Warn("template mirror: list the templates", "err", err)
		return
	}
	shared := map[string]bool{}
	for _, t := range local {
		if t.State == store.TemplateReady && t.Shared && !byID[t.ID] {
			s.dropIfGone(ctx, t)
			continue
		}
		// Only what this node knows the catalog took: a record put whose
		// outcome was unknown leaves the row unshared, and its tags here
		// are not the catalog's to remove.
		shared[t.ID] = t.Shared
	}
	want := map[[3]string]bool{}
	for _, g := range tags {
		want[[3]string{g.Owner, g.Name, g.Tag}] = true
		s.TagPut(g)
	}
	if have, err := s.Store.ListTemplateTags(ctx, store.TagFilter{}); err == nil {
		for _, g := range have {
			if shared[g.TemplateID] && !want[[3]string{g.Owner, g.Name, g.Tag}] {
				s.TagDeleted(g.Owner, g.Name, g.Tag)
			}
		}
	}
}

// dropOrphanRecord takes out of the catalog a record of this node's whose
// template is not here (its making was cut short after it was
// published, or its deletion here did not reach the cluster) or failed.
func (s *Service) dropOrphanRecord(ctx context.Context, r SharedTemplate) {
	t, err := s.Store.GetTemplate(ctx, r.ID)
	switch {
	case err == nil && t.State != store.TemplateFailed:
		return // ready, or still being made: its maker settles it
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return
	}
	if err := s.dropFromCatalog(ctx, r.ID, r.Owner, false); err != nil {
		s.Logger.Warn("template mirror: drop a record whose template is gone", "template", r.ID, "err", err)
	}
}

// TemplatePut puts the copy of another node's new template.
func (s *Service) TemplatePut(r SharedTemplate) {
	ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
	defer cancel()
	s.mirrorPut(ctx, r)
}

func (s *Service) mirrorPut(ctx context.Context, r SharedTemplate) {
	if r.Node == s.cfg.NodeID || !validTemplateID(r.ID) {
		return // this node's own: its row is the original
	}
	kind := store.TemplateKind(r.Kind)
	if kind != store.TemplateBuild && kind != store.TemplateSnapshot {
		return
	}
	_, err := s.Store.PutTemplateCopy(ctx, store.Template{
		ID: r.ID, Owner: r.Owner, Name: r.Name, Kind: kind, Image: s.copyRef(r.ID), BaseImage: r.BaseImage,
		SourceID: r.SourceID, RecipeHash: r.RecipeHash, Spec: r.Spec, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt, Origin: r.Node,
	})
	if err != nil {
		s.Logger.Warn("template mirror: put a copy", "template", r.ID, "err", err)
	}
}

// TemplateDeleted drops this node's row of a template the catalog no
// longer has, once no sandbox here uses it.
func (s *Service) TemplateDeleted(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
	defer cancel()
	if t, err := s.Store.GetTemplate(ctx, id); err == nil && (t.Shared || t.Origin != "") {
		s.dropShared(ctx, t)
	}
}

// dropIfGone drops t when the catalog (read fresh: the watch may lag a
// template published a moment ago) has no record of it.
func (s *Service) dropIfGone(ctx context.Context, t store.Template) {
	if _, ok, err := s.Catalog.Fresh(ctx, t.ID); err != nil || ok {
		return
	}
	s.dropShared(ctx, t)
}

// dropShared removes a shared template's row and image here; one a local
// sandbox still uses stays, for the periodic sweep (sweepShared).
func (s *Service) dropShared(ctx context.Context, t store.Template) {
	if _, err := s.Store.DeleteTemplate(ctx, t.ID); err != nil {
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrTemplateInUse) {
			s.Logger.Warn("template mirror: delete a template the cluster deleted", "template", t.ID, "err", err)
		}
		return
	}
	s.copies.Delete(t.ID)
	if t.Origin != "" {
		if err := s.Catalog.Unhold(ctx, t.ID); err != nil {
			s.Logger.Warn("template mirror: say this node no longer holds it", "template", t.ID, "err", err)
		}
	}
	if s.Images != nil {
		if err := s.Images.RemoveImage(ctx, t.Image); err != nil {
			s.Logger.Warn("template mirror: remove the image of a template the cluster deleted", "template", t.ID, "err", err)
		}
	}
}

// publishEvery is how often this node retries publishing the templates the
// cluster could not take when they were made.
const publishEvery = 10 * time.Second

// runPublish publishes, every publishEvery until ctx ends, this node's
// ready templates the catalog does not have (made before the node shared
// templates, or while the cluster could not take them): a cheap store
// read when there are none. It is the one publisher of them, so no two
// runs race.
func (s *Service) runPublish(ctx context.Context) {
	if !s.sharing() {
		return
	}
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		local, err := s.Store.ListTemplates(ctx, "", false)
		if err != nil {
			continue
		}
		for _, t := range local {
			if t.State != store.TemplateReady || t.Shared || t.Origin != "" {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, pushTimeout)
			if err := s.shareExisting(pctx, t); err != nil {
				s.Logger.Warn("template: publish to the cluster", "template", t.ID, "err", err)
			}
			cancel()
		}
	}
}

// sweepShared drops the shared templates the catalog no longer has that
// a local sandbox kept until now.
func (s *Service) sweepShared(ctx context.Context) error {
	if !s.sharing() {
		return nil
	}
	local, err := s.Store.ListTemplates(ctx, "", false)
	if err != nil {
		return err
	}
	for _, t := range local {
		if t.State == store.TemplateReady && (t.Shared || t.Origin != "") {
			if _, ok := s.Catalog.Info(t.ID); !ok {
				s.dropIfGone(ctx, t)
			}
		}
	}
	return nil
}

// TagPut points a tag here as the catalog does.
func (s *Service) TagPut(g SharedTag) {
	ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
	defer cancel()
	if cur, err := s.Store.GetTemplateByTag(ctx, g.Owner, g.Name, g.Tag); err == nil && cur.ID == g.ID {
		return
	}
	// A template still being made here (its tags are published before
	// it is ready) refuses: its maker tags it as it finishes.
	if err := s.Store.TagTemplate(ctx, g.Owner, g.Name, []string{g.Tag}, g.ID); err != nil &&
		!errors.Is(err, store.ErrStateConflict) && !errors.Is(err, store.ErrNotFound) {
		s.Logger.Warn("template mirror: tag", "template", g.ID, "name", g.Name, "tag", g.Tag, "err", err)
	}
}

// TagDeleted removes a tag here as the catalog did.
func (s *Service) TagDeleted(owner, name, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), mirrorTimeout)
	defer cancel()
	if _, err := s.Store.UntagTemplates(ctx, owner, name, []string{tag}); err != nil {
		s.Logger.Warn("template mirror: untag", "name", name, "tag", tag, "err", err)
	}
}

// clusterRegistryImage reports whether a tenant's image reference names
// the cluster's registry, which holds every tenant's templates: never
// pulled for a tenant.
func (s *Service) clusterRegistryImage(host string) bool {
	return s.cfg.Registry != "" && strings.EqualFold(host, s.registryHost())
}

// dropFromCatalog deletes template id's record (with its tags and
// holders) and then, in the background, its image from the cluster's
// registry: a deleted template is nobody's to pull.
func (s *Service) dropFromCatalog(ctx context.Context, id, owner string, untaggedOnly bool) error {
	image, err := s.Catalog.Delete(ctx, id, owner, untaggedOnly)
	if err != nil || image == "" {
		return err
	}
	go func() {
		// A build cached under another id is the same image: its
		// manifest stays while any record names it.
		ctx, cancel := context.WithTimeout(context.Background(), registryTimeout)
		defer cancel()
		if shared, err := s.Catalog.ImageShared(ctx, image, id); err != nil || shared {
			return
		}
		s.deleteManifest(image)
	}()
	return nil
}

// registryTimeout bounds the registry's answer to a manifest delete.
const registryTimeout = 30 * time.Second

// deleteManifest deletes image (the cluster registry's, by digest) from
// the registry through its API, with the registry's account (basic
// auth): https, or http for a registry on loopback, as the engine reaches
// it. Best effort: a registry that refuses deletes keeps the layers until
// its operator collects them; it is logged. The registry's garbage
// collection frees the blobs.
func (s *Service) deleteManifest(image string) {
	repoPath, digest, ok := strings.Cut(image, "@")
	if !ok || !strings.HasPrefix(repoPath, s.cfg.Registry+"/") {
		return
	}
	host, repo, _ := strings.Cut(repoPath, "/")
	scheme := "https"
	if naming.IsLoopbackHost(host) {
		scheme = "http"
	}
	ctx, cancel := context.WithTimeout(context.Background(), registryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, scheme+"://"+host+"/v2/"+repo+"/manifests/"+digest, nil)
	if err != nil {
		return
	}
	if a := s.cfg.RegistryAuth; a != nil {
		req.SetBasicAuth(a.Username, a.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.Logger.Warn("template: delete its image from the cluster's registry", "image", image, "err", err)
		return
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusOK, http.StatusNotFound:
	default:
		s.Logger.Warn("template: the cluster's registry kept its image", "image", image, "status", resp.Status)
	}
}
