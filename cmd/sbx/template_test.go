package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// fakeTemplates serves the template routes, the snapshot and the fork
// over a fakeAPI: a build ends as final says, and its log says so.
func fakeTemplates(t *testing.T, final string) (*fakeAPI, *httptest.Server, func() []string) {
	t.Helper()
	f, _ := newFakeAPI(t)
	var (
		mu    sync.Mutex
		calls []string
	)
	tpl := sandboxd.Template{ID: "tpl-0123456789abcdef", Name: "py", Kind: "build", State: sandboxd.TemplateBuilding}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusAccepted, tpl)
	})
	mux.HandleFunc("GET /v1/templates/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "step 1: run true\n"+final+"\n")
	})
	mux.HandleFunc("GET /v1/templates/{id}", func(w http.ResponseWriter, r *http.Request) {
		done := tpl
		done.State = final
		if final == sandboxd.TemplateFailed {
			done.Error = "step 1 (run): exit code 1"
		}
		writeJSON(w, http.StatusOK, done)
	})
	mux.HandleFunc("DELETE /v1/templates/{id}", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusConflict, "conflict", "sandboxes made from it still exist")
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		snap := tpl
		snap.Kind, snap.State, snap.SourceID = "snapshot", sandboxd.TemplateReady, r.PathValue("id")
		writeJSON(w, http.StatusCreated, snap)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusCreated, map[string]any{"sandboxes": []sandboxd.Sandbox{{ID: "sb-00000000000000b1"}, {ID: "sb-00000000000000b2"}}})
	})
	fallback := f.handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if _, pattern := mux.Handler(r); pattern != "" {
			fallback.ServeHTTP(httptest.NewRecorder(), r) // records the body, checks the token
			mux.ServeHTTP(w, r)
			return
		}
		fallback.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
}

func writeRecipe(t *testing.T, recipe string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "recipe.json")
	if err := os.WriteFile(p, []byte(recipe), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTemplateBuild_FollowsTheLog(t *testing.T) {
	f, srv, calls := fakeTemplates(t, sandboxd.TemplateReady)
	got := sbx(t, srv, "", "template", "build", "-f", writeRecipe(t, `{"name":"py","steps":[{"copy":{"path":"/a","content":"aGk="}}]}`))
	if got.code != exitOK || got.stdout != "tpl-0123456789abcdef\n" || got.stderr != "step 1: run true\nready\n" {
		t.Errorf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if diff := cmp.Diff(`{"name":"py","steps":[{"copy":{"path":"/a","content":"aGk="}}]}`, f.bodies["POST /v1/templates"]); diff != "" {
		t.Errorf("recipe sent (-want +got):\n%s", diff)
	}
	want := []string{"POST /v1/templates", "GET /v1/templates/tpl-0123456789abcdef/logs", "GET /v1/templates/tpl-0123456789abcdef"}
	if diff := cmp.Diff(want, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestTemplateBuild_FailedExits1(t *testing.T) {
	_, srv, _ := fakeTemplates(t, sandboxd.TemplateFailed)
	got := sbx(t, srv, "", "template", "build", "-f", "-")
	if got.code != exitUsage {
		t.Errorf("an empty recipe on stdin: exit %d, want %d", got.code, exitUsage)
	}
	got = sbx(t, srv, `{"steps":[{"run":"false"}]}`, "template", "build", "-f", "-")
	if got.code != exitError || !strings.HasSuffix(got.stderr, "sbx: the build of tpl-0123456789abcdef failed: step 1 (run): exit code 1\n") {
		t.Errorf("exit %d stderr %q", got.code, got.stderr)
	}
}

func TestTemplateBuild_DetachAndBadRecipe(t *testing.T) {
	_, srv, calls := fakeTemplates(t, sandboxd.TemplateReady)
	got := sbx(t, srv, "", "template", "build", "--detach", "-f", writeRecipe(t, `{"steps":[{"run":"true"}]}`))
	if got.code != exitOK || got.stdout != "tpl-0123456789abcdef\n" || got.stderr != "" {
		t.Errorf("--detach: exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	for _, tt := range []struct{ name, recipe string }{
		{"unknown field", `{"stpes":[]}`},
		{"not JSON", `steps: []`},
	} {
		if got := sbx(t, srv, "", "template", "build", "-f", writeRecipe(t, tt.recipe)); got.code != exitUsage {
			t.Errorf("%s: exit %d, want %d (stderr %q)", tt.name, got.code, exitUsage, got.stderr)
		}
	}
	if got := sbx(t, srv, "", "template", "build"); got.code != exitUsage {
		t.Errorf("no -f: exit %d, want %d", got.code, exitUsage)
	}
	if diff := cmp.Diff([]string{"POST /v1/templates"}, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestSnapshotForkCreate_ResolveNamesAndSend(t *testing.T) {
	f, srv, _ := fakeTemplates(t, sandboxd.TemplateReady)
	got := sbx(t, srv, "", "snapshot", "web", "--name", "snap")
	if got.code != exitOK || got.stdout != "tpl-0123456789abcdef\n" {
		t.Errorf("snapshot: exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if b := f.bodies["POST /v1/sandboxes/"+webID+"/snapshots"]; b != `{"name":"snap"}` {
		t.Errorf("snapshot body %q", b)
	}
	got = sbx(t, srv, "", "fork", "web", "-n", "2")
	if got.code != exitOK || got.stdout != "sb-00000000000000b1\nsb-00000000000000b2\n" {
		t.Errorf("fork: exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if b := f.bodies["POST /v1/sandboxes/"+webID+"/fork"]; b != `{"count":2}` {
		t.Errorf("fork body %q", b)
	}
	if got := sbx(t, srv, "", "fork", "web", "--memory"); got.code != exitOK {
		t.Errorf("fork --memory: exit %d stderr %q", got.code, got.stderr)
	}
	if b := f.bodies["POST /v1/sandboxes/"+webID+"/fork"]; b != `{"count":1,"memory":true}` {
		t.Errorf("fork --memory body %q", b)
	}
	if got := sbx(t, srv, "", "create", "--template", "py"); got.code != exitOK {
		t.Fatalf("create --template: exit %d stderr %q", got.code, got.stderr)
	}
	var body map[string]any
	json.Unmarshal([]byte(f.bodies["POST /v1/sandboxes"]), &body)
	if diff := cmp.Diff(map[string]any{"template": "py"}, body); diff != "" {
		t.Errorf("create body (-want +got):\n%s", diff)
	}
}

func TestTemplateRm_InUseIsConflict(t *testing.T) {
	_, srv, _ := fakeTemplates(t, sandboxd.TemplateReady)
	got := sbx(t, srv, "", "template", "rm", "tpl-0123456789abcdef")
	if got.code != exitConflict || got.stderr != "sbx: conflict: sandboxes made from it still exist\n" {
		t.Errorf("exit %d stderr %q", got.code, got.stderr)
	}
}
