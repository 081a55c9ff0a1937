package v1_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// template is the wire's template object, as a client sees it.
type template struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	State     string   `json:"state"`
	BaseImage string   `json:"base_image"`
	SourceID  string   `json:"source_id"`
	SizeBytes int64    `json:"size_bytes"`
	Error     string   `json:"error"`
	Tags      []string `json:"tags"`
}

// deleteTemplate deletes a template as the admin when the test ends;
// gone already is fine.
func deleteTemplate(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := env.Service.DeleteTemplate(ctx, service.Caller{Admin: true}, id)
		if err != nil && !service.Is(err, service.ErrNotFound) {
			t.Errorf("delete template %s: %v", id, err)
		}
	})
}

// templates counts owner's template rows, forks' captures included,
// straight from the store.
func templates(t *testing.T, owner string) int {
	t.Helper()
	ts, err := env.Store.ListTemplates(t.Context(), owner, true)
	if err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// removeForkCaptures removes owner's fork captures and their images when
// the test ends, after its sandboxes are gone (register it first): the
// daemon's sweep would, but only past a grace longer than the test run.
func removeForkCaptures(t *testing.T, owner string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ts, err := env.Store.ListTemplates(ctx, owner, true)
		if err != nil {
			t.Error(err)
			return
		}
		for _, tpl := range ts {
			if _, err := env.Store.DeleteTemplate(ctx, tpl.ID); err != nil {
				t.Errorf("delete fork capture %s: %v", tpl.ID, err)
			}
			if err := env.Service.Images.RemoveImage(ctx, tpl.Image); err != nil {
				t.Errorf("remove the image of fork capture %s: %v", tpl.ID, err)
			}
		}
	})
}

