package daytona_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/service"
)

func TestCreate_DTOHasEveryRequiredField(t *testing.T) {
	s := need(t)
	resp := s.do(t, s.Admin, http.MethodPost, "/sandbox", map[string]any{
		"env":    map[string]string{"GREETING": "hi"},
		"labels": map[string]string{"code-toolbox-language": "python", "team": "a"},
		"cpu":    2, "memory": 1, "disk": 5,
	})
	if resp.status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var raw map[string]any
	decode(t, resp.body, &raw)
	for _, field := range []string{"id", "organizationId", "name", "user", "env", "labels", "public", "networkBlockAll", "target", "cpu", "gpu", "memory", "disk", "toolboxProxyUrl", "state"} {
		if _, ok := raw[field]; !ok {
			t.Errorf("DTO lacks %q: %s", field, resp.body)
		}
	}
	var sb sandbox
	decode(t, resp.body, &sb)
	t.Cleanup(func() { s.Service.Destroy(t.Context(), service.Caller{Admin: true}, sb.ID) })
	if sb.State != "started" || sb.Name != sb.ID || sb.User != "daytona" {
		t.Errorf("state %q, name %q (id %q), user %q: want started, the id, daytona", sb.State, sb.Name, sb.ID, sb.User)
	}
	if *sb.CPU != 2 || *sb.Memory != 1 || *sb.Disk != 5 || *sb.GPU != 0 {
		t.Errorf("cpu %v memory %v disk %v gpu %v: want 2, 1, 5, 0", *sb.CPU, *sb.Memory, *sb.Disk, *sb.GPU)
	}
	// The test daemon allows no outbound network, so the sandbox is
	// reported as blocked whatever Daytona's default.
	if !*sb.NetworkBlockAll || *sb.Public {
		t.Errorf("networkBlockAll %v public %v: want true (no network on this daemon), false", *sb.NetworkBlockAll, *sb.Public)
	}
	if want := s.URL + daytona.Prefix + "/toolbox"; sb.ToolboxProxyURL != want {
		t.Errorf("toolboxProxyUrl %q, want %q", sb.ToolboxProxyURL, want)
	}
	if diff := cmp.Diff(map[string]string{"code-toolbox-language": "python", "team": "a"}, sb.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if sb.Env["GREETING"] != "hi" {
		t.Errorf("env %v", sb.Env)
	}

	// Get by id and by name (the id is the name), and toolbox-proxy-url.
	got := s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID, nil)
	var again sandbox
	decode(t, got.body, &again)
	if again.ID != sb.ID || again.State != "started" {
		t.Errorf("get: %s", got.body)
	}
	var u struct{ URL string }
	decode(t, s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID+"/toolbox-proxy-url", nil).body, &u)
	if u.URL != sb.ToolboxProxyURL {
		t.Errorf("toolbox-proxy-url %q, want %q", u.URL, sb.ToolboxProxyURL)
	}
}

func TestErrors_Shapes(t *testing.T) {
	s := need(t)
	for _, tc := range []struct {
		name, token, method, path string
		body                      any
		status                    int
	}{
		{"unknown sandbox", s.Admin, http.MethodGet, "/sandbox/no-such-sandbox", nil, http.StatusNotFound},
		{"no token", "", http.MethodGet, "/sandbox", nil, http.StatusUnauthorized},
		{"bad token", "not-a-token", http.MethodGet, "/sandbox/x", nil, http.StatusUnauthorized},
		{"gpu", s.Admin, http.MethodPost, "/sandbox", map[string]any{"gpu": 1}, http.StatusBadRequest},
		{"bad name", s.Admin, http.MethodPost, "/sandbox", map[string]any{"name": "Not A Label"}, http.StatusBadRequest},
		{"bad json", s.Admin, http.MethodPost, "/sandbox", strings.NewReader("{"), http.StatusBadRequest},
		{"toolbox of unknown sandbox", s.Admin, http.MethodPost, "/toolbox/sb-0000000000000000/process/execute", map[string]any{"command": "true"}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp response
			if r, ok := tc.body.(*strings.Reader); ok {
				resp = s.do(t, tc.token, tc.method, tc.path, r, "application/json")
			} else {
				resp = s.do(t, tc.token, tc.method, tc.path, tc.body)
			}
			wantError(t, resp, tc.status)
		})
	}
}

func TestCreate_DuplicateNameIsConflict(t *testing.T) {
	s := need(t)
	name := "dt-dup-" + time.Now().Format("150405")
	first := s.create(t, s.Admin, map[string]any{"name": name})
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/sandbox", map[string]any{"name": name}), http.StatusConflict)
	var byName sandbox
	decode(t, s.do(t, s.Admin, http.MethodGet, "/sandbox/"+name, nil).body, &byName)
	if byName.ID != first.ID {
		t.Errorf("get %s: id %q, want %q", name, byName.ID, first.ID)
	}
}

func TestCreate_OtherOwnerSeesNotFound(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	wantError(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.User, http.MethodPost, "/toolbox/"+sb.ID+"/process/execute", map[string]any{"command": "true"}), http.StatusNotFound)
}

