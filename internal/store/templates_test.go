package store_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// buildOf inserts owner's build id under name and finishes it with tags.
func buildOf(t *testing.T, s *store.Store, id, owner, name string, finish bool, tags ...string) {
	t.Helper()
	if _, err := s.CreateTemplate(t.Context(), store.Template{ID: id, Owner: owner, Name: name, Kind: store.TemplateBuild, Image: "img:" + id}); err != nil {
		t.Fatal(err)
	}
	if finish {
		if _, err := s.FinishTemplate(t.Context(), id, 1, tags...); err != nil {
			t.Fatal(err)
		}
	}
}

func tagged(t *testing.T, s *store.Store, owner, name, tag string) string {
	t.Helper()
	got, err := s.GetTemplateByTag(t.Context(), owner, name, tag)
	if err != nil {
		return ""
	}
	return got.ID
}

// Of two builds of a name, the one asked for last holds its tags,
// whichever finishes first; an explicit tag moves wherever it is told.
func TestTemplateTags_NewerBuildWins(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	// The same clock reading for both, and the newer one's id sorts
	// first: the order of the requests decides.
	buildOf(t, s, "tpl-zzz-old", "alice", "app", false)
	buildOf(t, s, "tpl-new", "alice", "app", true, "latest")
	if _, err := s.FinishTemplate(ctx, "tpl-zzz-old", 1, "latest", "old-only"); err != nil {
		t.Fatal(err)
	}
	if got := tagged(t, s, "alice", "app", "latest"); got != "tpl-new" {
		t.Errorf("app:latest = %q after the older build finished last, want tpl-new", got)
	}
	if got := tagged(t, s, "alice", "app", "old-only"); got != "tpl-zzz-old" {
		t.Errorf("app:old-only = %q, want tpl-zzz-old (no newer build holds it)", got)
	}
	if err := s.TagTemplate(ctx, "alice", "app", []string{"latest"}, "tpl-zzz-old"); err != nil {
		t.Fatal(err)
	}
	if got := tagged(t, s, "alice", "app", "latest"); got != "tpl-zzz-old" {
		t.Errorf("app:latest = %q after tagging it explicitly, want tpl-zzz-old", got)
	}
	if got := tagged(t, s, "bob", "app", "latest"); got != "" {
		t.Errorf("bob sees alice's tag: %q", got)
	}
}

// A superseded build that gets a tag back between the sweep's list and
// its delete is not deleted.
func TestTemplateTags_SupersededDeleteRechecks(t *testing.T) {
	s, clk := newStore(t)
	ctx := t.Context()
	buildOf(t, s, "tpl-a", "alice", "app", true, "latest")
	clk.Advance(time.Second)
	buildOf(t, s, "tpl-b", "alice", "app", true, "latest")
	clk.Advance(time.Hour)
	before := clk.Now().Add(-10 * time.Minute)
	list, err := s.SupersededBuilds(ctx, before)
	if err != nil || len(list) != 1 || list[0].ID != "tpl-a" {
		t.Fatalf("superseded = %+v, %v; want tpl-a", list, err)
	}
	if err := s.TagTemplate(ctx, "alice", "app", []string{"v1"}, "tpl-a"); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteSupersededBuild(ctx, "tpl-a", before); err != nil || deleted {
		t.Errorf("delete of a build tagged again: %v, %v; want kept", deleted, err)
	}
	if _, err := s.UntagTemplates(ctx, "alice", "app", []string{"v1"}); err != nil {
		t.Fatal(err)
	}
	if deleted, _ := s.DeleteSupersededBuild(ctx, "tpl-a", before); deleted {
		t.Error("deleted within its grace after the untag")
	}
	clk.Advance(time.Hour)
	if deleted, err := s.DeleteSupersededBuild(ctx, "tpl-a", clk.Now().Add(-10*time.Minute)); err != nil || !deleted {
		t.Errorf("delete past the grace: %v, %v", deleted, err)
	}
}