// TestTemplates_BadInput: every bad request gets its typed error and
// changes nothing: no template row, no sandbox row.
func TestTemplates_BadInput(t *testing.T) {
	tok := token(t, "tpl-bad-input")
	sb := create(t, tok, `{`+busybox+`}`)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"step with two fields", "POST", "/v1/templates", `{"base":"` + apitest.BusyboxImage + `","steps":[{"workdir":"/w","user":"root"}]}`, 400, "invalid_argument"},
		{"empty step", "POST", "/v1/templates", `{"steps":[{}]}`, 400, "invalid_argument"},
		{"unknown recipe field", "POST", "/v1/templates", `{"bsae":"x"}`, 400, "invalid_argument"},
		{"copy content not base64", "POST", "/v1/templates", `{"steps":[{"copy":{"path":"/a","content":"!!"}}]}`, 400, "invalid_argument"},
		{"copy path with NUL", "POST", "/v1/templates", `{"steps":[{"copy":{"path":"a\u0000b","content":""}}]}`, 400, "invalid_argument"},
		{"ready without start", "POST", "/v1/templates", `{"ready_cmd":"true"}`, 400, "invalid_argument"},
		{"base from a registry not allowed", "POST", "/v1/templates", `{"base":"nope/nope:1"}`, 403, "permission_denied"},
		{"recipe name not a label", "POST", "/v1/templates", `{"name":"Not_A_Label"}`, 400, "invalid_argument"},
		{"create from an unknown name", "POST", "/v1/sandboxes", `{"template":"nope"}`, 404, "not_found"},
		{"create from an unknown id", "POST", "/v1/sandboxes", `{"template":"tpl-0000000000000000"}`, 404, "not_found"},
		{"create from a template and an image", "POST", "/v1/sandboxes", `{` + busybox + `,"template":"nope"}`, 400, "invalid_argument"},
		{"create from a template's image", "POST", "/v1/sandboxes", `{"image":"sandboxd/template:tpl-0000000000000000"}`, 400, "invalid_argument"},
		{"fork 0", "POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count":0}`, 400, "invalid_argument"},
		{"fork 17", "POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count":17}`, 400, "invalid_argument"},
		{"fork count not a number", "POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count":"2"}`, 400, "invalid_argument"},
		{"fork an unknown sandbox", "POST", "/v1/sandboxes/sb-0000000000000000/fork", ``, 404, "not_found"},
		{"snapshot name not a label", "POST", "/v1/sandboxes/" + sb.ID + "/snapshots", `{"name":"A B"}`, 400, "invalid_argument"},
		{"snapshot body not an object", "POST", "/v1/sandboxes/" + sb.ID + "/snapshots", `[]`, 400, "invalid_argument"},
		{"snapshot an unknown sandbox", "POST", "/v1/sandboxes/nope/snapshots", ``, 404, "not_found"},
		{"get an unknown template", "GET", "/v1/templates/nope", ``, 404, "not_found"},
		{"logs of an unknown template", "GET", "/v1/templates/tpl-0000000000000000/logs", ``, 404, "not_found"},
		{"delete an unknown template", "DELETE", "/v1/templates/nope", ``, 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sandboxes, tpls := rows(t, "tpl-bad-input"), templates(t, "tpl-bad-input")
			wantError(t, do(t, tok, tt.method, tt.path, tt.body), tt.status, tt.code)
			if got := rows(t, "tpl-bad-input"); got != sandboxes {
				t.Errorf("sandbox rows: %d before, %d after", sandboxes, got)
			}
			if got := templates(t, "tpl-bad-input"); got != tpls {
				t.Errorf("template rows: %d before, %d after", tpls, got)
			}
		})
	}
}

// TestTemplates_SnapshotCreateDelete: a snapshot holds the sandbox's
// files; a sandbox created from it by name has them; the template cannot
// be deleted while that sandbox exists (409), can once it is gone (204),
// and a second delete is 404.
func TestTemplates_SnapshotCreateDelete(t *testing.T) {
	t.Parallel()
	tok := token(t, "tpl-snapshot")
	src := create(t, tok, `{`+busybox+`}`)
	decode[struct{}](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/exec", `{"command":"echo kept > /root/mark"}`), http.StatusOK)

	snap := decode[template](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/snapshots", `{"name":"snap"}`), http.StatusCreated)
	deleteTemplate(t, snap.ID)
	if !regexp.MustCompile(`^tpl-[0-9a-f]{16}$`).MatchString(snap.ID) || snap.Name != "snap" || snap.Kind != "snapshot" ||
		snap.State != "ready" || snap.SourceID != src.ID || snap.SizeBytes <= 0 {
		t.Errorf("snapshot = %+v", snap)
	}
	if got := decode[template](t, do(t, tok, "GET", "/v1/templates/snap", ""), http.StatusOK); got.ID != snap.ID {
		t.Errorf("GET by name = %+v, want %s", got, snap.ID)
	}
	list := decode[struct {
		Templates []template `json:"items"`
	}](t, do(t, tok, "GET", "/v1/templates", ""), http.StatusOK)
	if len(list.Templates) != 1 || list.Templates[0].ID != snap.ID {
		t.Errorf("list = %+v, want the snapshot alone", list)
	}
	wantError(t, do(t, token(t, "tpl-other"), "GET", "/v1/templates/"+snap.ID, ""), http.StatusNotFound, "not_found")

	made := create(t, tok, `{"template":"snap"}`)
	out := decode[struct {
		Stdout string `json:"stdout"`
	}](t, do(t, tok, "POST", "/v1/sandboxes/"+made.ID+"/exec", `{"command":"cat /root/mark"}`), http.StatusOK)
	if out.Stdout != "kept\n" {
		t.Errorf("the file in the sandbox made from the snapshot: %q", out.Stdout)
	}
	wantError(t, do(t, tok, "DELETE", "/v1/templates/"+snap.ID, ""), http.StatusConflict, "conflict")
	if r := do(t, tok, "DELETE", "/v1/sandboxes/"+made.ID, ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy the sandbox made from the snapshot: %s", r)
	}
	if r := do(t, tok, "DELETE", "/v1/templates/snap", ""); r.status != http.StatusNoContent {
		t.Fatalf("delete the unused snapshot: %s", r)
	}
	wantError(t, do(t, tok, "DELETE", "/v1/templates/"+snap.ID, ""), http.StatusNotFound, "not_found")

	// A name is a pointer: another snapshot under it takes it, and the
	// first stays, by its id, untagged.
	first := decode[template](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/snapshots", `{"name":"snap"}`), http.StatusCreated)
	deleteTemplate(t, first.ID)
	second := decode[template](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/snapshots", `{"name":"snap"}`), http.StatusCreated)
	deleteTemplate(t, second.ID)
	if got := decode[template](t, do(t, tok, "GET", "/v1/templates/snap:latest", ""), http.StatusOK); got.ID != second.ID || len(got.Tags) != 1 || got.Tags[0] != "snap:latest" {
		t.Errorf("GET snap:latest = %+v, want %s tagged snap:latest", got, second.ID)
	}
	if got := decode[template](t, do(t, tok, "GET", "/v1/templates/"+first.ID, ""), http.StatusOK); len(got.Tags) != 0 {
		t.Errorf("the first snapshot keeps tags %v", got.Tags)
	}
}

// TestTemplates_Fork: a fork answers its sandboxes as creates do (each
// with its own id and private key) and holding the source's files; an
// empty body forks one.
func TestTemplates_Fork(t *testing.T) {
	t.Parallel()
	tok := token(t, "tpl-fork")
	removeForkCaptures(t, "tpl-fork")
	src := create(t, tok, `{`+busybox+`,"env":{"FROM":"src"}}`)
	decode[struct{}](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/exec", `{"command":"echo forked > /root/mark"}`), http.StatusOK)
	type forked struct {
		Sandboxes []sandbox `json:"sandboxes"`
	}
	got := decode[forked](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/fork", `{"count":2}`), http.StatusCreated)
	one := decode[forked](t, do(t, tok, "POST", "/v1/sandboxes/"+src.ID+"/fork", ``), http.StatusCreated)
	got.Sandboxes = append(got.Sandboxes, one.Sandboxes...)
	for _, sb := range got.Sandboxes {
		t.Cleanup(func() { destroy(t, sb.ID) })
	}
	if len(got.Sandboxes) != 3 {
		t.Fatalf("forks: %d sandboxes, want 2 + 1", len(got.Sandboxes))
	}
	seen := map[string]bool{src.ID: true}
	for _, sb := range got.Sandboxes {
		if seen[sb.ID] || sb.State != "running" || sb.Env["FROM"] != "src" || !strings.Contains(sb.SSHPrivateKey, "PRIVATE KEY") {
			t.Errorf("forked sandbox %+v", sb)
		}
		seen[sb.ID] = true
		out := decode[struct {
			Stdout string `json:"stdout"`
		}](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"cat /root/mark"}`), http.StatusOK)
		if out.Stdout != "forked\n" {
			t.Errorf("the file in fork %s: %q", sb.ID, out.Stdout)
		}
	}
	list := decode[struct {
		Templates []template `json:"items"`
	}](t, do(t, tok, "GET", "/v1/templates", ""), http.StatusOK)
	if len(list.Templates) != 0 {
		t.Errorf("forks' captures are listed: %+v", list.Templates)
	}
}

