package sandboxd_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

const templateJSON = `{"id":"tpl-0123456789abcdef","owner":"o","name":"py","kind":"build","state":"building",
  "size_bytes":0,"created_at":"2026-12-02T10:00:00Z","updated_at":"2026-12-02T10:00:00Z"}`

func replyTemplate(status int, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, templateJSON)
	}
}

// paths lists rec's requests as "METHOD /path".
func paths(rec *recorder) []string {
	var out []string
	for _, r := range rec.requests() {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

// A build is idempotent (the daemon answers the same recipe with the same
// template), so it is retried with the same body; the cached answer sets
// Cached.
func TestBuildTemplate_RetriedAndCached(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
		replyTemplate(http.StatusOK, "Template-Cached", "true"),
	}}
	c, _ := newClient(t, rec)
	recipe := sandboxd.Recipe{Name: "py", Steps: []sandboxd.Step{
		{Run: "apk add python3"}, {Copy: &sandboxd.CopyStep{Path: "/app/x", Content: []byte("hi")}},
	}}
	tpl, err := c.BuildTemplate(t.Context(), recipe)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.ID != "tpl-0123456789abcdef" || tpl.State != sandboxd.TemplateBuilding || !tpl.Cached {
		t.Errorf("template = %+v, want the cached one", tpl)
	}
	reqs := rec.requests()
	if len(reqs) != 2 || reqs[0].Body != reqs[1].Body {
		t.Fatalf("attempts %+v, want 2 with the same body", reqs)
	}
	want := `{"name":"py","steps":[{"run":"apk add python3"},{"copy":{"path":"/app/x","content":"aGk="}}]}`
	if diff := jsonDiff(t, reqs[0].Body, want); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}

	rec.mu.Lock()
	rec.reqs, rec.replies = nil, []func(http.ResponseWriter, *http.Request){replyTemplate(http.StatusAccepted)}
	rec.mu.Unlock()
	if tpl, err := c.BuildTemplate(t.Context(), recipe); err != nil || tpl.Cached {
		t.Errorf("a started build = %+v, %v; want not cached", tpl, err)
	}
}

// Snapshot and Fork make something new each time: one attempt only.
func TestSnapshotAndFork_NotRetried(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
	}}
	c, _ := newClient(t, rec)
	if _, err := c.Snapshot(t.Context(), "sb-0123456789abcdef", ""); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Errorf("Snapshot: %v, want ErrUnavailable", err)
	}
	if _, err := c.Fork(t.Context(), "sb-0123456789abcdef", 2); !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Errorf("Fork: %v, want ErrUnavailable", err)
	}
	want := []string{"POST /v1/sandboxes/sb-0123456789abcdef/snapshots", "POST /v1/sandboxes/sb-0123456789abcdef/fork"}
	if diff := cmp.Diff(want, paths(rec)); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if diff := jsonDiff(t, rec.requests()[0].Body, `{}`); diff != "" {
		t.Errorf("snapshot body without a name (-want +got):\n%s", diff)
	}
}

func TestFork_Encoding(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"sandboxes":[`+sandboxJSON+`,`+sandboxJSON+`]}`)
		},
	}}
	c, _ := newClient(t, rec)
	got, err := c.Fork(t.Context(), "web", 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]sandboxd.Sandbox{*wantSandbox(), *wantSandbox()}, got); diff != "" {
		t.Errorf("forks (-want +got):\n%s", diff)
	}
	if diff := jsonDiff(t, rec.requests()[0].Body, `{"count":2}`); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

// DeleteTemplate resolves a name first (a retry must not delete a newer
// template of that name) and, like DestroySandbox, takes a not-found
// after an ambiguous failure as its own success.
func TestDeleteTemplate_NameResolvedAndRetriedNotFoundIsSuccess(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyTemplate(http.StatusOK),
		replyError(500, "internal", "lost the answer", true),
		replyError(404, "not_found", "gone", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DeleteTemplate(t.Context(), "py"); err != nil {
		t.Fatalf("DeleteTemplate: %v", err)
	}
	want := []string{"GET /v1/templates/py", "DELETE /v1/templates/tpl-0123456789abcdef", "DELETE /v1/templates/tpl-0123456789abcdef"}
	if diff := cmp.Diff(want, paths(rec)); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestDeleteTemplate_InUseIsConflict(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(409, "conflict", "sandboxes made from it still exist", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DeleteTemplate(t.Context(), "tpl-0123456789abcdef"); !errors.Is(err, sandboxd.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
}

// TemplateLogs is retried until the output starts, then copies it whole.
func TestTemplateLogs(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "step 1: run true\n")
			http.NewResponseController(w).Flush()
			io.WriteString(w, "built tpl-0123456789abcdef\n")
		},
	}}
	c, _ := newClient(t, rec)
	var out strings.Builder
	if err := c.TemplateLogs(t.Context(), "tpl-0123456789abcdef", &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "step 1: run true\nbuilt tpl-0123456789abcdef\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	if reqs := rec.requests(); len(reqs) != 2 || reqs[1].Path != "/v1/templates/tpl-0123456789abcdef/logs" {
		t.Errorf("requests %+v", reqs)
	}
}

func TestCreateSandbox_Template(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(201)}}
	c, _ := newClient(t, rec)
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Template: "py"}); err != nil {
		t.Fatal(err)
	}
	if diff := jsonDiff(t, rec.requests()[0].Body, `{"template":"py"}`); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}