func TestList_LabelFilterAndPaging(t *testing.T) {
	s := need(t)
	group := "g" + time.Now().Format("150405.000")
	a := s.create(t, s.User, map[string]any{"labels": map[string]string{"group": group, "member": "a"}})
	b := s.create(t, s.User, map[string]any{"labels": map[string]string{"group": group, "member": "b"}})
	s.create(t, s.User, map[string]any{"labels": map[string]string{"group": group + "-other"}})

	list := func(labels map[string]string, limit, cursor string) (ids []string, next *string) {
		t.Helper()
		raw, _ := json.Marshal(labels)
		q := url.Values{"labels": {string(raw)}, "limit": {limit}, "cursor": {cursor}}
		resp := s.do(t, s.User, http.MethodGet, "/sandbox?"+q.Encode(), nil)
		if resp.status != http.StatusOK {
			t.Fatalf("list: %d %s", resp.status, resp.body)
		}
		var page struct {
			Items      []map[string]any `json:"items"`
			NextCursor *string          `json:"nextCursor"`
		}
		decode(t, resp.body, &page)
		for _, it := range page.Items {
			if _, hasEnv := it["env"]; hasEnv {
				t.Errorf("list item has env: %v", it)
			}
			if it["toolboxProxyUrl"] == "" || it["state"] != "started" {
				t.Errorf("list item %v", it)
			}
			ids = append(ids, it["id"].(string))
		}
		return ids, page.NextCursor
	}

	ids, next := list(map[string]string{"group": group}, "100", "")
	if want := []string{a.ID, b.ID}; !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))) || next != nil {
		t.Errorf("group filter: %v next %v, want %v and no cursor", ids, next, want)
	}
	if ids, _ := list(map[string]string{"group": group, "member": "a"}, "100", ""); !slices.Equal(ids, []string{a.ID}) {
		t.Errorf("two labels: %v, want [%s]", ids, a.ID)
	}
	var paged []string
	cursor := ""
	for range 5 {
		ids, next := list(map[string]string{"group": group}, "1", cursor)
		paged = append(paged, ids...)
		if next == nil {
			break
		}
		cursor = *next
	}
	if !slices.Equal(slices.Sorted(slices.Values(paged)), slices.Sorted(slices.Values([]string{a.ID, b.ID}))) {
		t.Errorf("paged: %v, want %s and %s", paged, a.ID, b.ID)
	}
}

func TestStopStartDelete_FinalStates(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	state := func(resp response) string {
		t.Helper()
		var got sandbox
		decode(t, resp.body, &got)
		return got.State
	}
	if got := state(s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/stop?force=false", nil)); got != "stopped" {
		t.Errorf("stop answered %q", got)
	}
	if got := state(s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID, nil)); got != "stopped" {
		t.Errorf("after stop: %q", got)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/execute", map[string]any{"command": "true"}), http.StatusConflict)
	if got := state(s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/start", nil)); got != "started" {
		t.Errorf("start answered %q", got)
	}
	del := s.do(t, s.Admin, http.MethodDelete, "/sandbox/"+sb.ID, nil)
	if del.status != http.StatusOK || state(del) != "destroyed" {
		t.Errorf("delete: %d %s", del.status, del.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.Admin, http.MethodDelete, "/sandbox/"+sb.ID, nil), http.StatusNotFound)
}

func TestLabelsAndIntervals(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, map[string]any{"labels": map[string]string{"a": "1"}, "autoStopInterval": 30})
	if sb.AutoStop != 30 || sb.AutoDelete != -1 {
		t.Errorf("intervals %d/%d, want 30/-1", sb.AutoStop, sb.AutoDelete)
	}
	got, err := s.Service.Get(t.Context(), service.Caller{Admin: true}, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The rule is the service's, on the row: no timeout stands in for it.
	if got.Lifecycle.AutoStop != 30*time.Minute || !got.ExpiresAt.IsZero() {
		t.Errorf("service: auto-stop %v, expiry %v; want 30m and none", got.Lifecycle.AutoStop, got.ExpiresAt)
	}

	resp := s.do(t, s.Admin, http.MethodPut, "/sandbox/"+sb.ID+"/labels", map[string]any{"labels": map[string]string{"b": "2"}})
	var updated sandbox
	decode(t, resp.body, &updated)
	if diff := cmp.Diff(map[string]string{"b": "2"}, updated.Labels); diff != "" || updated.AutoStop != 30 {
		t.Errorf("labels (-want +got):\n%s auto-stop %d", diff, updated.AutoStop)
	}

	// Auto-stop off. Auto-delete 0: destroyed at the stop.
	decode(t, s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/autostop/0", nil).body, &updated)
	if got, _ := s.Service.Get(t.Context(), service.Caller{Admin: true}, sb.ID); got.Lifecycle.AutoStop != 0 || updated.AutoStop != 0 {
		t.Errorf("auto-stop 0: service %v, interval %d", got.Lifecycle.AutoStop, updated.AutoStop)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/autodelete/-2", nil), http.StatusBadRequest)
	s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/autodelete/0", nil)
	s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/stop", nil)
	wantError(t, s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID, nil), http.StatusNotFound)
}

func TestPreviewURL(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	resp := s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID+"/ports/8080/preview-url", nil)
	var p struct{ URL, Token string }
	decode(t, resp.body, &p)
	if !strings.Contains(p.URL, "8080-"+sb.ID) || p.Token == "" || p.Token == s.Admin {
		t.Errorf("preview: %s (want a scoped token, never the API token)", resp.body)
	}
	// The token opens this port of this sandbox through the ingress (past
	// auth: nothing listens, so 502), and nothing else (401).
	preview := func(port int, token string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/", nil)
		req.Host = strconv.Itoa(port) + "-" + sb.ID + ".localhost"
		req.Header.Set("X-Daytona-Preview-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := preview(8080, p.Token); got == http.StatusUnauthorized || got == http.StatusNotFound {
		t.Errorf("preview with its token: %d, want through to the sandbox", got)
	}
	wrong := p.Token[:len(p.Token)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(p.Token, "0")]
	if got := preview(8080, wrong); got != http.StatusUnauthorized {
		t.Errorf("preview with a wrong token: %d, want 401", got)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, "/sandbox/"+sb.ID+"/ports/0/preview-url", nil), http.StatusBadRequest)
}