// TestTemplates_BuildLogEndsWithTheBuild: a build answers 202, building;
// its log streams the steps' output and ends when the build does, which
// has then settled ready; the same recipe again is the cached template.
func TestTemplates_BuildLogEndsWithTheBuild(t *testing.T) {
	t.Parallel()
	tok := token(t, "tpl-build")
	recipe := `{"name":"built","base":"` + apitest.BusyboxImage + `","steps":[` +
		`{"env":{"GREETING":"hello"}},{"run":"echo $GREETING-from-the-build; sleep 1; echo second-line"},` +
		`{"copy":{"path":"/etc/built","content":"YnVpbHQK"}}],"start_cmd":"sleep 1000"}`
	r := do(t, tok, "POST", "/v1/templates", recipe)
	tpl := decode[template](t, r, http.StatusAccepted)
	deleteTemplate(t, tpl.ID)
	if tpl.State != "building" || tpl.Kind != "build" || r.header.Get("Template-Cached") != "" {
		t.Fatalf("build answered %+v, Template-Cached %q", tpl, r.header.Get("Template-Cached"))
	}

	resp, err := env.Do(t.Context(), tok, "GET", "/v1/templates/"+tpl.ID+"/logs", "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("logs: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	log, err := io.ReadAll(resp.Body) // returns when the build ends
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hello-from-the-build\nsecond-line\n", "built " + tpl.ID} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the build log lacks %q:\n%s", want, log)
		}
	}
	got := decode[template](t, do(t, tok, "GET", "/v1/templates/"+tpl.ID, ""), http.StatusOK)
	if got.State != "ready" || got.SizeBytes <= 0 {
		t.Fatalf("once its log ended the template is %+v, want ready", got)
	}

	r = do(t, tok, "POST", "/v1/templates", recipe)
	if again := decode[template](t, r, http.StatusOK); again.ID != tpl.ID || r.header.Get("Template-Cached") != "true" {
		t.Errorf("the same recipe again: %+v, Template-Cached %q", again, r.header.Get("Template-Cached"))
	}
	sb := create(t, tok, `{"template":"`+tpl.ID+`"}`)
	out := decode[struct {
		Stdout string `json:"stdout"`
	}](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"cat /etc/built; echo $GREETING; ps | grep -q '[s]leep 1000' && echo started"}`), http.StatusOK)
	if out.Stdout != "built\nhello\nstarted\n" {
		t.Errorf("a sandbox of the built template: %q", out.Stdout)
	}

	// Tags: one more on the build; retried, the same; removed, gone, and
	// removed again, 404.
	for range 2 {
		got := decode[template](t, do(t, tok, "POST", "/v1/templates/built/tags", `{"name":"built","tags":["prod"]}`), http.StatusOK)
		if got.ID != tpl.ID || strings.Join(got.Tags, ",") != "built:latest,built:prod" {
			t.Errorf("tag built:prod: %+v", got)
		}
	}
	if got := decode[template](t, do(t, tok, "GET", "/v1/templates/built:prod", ""), http.StatusOK); got.ID != tpl.ID {
		t.Errorf("GET built:prod = %s, want %s", got.ID, tpl.ID)
	}
	if r := do(t, tok, "DELETE", "/v1/templates/built/tags/prod", ""); r.status != http.StatusNoContent {
		t.Errorf("untag: %s", r)
	}
	wantError(t, do(t, tok, "DELETE", "/v1/templates/built/tags/prod", ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, tok, "GET", "/v1/templates/built:prod", ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, tok, "POST", "/v1/templates/built/tags", `{"name":"built","tags":[".bad"]}`), http.StatusBadRequest, "invalid_argument")
	wantError(t, do(t, token(t, "tpl-other-tagger"), "POST", "/v1/templates/"+tpl.ID+"/tags", `{"name":"mine","tags":["x"]}`), http.StatusNotFound, "not_found")
}
