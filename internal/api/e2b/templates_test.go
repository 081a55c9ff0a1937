package e2b_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tarGz is a gzipped tar of one file.
func tarGz(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte(content))
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

func decodeJSON[T any](t *testing.T, r response, status int) T {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	var v T
	decode(t, r.body, &v)
	return v
}

type buildInfoJSON struct {
	Status     string `json:"status"`
	LogEntries []struct {
		Message string `json:"message"`
	} `json:"logEntries"`
	Reason *struct {
		Message string `json:"message"`
	} `json:"reason"`
}

// TestTemplates_BuildOnTheWire: the SDK's sequence (request, file upload
// by URL without the API key, start, status polled with logsOffset) builds
// a template another owner can neither see nor start; a start again is a
// no-op; an archive naming a path outside is refused before anything is
// built.
func TestTemplates_BuildOnTheWire(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{realClock: true})
	name := "wire-" + strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, h.url+"/templates/"+name, nil)
		req.Header.Set("X-API-KEY", h.admin)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})

	req := decodeJSON[struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Tags       []string `json:"tags"`
	}](t, h.do(t, h.admin, http.MethodPost, "/v3/templates", map[string]any{"name": name + ":v1"}), http.StatusAccepted)
	if req.TemplateID != name || !strings.HasPrefix(req.BuildID, "tpl-") || strings.Join(req.Tags, ",") != "v1" {
		t.Fatalf("request: %+v", req)
	}
	hash := strings.Repeat("ab", 32)
	up := decodeJSON[struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}](t, h.do(t, h.admin, http.MethodGet, "/templates/"+name+"/files/"+hash, nil), http.StatusCreated)
	if up.Present || up.URL == "" {
		t.Fatalf("file upload link: %+v", up)
	}
	put := func(url string, body []byte) int {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := put(up.URL, tarGz(t, "hello.txt", "hello from the context\n")); got != http.StatusOK {
		t.Fatalf("PUT the archive: %d", got)
	}
	if got := put(up.URL, tarGz(t, "hello.txt", "overwritten\n")); got != http.StatusOK {
		t.Errorf("PUT again with the spent token (a retry): %d, want 200, the archive unchanged", got)
	}
	if got := put(up.URL+"x", tarGz(t, "hello.txt", "forged\n")); got != http.StatusForbidden {
		t.Errorf("PUT with a token not handed out: %d, want 403", got)
	}
	if again := decodeJSON[struct {
		Present bool `json:"present"`
	}](t, h.do(t, h.admin, http.MethodGet, "/templates/"+name+"/files/"+hash, nil), http.StatusCreated); !again.Present {
		t.Error("the uploaded files are not present")
	}
	if other := decodeJSON[struct {
		Present bool `json:"present"`
	}](t, h.do(t, h.user, http.MethodGet, "/templates/"+name+"/files/"+hash, nil), http.StatusCreated); other.Present {
		t.Error("another owner sees the files as present")
	}

	start := map[string]any{"steps": []map[string]any{
		{"type": "COPY", "args": []string{"hello.txt", "/app/", "", ""}, "filesHash": hash},
		{"type": "RUN", "args": []string{"for i in 1 2 3; do echo line$i; done; cat /app/hello.txt"}},
	}}
	startPath := "/v2/templates/" + name + "/builds/" + req.BuildID
	if r := h.do(t, h.user, http.MethodPost, startPath, start); r.status != http.StatusNotFound {
		t.Errorf("another owner starts the build: %d %s", r.status, r.body)
	}
	for range 2 {
		if r := h.do(t, h.admin, http.MethodPost, startPath, start); r.status != http.StatusAccepted || len(r.body) != 0 {
			t.Fatalf("start: %d %s", r.status, r.body)
		}
	}
	statusPath := "/templates/" + name + "/builds/" + req.BuildID + "/status"
	if r := h.do(t, h.user, http.MethodGet, statusPath, nil); r.status != http.StatusNotFound {
		t.Errorf("another owner reads the status: %d %s", r.status, r.body)
	}
	var lines []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		info := decodeJSON[buildInfoJSON](t, h.do(t, h.admin, http.MethodGet, statusPath+"?logsOffset="+strconv.Itoa(len(lines)), nil), http.StatusOK)
		for _, e := range info.LogEntries {
			lines = append(lines, e.Message)
		}
		if info.Status == "error" {
			t.Fatalf("the build failed: %+v\n%s", info.Reason, strings.Join(lines, "\n"))
		}
		if info.Status == "ready" && len(info.LogEntries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not end: %s", strings.Join(lines, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := strings.Join(lines, "\n")
	if !strings.Contains(log, "line1\nline2\nline3\nhello from the context") {
		t.Errorf("the log polled by offsets is not the build's output in order:\n%s", log)
	}
	all := decodeJSON[buildInfoJSON](t, h.do(t, h.admin, http.MethodGet, statusPath+"?logsOffset=0", nil), http.StatusOK)
	if len(all.LogEntries) != len(lines) {
		t.Errorf("logsOffset=0 again gives %d entries, the polls %d", len(all.LogEntries), len(lines))
	}

	sb := h.create(t, map[string]any{"templateID": name + ":v1"})
	out := h.exec(t, sb.SandboxID, "cat /app/hello.txt")
	if out != "hello from the context\n" {
		t.Errorf("a sandbox of the template reads %q", out)
	}
	if r := h.do(t, h.user, http.MethodGet, "/templates/aliases/"+name, nil); r.status != http.StatusNotFound {
		t.Errorf("another owner sees the alias: %d %s", r.status, r.body)
	}

	// An archive that names a path outside is refused at the start.
	bad := decodeJSON[struct {
		BuildID string `json:"buildID"`
	}](t, h.do(t, h.admin, http.MethodPost, "/v3/templates", map[string]any{"name": name + ":bad"}), http.StatusAccepted)
	badHash := strings.Repeat("cd", 32)
	link := decodeJSON[struct {
		URL string `json:"url"`
	}](t, h.do(t, h.admin, http.MethodGet, "/templates/"+name+"/files/"+badHash, nil), http.StatusCreated)
	if got := put(link.URL, tarGz(t, "../../etc/cron.d/x", "* * * * * root id\n")); got != http.StatusOK {
		t.Fatalf("PUT: %d", got)
	}
	r := h.do(t, h.admin, http.MethodPost, "/v2/templates/"+name+"/builds/"+bad.BuildID, map[string]any{"steps": []map[string]any{
		{"type": "COPY", "args": []string{".", "/app/"}, "filesHash": badHash},
	}})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "stay inside") {
		t.Errorf("an archive climbing out: %d %s", r.status, r.body)
	}
}
