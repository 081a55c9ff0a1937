package cluster

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// events records what FollowTemplates hands a node.
type events struct {
	mu      sync.Mutex
	resets  int
	records map[string]TemplateRecord
	tags    map[[3]string]string
	order   []string
}

func (e *events) ResetTemplates(recs []TemplateRecord, tags []TemplateTag) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resets++
	e.records, e.tags = map[string]TemplateRecord{}, map[[3]string]string{}
	for _, r := range recs {
		e.records[r.ID] = r
	}
	for _, g := range tags {
		e.tags[[3]string{g.Owner, g.Name, g.Tag}] = g.ID
	}
}

func (e *events) TemplatePut(r TemplateRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.records[r.ID] = r
	e.order = append(e.order, "put "+r.ID)
}

func (e *events) TemplateDeleted(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, id)
	e.order = append(e.order, "delete "+id)
}

func (e *events) TagPut(g TemplateTag) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tags[[3]string{g.Owner, g.Name, g.Tag}] = g.ID
	e.order = append(e.order, "tag "+g.Name+":"+g.Tag+" "+g.ID)
}

func (e *events) TagDeleted(owner, name, tag string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.tags, [3]string{owner, name, tag})
	e.order = append(e.order, "untag "+name+":"+tag)
}

func (e *events) tag(owner, name, tag string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tags[[3]string{owner, name, tag}]
}

func (e *events) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.records[id]
	return ok
}

