package e2b

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestRecipeOf_RelativeWorkdirFollowsDocker: a relative WORKDIR before any
// absolute one is left relative for the build to resolve under the base
// image's working directory (it was made absolute under /); after an
// absolute one it is joined to it, as Docker's WORKDIR.
func TestRecipeOf_RelativeWorkdirFollowsDocker(t *testing.T) {
	f := &Facade{}
	rec, err := f.recipeOf("alice", buildStartBody{FromImage: "sandboxd/base:bookworm", Steps: []buildStepBody{
		{Type: "WORKDIR", Args: []string{"app"}},
		{Type: "WORKDIR", Args: []string{"./src/"}},
		{Type: "WORKDIR", Args: []string{"/srv"}},
		{Type: "WORKDIR", Args: []string{"www/../data"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []service.Step{{Workdir: "app"}, {Workdir: "src"}, {Workdir: "/srv"}, {Workdir: "/srv/data"}}
	if d := cmp.Diff(want, rec.Steps); d != "" {
		t.Errorf("steps (-want +got):\n%s", d)
	}
}
