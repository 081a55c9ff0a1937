package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// templateCatalog is the service's TemplateCatalog over the cluster's
// templates/ keys: nil (no interface value) on a single node.
func (d *Daemon) templateCatalog() service.TemplateCatalog {
	if d.cluster == nil {
		return nil
	}
	return catalog{d.cluster}
}

type catalog struct{ c *clusterNode }

var _ service.TemplateCatalog = catalog{}

func toShared(r cluster.TemplateRecord) service.SharedTemplate {
	return service.SharedTemplate{
		ID: r.ID, Owner: r.Owner, Name: r.Name, Kind: r.Kind, BaseImage: r.BaseImage, SourceID: r.SourceID,
		RecipeHash: r.RecipeHash, Spec: r.Spec, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt, Node: r.Node, Image: r.Image,
	}
}

func (k catalog) Put(ctx context.Context, t service.SharedTemplate) error {
	return catalogErr(k.c.node.PutTemplate(ctx, cluster.TemplateRecord{
		ID: t.ID, Owner: t.Owner, Name: t.Name, Kind: t.Kind, BaseImage: t.BaseImage, SourceID: t.SourceID,
		RecipeHash: t.RecipeHash, Spec: t.Spec, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, Node: t.Node, Image: t.Image,
	}))
}

func (k catalog) Info(id string) (service.SharedTemplate, bool) {
	r, ok := k.c.node.TemplateInfo(id)
	return toShared(r), ok
}

func (k catalog) Fresh(ctx context.Context, id string) (service.SharedTemplate, bool, error) {
	r, ok, err := k.c.node.FreshTemplate(ctx, id)
	return toShared(r), ok, catalogErr(err)
}

func (k catalog) FreshTag(ctx context.Context, owner, name, tag string) (string, bool, error) {
	id, ok, err := k.c.node.FreshTag(ctx, owner, name, tag)
	return id, ok, catalogErr(err)
}

func (k catalog) SetTags(ctx context.Context, owner, name string, tags []string, id string, onlyNewer bool, createdAt time.Time) ([]string, error) {
	set, err := k.c.node.SetTemplateTags(ctx, owner, name, tags, id, onlyNewer, createdAt)
	return set, catalogErr(err)
}

func (k catalog) RemoveTags(ctx context.Context, owner, name string, tags []string) (int, error) {
	n, err := k.c.node.RemoveTemplateTags(ctx, owner, name, tags)
	return n, catalogErr(err)
}

func (k catalog) Delete(ctx context.Context, id, owner string, untaggedOnly bool) (string, error) {
	image, err := k.c.node.DeleteTemplate(ctx, id, owner, untaggedOnly)
	return image, catalogErr(err)
}

func (k catalog) ImageShared(ctx context.Context, image, except string) (bool, error) {
	shared, err := k.c.node.ImageShared(ctx, image, except)
	return shared, catalogErr(err)
}

func (k catalog) Unhold(ctx context.Context, id string) error {
	return catalogErr(k.c.node.UnholdTemplate(ctx, id))
}

// catalogErr is serviceErr for the catalog's calls, whose refusals are
// the caller's to hear: a template deleted or in use, tags that moved.
func catalogErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrTemplateInUse):
		return &service.Error{Kind: service.ErrConflict, Err: err, Msg: "sandboxes made from the template still exist; destroy them first"}
	case errors.Is(err, cluster.ErrNotFound):
		return &service.Error{Kind: service.ErrNotFound, Err: err, Msg: err.Error()}
	case errors.Is(err, cluster.ErrConflict):
		return &service.Error{Kind: service.ErrConflict, Err: err, Msg: err.Error()}
	case errors.Is(err, cluster.ErrInvalidArgument):
		return &service.Error{Kind: service.ErrInvalidArgument, Err: err, Msg: err.Error()}
	}
	return serviceErr(err)
}

func (k catalog) Hold(ctx context.Context, id string) error {
	return catalogErr(k.c.node.HoldTemplate(ctx, id))
}

func (k catalog) Users(id string) []string { return k.c.node.TemplateUsers(id) }

// templateMirror hands the catalog's watch to the service's mirror.
type templateMirror struct{ svc *service.Service }

var _ cluster.TemplateEvents = templateMirror{}

func (m templateMirror) ResetTemplates(recs []cluster.TemplateRecord, tags []cluster.TemplateTag) {
	out := make([]service.SharedTemplate, len(recs))
	for i, r := range recs {
		out[i] = toShared(r)
	}
	gs := make([]service.SharedTag, len(tags))
	for i, g := range tags {
		gs[i] = service.SharedTag{Owner: g.Owner, Name: g.Name, Tag: g.Tag, ID: g.ID}
	}
	m.svc.ResetTemplates(out, gs)
}

func (m templateMirror) TemplatePut(r cluster.TemplateRecord) { m.svc.TemplatePut(toShared(r)) }
func (m templateMirror) TemplateDeleted(id string)            { m.svc.TemplateDeleted(id) }
func (m templateMirror) TagPut(g cluster.TemplateTag) {
	m.svc.TagPut(service.SharedTag{Owner: g.Owner, Name: g.Name, Tag: g.Tag, ID: g.ID})
}
func (m templateMirror) TagDeleted(owner, name, tag string) { m.svc.TagDeleted(owner, name, tag) }

// registryAuth reads --registry-auth-file ("user:password", one line).
// The registry holds every tenant's templates, so one off this host must
// have an account; one on loopback may go without (nil).
func registryAuth(registry, file string) (*runtime.RegistryAuth, error) {
	host, _, _ := strings.Cut(registry, "/")
	if file == "" {
		if naming.IsLoopbackHost(host) {
			return nil, nil
		}
		return nil, fmt.Errorf("--registry %s: give its account in --registry-auth-file: the registry holds every tenant's templates, and must not serve them to anyone who asks", registry)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--registry-auth-file: %w", err)
	}
	user, pass, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	if !ok || user == "" || pass == "" {
		return nil, fmt.Errorf("--registry-auth-file %s: want one line user:password", file)
	}
	return &runtime.RegistryAuth{ServerAddress: host, Username: user, Password: pass}, nil
}

// clusterRegistry is --registry in cluster mode, "" on a single node
// (which shares nothing).
func clusterRegistry(c *clusterNode, registry string) string {
	if c == nil {
		return ""
	}
	return registry
}

// pusher pushes templates to the cluster's registry: the engine's.
func (d *Daemon) pusher() runtime.Pusher {
	if p, ok := d.images.(runtime.Pusher); ok && d.cluster != nil {
		return p
	}
	return nil
}