// The catalog: a record comes before its tags on every node's watch; of
// two builds of a name the later-made keeps its tags whichever finishes
// last; tags need their record; a delete takes the record, the owner's
// tags that point to it and its holders, and leaves other owners' alone.
func TestTemplates_CatalogTagsOrderAndDelete(t *testing.T) {
	m := startSingle(t)
	a := openNode(t, "a", []string{m.ClientURL()})
	b := openNode(t, "b", []string{m.ClientURL()})
	ctx := t.Context()
	var seen events
	if err := b.FollowTemplates(ctx, &seen); err != nil {
		t.Fatal(err)
	}
	if seen.resets != 1 {
		t.Fatalf("resets = %d, want 1 (the start)", seen.resets)
	}

	older := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := older.Add(time.Minute)
	old := TemplateRecord{ID: "tpl-1", Owner: "alice", Name: "web", Kind: "build", CreatedAt: older, Node: "a", Image: "reg/sandboxd/templates@sha256:1"}
	fresh := TemplateRecord{ID: "tpl-2", Owner: "alice", Name: "web", Kind: "build", CreatedAt: newer, Node: "a"}

	if _, err := a.SetTemplateTags(ctx, "alice", "web", []string{"latest"}, "tpl-1", true, older); !errors.Is(err, ErrNotFound) {
		t.Fatalf("tags of a template without a record: got %v, want ErrNotFound", err)
	}
	for _, r := range []TemplateRecord{old, fresh} {
		if err := a.PutTemplate(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// The newer build finishes first and takes the tags; the older one,
	// finishing after it, does not take them back.
	if set, err := a.SetTemplateTags(ctx, "alice", "web", []string{"latest", "v2"}, "tpl-2", true, newer); err != nil || len(set) != 2 {
		t.Fatalf("tags of tpl-2: %v %v", set, err)
	}
	if set, err := a.SetTemplateTags(ctx, "alice", "web", []string{"latest", "v1"}, "tpl-1", true, older); err != nil || !slices.Equal(set, []string{"v1"}) {
		t.Fatalf("tags of the older tpl-1: set %v %v, want only v1", set, err)
	}
	// A tag asked for (not a build finishing) moves wherever it points.
	if _, err := b.SetTemplateTags(ctx, "alice", "web", []string{"stable"}, "tpl-1", false, older); err != nil {
		t.Fatal(err)
	}
	// Another owner's name of the same spelling is its own.
	if err := a.PutTemplate(ctx, TemplateRecord{ID: "tpl-3", Owner: "bob", Name: "web", Kind: "snapshot", CreatedAt: newer, Node: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTemplateTags(ctx, "bob", "web", []string{"latest"}, "tpl-3", false, newer); err != nil {
		t.Fatal(err)
	}
	if err := b.HoldTemplate(ctx, "tpl-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b's watch to see the tags and the hold", func() bool {
		return seen.tag("alice", "web", "stable") == "tpl-1" && seen.tag("bob", "web", "latest") == "tpl-3" && len(b.TemplateHolders("tpl-1")) == 2
	})
	if got := seen.tag("alice", "web", "latest"); got != "tpl-2" {
		t.Errorf("alice's web:latest = %q, want tpl-2 (made last)", got)
	}
	seen.mu.Lock()
	putAt, tagAt := slices.Index(seen.order, "put tpl-1"), slices.Index(seen.order, "tag web:v1 tpl-1")
	seen.mu.Unlock()
	if putAt < 0 || tagAt < putAt {
		t.Errorf("events %v: the record of tpl-1 must come before its tags", seen.order)
	}
	if id, ok, err := b.FreshTag(ctx, "alice", "web", "v1"); err != nil || !ok || id != "tpl-1" {
		t.Errorf("FreshTag(web:v1) = %q %v %v, want tpl-1", id, ok, err)
	}

	// The sweep's delete leaves a tagged template; a placement made from
	// it keeps it until its release.
	if _, err := b.DeleteTemplate(ctx, "tpl-1", "alice", true); !errors.Is(err, ErrConflict) {
		t.Fatalf("untagged-only delete of a tagged template: got %v, want ErrConflict", err)
	}
	use := Placement{ID: "sb-use", Node: "a", Owner: "alice", Template: "tpl-1"}
	if err := a.ClaimPlacement(ctx, use); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteTemplate(ctx, "tpl-1", "alice", false); !errors.Is(err, ErrTemplateInUse) {
		t.Fatalf("delete of a template a placement was made from: got %v, want ErrTemplateInUse", err)
	}
	if err := a.ReleasePlacementOf(ctx, "sb-use", "a"); err != nil {
		t.Fatal(err)
	}
	// Another record of the same image (a cached build under another
	// id) keeps its manifest in the registry.
	if err := a.PutTemplate(ctx, TemplateRecord{ID: "tpl-4", Owner: "alice", Kind: "build", CreatedAt: newer, Node: "a", Image: old.Image}); err != nil {
		t.Fatal(err)
	}
	if shared, err := a.ImageShared(ctx, old.Image, "tpl-1"); err != nil || !shared {
		t.Errorf("ImageShared(tpl-1's image) = %v %v, want true (tpl-4)", shared, err)
	}
	if image, err := b.DeleteTemplate(ctx, "tpl-1", "alice", false); err != nil || image != old.Image {
		t.Fatalf("DeleteTemplate(tpl-1) = %q %v, want its image %q", image, err, old.Image)
	}
	if shared, err := a.ImageShared(ctx, old.Image, "tpl-4"); err != nil || shared {
		t.Errorf("ImageShared(the image, except tpl-4) = %v %v, want false", shared, err)
	}
	if err := a.ClaimPlacement(ctx, Placement{ID: "sb-late", Node: "a", Owner: "alice", Template: "tpl-1"}); !errors.Is(err, ErrTemplateGone) {
		t.Errorf("a claim made from a deleted template: got %v, want ErrNotFound", err)
	}
	if _, err := b.DeleteTemplate(ctx, "tpl-1", "alice", false); err != nil {
		t.Errorf("a second delete: got %v, want nil", err)
	}
	waitFor(t, 10*time.Second, "b's watch to see the delete", func() bool { return !seen.has("tpl-1") })
	for _, tag := range []string{"v1", "stable"} {
		waitFor(t, 10*time.Second, "web:"+tag+" to go with tpl-1", func() bool { return seen.tag("alice", "web", tag) == "" })
	}
	if got := seen.tag("alice", "web", "latest"); got != "tpl-2" {
		t.Errorf("web:latest = %q after tpl-1's delete, want tpl-2 (it pointed elsewhere)", got)
	}
	if got := seen.tag("bob", "web", "latest"); got != "tpl-3" {
		t.Errorf("bob's web:latest = %q, want tpl-3", got)
	}
	if h := b.TemplateHolders("tpl-1"); h != nil {
		t.Errorf("holders of the deleted tpl-1: %v", h)
	}
	if _, ok, err := a.FreshTemplate(ctx, "tpl-1"); err != nil || ok {
		t.Errorf("FreshTemplate(tpl-1) after the delete: %v %v", ok, err)
	}
	// A hold put after the delete would outlive it: refused quietly.
	if err := b.HoldTemplate(ctx, "tpl-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := a.cli.Get(ctx, tplHolderKey("tpl-1", "b")); err == nil && len(got.Kvs) > 0 {
		t.Errorf("a hold of a deleted template was put")
	}
}
