package v1

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// TestOpenAPI_MatchesRoutes fails when a route is in spec/openapi.yaml and
// not in the route table, or the other way round.
func TestOpenAPI_MatchesRoutes(t *testing.T) {
	b, err := os.ReadFile("../../../spec/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse spec/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var inSpec []string
	for path, item := range doc.Paths {
		for key := range item {
			if slices.Contains(methods, key) {
				inSpec = append(inSpec, strings.ToUpper(key)+" "+path)
			}
		}
	}
	var inServer []string
	for _, rt := range routes() {
		// A wildcard that takes the rest of the path ({ref...}, an image
		// reference with its slashes) is a plain parameter in OpenAPI.
		inServer = append(inServer, rt.method+" "+strings.ReplaceAll(rt.path, "...}", "}"))
	}
	slices.Sort(inSpec)
	slices.Sort(inServer)
	if diff := cmp.Diff(inServer, inSpec); diff != "" {
		t.Errorf("routes differ (-server +spec/openapi.yaml):\n%s", diff)
	}
}

// TestRoutes_Unique guards the table itself: one handler per method and path.
func TestRoutes_Unique(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range routes() {
		k := rt.method + " " + rt.path
		if seen[k] {
			t.Errorf("route %s is in the table twice", k)
		}
		seen[k] = true
	}
}
