package e2b_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

func jsonBody(t *testing.T, v any) io.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

func doReq(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestErrors_Shapes(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, tc := range []struct {
		name         string
		key          string
		method, path string
		body         any
		status       int
	}{
		{"no API key", "", http.MethodGet, "/v2/sandboxes", nil, http.StatusUnauthorized},
		{"bad API key", "e2b_00ff", http.MethodGet, "/v2/sandboxes", nil, http.StatusUnauthorized},
		{"kill unknown id", h.admin, http.MethodDelete, "/sandboxes/sb-00000000deadbeef", nil, http.StatusNotFound},
		{"kill unknown name", h.admin, http.MethodDelete, "/sandboxes/no-such-sandbox", nil, http.StatusNotFound},
		{"get unknown", h.admin, http.MethodGet, "/sandboxes/sb-00000000deadbeef", nil, http.StatusNotFound},
		{"connect unknown", h.admin, http.MethodPost, "/v2/sandboxes/sb-00000000deadbeef/connect", map[string]any{}, http.StatusNotFound},
		{"unknown template", h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "sandboxd/no-such-image:1"}, http.StatusNotFound},
		{"bad metadata key", h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"bad key!": "x"}}, http.StatusBadRequest},
		{"bad JSON", h.admin, http.MethodPost, "/v2/sandboxes", "{", http.StatusBadRequest},
		{"unknown route", h.admin, http.MethodGet, "/sandboxes/sb-00000000deadbeef/nope", nil, http.StatusNotFound},
		{"negative timeout", h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"timeout": -1}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.do(t, tc.key, tc.method, tc.path, tc.body), tc.status)
		})
	}
}

func TestLifecycle_GetPauseConnectKill(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "timeout": 120, "metadata": map[string]string{"team": "compat"}})
	if c.TemplateID != "base" || c.EnvdVersion != "0.6.4" || c.EnvdAccessToken == "" || c.Domain == nil || *c.Domain != "e2b.test" {
		t.Errorf("create answered %+v", c)
	}

	var info struct {
		SandboxID       string            `json:"sandboxID"`
		State           string            `json:"state"`
		Metadata        map[string]string `json:"metadata"`
		StartedAt       time.Time         `json:"startedAt"`
		EndAt           time.Time         `json:"endAt"`
		EnvdAccessToken string            `json:"envdAccessToken"`
	}
	getInfo := func() {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("get: %d %s", resp.status, resp.body)
		}
		decode(t, resp.body, &info)
	}
	getInfo()
	if info.State != "running" || info.Metadata["team"] != "compat" || info.EnvdAccessToken != c.EnvdAccessToken {
		t.Errorf("getInfo: %+v", info)
	}
	if d := info.EndAt.Sub(h.clock.Now()); d < 110*time.Second || d > 120*time.Second {
		t.Errorf("endAt is %v away, want about 120 s", d)
	}

	// setTimeout moves the end.
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/timeout", map[string]any{"timeout": 600}); resp.status != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", resp.status, resp.body)
	}
	getInfo()
	if d := info.EndAt.Sub(h.clock.Now()); d < 590*time.Second || d > 600*time.Second {
		t.Errorf("after setTimeout endAt is %v away, want about 600 s", d)
	}

	// connect to a running sandbox: 200.
	if resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{}); resp.status != http.StatusOK {
		t.Fatalf("connect running: %d %s", resp.status, resp.body)
	}
	// pause, then pause again: 409 with body code 409.
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", map[string]any{}); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	getInfo()
	if info.State != "paused" {
		t.Errorf("after pause, state %q", info.State)
	}
	wantError(t, h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", nil), http.StatusConflict)
	// connect resumes: 201, running again, with a timeout.
	resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": 60})
	if resp.status != http.StatusCreated {
		t.Fatalf("connect paused: %d %s", resp.status, resp.body)
	}
	getInfo()
	if info.State != "running" {
		t.Errorf("after connect, state %q", info.State)
	}
	if d := info.EndAt.Sub(h.clock.Now()); d < 50*time.Second || d > 60*time.Second {
		t.Errorf("after connect endAt is %v away, want about 60 s", d)
	}

	// kill: 204, then 404 with body code 404.
	if resp := h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+c.SandboxID, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	wantError(t, h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+c.SandboxID, nil), http.StatusNotFound)
}

func TestLifecycle_UserSeesOnlyItsOwn(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"}) // owned by admin
	wantError(t, h.do(t, h.user, http.MethodGet, "/sandboxes/"+c.SandboxID, nil), http.StatusNotFound)
	wantError(t, h.do(t, h.user, http.MethodDelete, "/sandboxes/"+c.SandboxID, nil), http.StatusNotFound)
	var listed []struct{ SandboxID string }
	decode(t, h.do(t, h.user, http.MethodGet, "/v2/sandboxes", nil).body, &listed)
	if len(listed) != 0 {
		t.Errorf("a user lists another owner's sandboxes: %v", listed)
	}
}

func TestList_MetadataFilterStatesAndPaging(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	odd := "a&b=c d/é"
	a := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"run": "r1", "group": "a"}})
	b := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"run": "r1", "group": "b"}})
	o := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"run": "r1", "group": odd}})
	h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"run": "r2"}})

	// The JS SDK's encoding: each key and value encoded, joined as a query,
	// then encoded again as the parameter value.
	metadata := func(kv map[string]string) string {
		v := url.Values{}
		for k, val := range kv {
			v.Set(url.PathEscape(k), url.PathEscape(val))
		}
		return url.QueryEscape(v.Encode())
	}
	type item struct {
		SandboxID string            `json:"sandboxID"`
		State     string            `json:"state"`
		Metadata  map[string]string `json:"metadata"`
	}
	list := func(query string) ([]item, string) {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/v2/sandboxes?"+query, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, resp.status, resp.body)
		}
		var items []item
		decode(t, resp.body, &items)
		return items, resp.header.Get("X-Next-Token")
	}
	ids := func(items []item) []string {
		var out []string
		for _, it := range items {
			out = append(out, it.SandboxID)
		}
		return out
	}

	if got, _ := list("metadata=" + metadata(map[string]string{"run": "r1", "group": "a"})); len(got) != 1 || got[0].SandboxID != a.SandboxID {
		t.Errorf("group a: %v, want [%s]", ids(got), a.SandboxID)
	}
	if got, _ := list("metadata=" + metadata(map[string]string{"group": odd})); len(got) != 1 || got[0].SandboxID != o.SandboxID {
		t.Errorf("odd group: %v, want [%s]", ids(got), o.SandboxID)
	}

	page1, next := list("limit=2&metadata=" + metadata(map[string]string{"run": "r1"}))
	if len(page1) != 2 || next == "" {
		t.Fatalf("page 1: %v, next %q", ids(page1), next)
	}
	page2, next2 := list("limit=2&nextToken=" + url.QueryEscape(next) + "&metadata=" + metadata(map[string]string{"run": "r1"}))
	if len(page2) != 1 || next2 != "" {
		t.Fatalf("page 2: %v, next %q", ids(page2), next2)
	}
	seen := map[string]bool{}
	for _, id := range append(ids(page1), ids(page2)...) {
		seen[id] = true
	}
	for _, id := range []string{a.SandboxID, b.SandboxID, o.SandboxID} {
		if !seen[id] {
			t.Errorf("%s missing from the pages", id)
		}
	}

	// State filter: pause b; it lists as paused, not as running.
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+b.SandboxID+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	if got, _ := list("state=paused&metadata=" + metadata(map[string]string{"run": "r1"})); len(got) != 1 || got[0].SandboxID != b.SandboxID || got[0].State != "paused" {
		t.Errorf("paused: %+v", got)
	}
	if got, _ := list("state=running,paused&metadata=" + metadata(map[string]string{"run": "r1"})); len(got) != 3 {
		t.Errorf("running,paused: %v", ids(got))
	}
	if got, _ := list("state=running&metadata=" + metadata(map[string]string{"run": "r1"})); len(got) != 2 {
		t.Errorf("running: %v", ids(got))
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID+"/metrics", nil)
	if resp.status != http.StatusOK {
		t.Fatalf("metrics: %d %s", resp.status, resp.body)
	}
	var ms []map[string]any
	decode(t, resp.body, &ms)
	if len(ms) != 1 {
		t.Fatalf("metrics: %s", resp.body)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := ms[0][k]; !ok {
			t.Errorf("metric has no %s: %s", k, resp.body)
		}
	}
	if used, _ := ms[0]["memUsed"].(float64); used <= 0 {
		t.Errorf("memUsed %v, want real usage", ms[0]["memUsed"])
	}
	used, _ := ms[0]["diskUsed"].(float64)
	total, _ := ms[0]["diskTotal"].(float64)
	if used <= 0 || total < used {
		t.Errorf("diskUsed %v, diskTotal %v: want real usage within a total", ms[0]["diskUsed"], ms[0]["diskTotal"])
	}
}

// TestMetrics_StartEndWindow: the sample (taken now) is reported only when
// [start, end] holds now; start after end is 400; the batch route keys
// samples by id and leaves unknown ids out.
func TestMetrics_StartEndWindow(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	now := time.Now().Unix()
	count := func(query string) int {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID+"/metrics?"+query, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("metrics?%s: %d %s", query, resp.status, resp.body)
		}
		var ms []map[string]any
		decode(t, resp.body, &ms)
		return len(ms)
	}
	q := func(start, end int64) string { return fmt.Sprintf("start=%d&end=%d", start, end) }
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"", 1},
		{q(now-60, now+60), 1},
		{fmt.Sprintf("start=%d", now-60), 1},
		{fmt.Sprintf("end=%d", now+60), 1},
		{q(now-3600, now-1800), 0}, // all in the past
		{q(now+1800, now+3600), 0}, // all in the future
		{fmt.Sprintf("start=%d", now+1800), 0},
	} {
		if got := count(tc.query); got != tc.want {
			t.Errorf("metrics?%s: %d samples, want %d", tc.query, got, tc.want)
		}
	}
	wantError(t, h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID+"/metrics?"+q(now, now-10), nil), http.StatusBadRequest)
	wantError(t, h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID+"/metrics?start=yesterday", nil), http.StatusBadRequest)

	resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/metrics?sandbox_ids="+c.SandboxID+",sb-00000000deadbeef", nil)
	var batch struct {
		Sandboxes map[string]struct {
			DiskTotal uint64 `json:"diskTotal"`
		} `json:"sandboxes"`
	}
	decode(t, resp.body, &batch)
	if resp.status != http.StatusOK || len(batch.Sandboxes) != 1 || batch.Sandboxes[c.SandboxID].DiskTotal == 0 {
		t.Errorf("batch metrics: %d %s, want one sample with a disk", resp.status, resp.body)
	}
}

// TestList_OrderTimeTemplateAndPagingAcrossStates: GET /v2/sandboxes lists
// newest first unless order=asc, honours template, startedAfter and
// startedBefore, and pages one sandbox at a time across running and paused
// sandboxes, including one paused between pages, with x-next-token absent
// on the last page.
func TestList_OrderTimeTemplateAndPagingAcrossStates(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	meta := func(i string) map[string]string { return map[string]string{"run": "order", "i": i} }
	a := h.create(t, map[string]any{"templateID": "base", "metadata": meta("a")})
	h.clock.Advance(time.Second)
	b := h.create(t, map[string]any{"templateID": "base", "metadata": meta("b")})
	h.clock.Advance(time.Second)
	c := h.create(t, map[string]any{"templateID": "sandboxd/base:bookworm", "metadata": meta("c")})

	run := "metadata=" + url.QueryEscape("run=order")
	type item struct {
		SandboxID string    `json:"sandboxID"`
		State     string    `json:"state"`
		StartedAt time.Time `json:"startedAt"`
	}
	list := func(query string) ([]string, []item, string) {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/v2/sandboxes?"+run+"&"+query, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, resp.status, resp.body)
		}
		var items []item
		decode(t, resp.body, &items)
		var ids []string
		for _, it := range items {
			ids = append(ids, it.SandboxID)
		}
		return ids, items, resp.header.Get("X-Next-Token")
	}
	_, all, _ := list("order=asc")
	if len(all) != 3 {
		t.Fatalf("listed %v, want three", all)
	}
	bStart := all[1].StartedAt.Format(time.RFC3339Nano)
	A, B, C := a.SandboxID, b.SandboxID, c.SandboxID
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{C, B, A}},
		{"order=desc", []string{C, B, A}},
		{"order=asc", []string{A, B, C}},
		{"template=base", []string{B, A}},
		{"template=" + url.QueryEscape("sandboxd/base:bookworm"), []string{C}},
		{"template=code-interpreter-v1", nil},
		{"startedAfter=" + url.QueryEscape(bStart), []string{C, B}},
		{"startedBefore=" + url.QueryEscape(bStart), []string{B, A}},
		{"startedAfter=" + url.QueryEscape(bStart) + "&startedBefore=" + url.QueryEscape(bStart), []string{B}},
	} {
		if got, _, _ := list(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("list %q = %v, want %v", tc.query, got, tc.want)
		}
	}
	wantError(t, h.do(t, h.admin, http.MethodGet, "/v2/sandboxes?order=sideways", nil), http.StatusBadRequest)
	wantError(t, h.do(t, h.admin, http.MethodGet, "/v2/sandboxes?startedAfter=yesterday", nil), http.StatusBadRequest)

	// Pages of one across states: b is paused before, a between pages.
	pause := func(id string) {
		t.Helper()
		if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+id+"/pause", nil); resp.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", resp.status, resp.body)
		}
	}
	pause(B)
	var got []string
	var states []string
	token := ""
	for page := 0; page < 5; page++ {
		q := "limit=1&state=running,paused"
		if token != "" {
			q += "&nextToken=" + url.QueryEscape(token)
		}
		ids, items, next := list(q)
		if len(ids) != 1 {
			t.Fatalf("page %d: %v, want one sandbox", page, ids)
		}
		got = append(got, ids...)
		states = append(states, items[0].State)
		if page == 0 {
			pause(A)
		}
		if next == "" {
			break
		}
		token = next
	}
	if want := []string{C, B, A}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	if want := []string{"running", "paused", "paused"}; !slices.Equal(states, want) {
		t.Errorf("page states = %v, want %v", states, want)
	}
}

// TestConnect_RunningSandboxOnlyExtends: connect with a timeout on a
// running sandbox moves its end later, never earlier (the SDK sends a
// timeout on every connect); on a paused sandbox it sets it.
func TestConnect_RunningSandboxOnlyExtends(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "timeout": 300})
	endIn := func() time.Duration {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID, nil)
		var info struct {
			EndAt time.Time `json:"endAt"`
		}
		decode(t, resp.body, &info)
		return info.EndAt.Sub(h.clock.Now())
	}
	connect := func(timeout int, want int) {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": timeout})
		if resp.status != want {
			t.Fatalf("connect %d: %d %s, want %d", timeout, resp.status, resp.body, want)
		}
	}
	connect(10, http.StatusOK)
	if d := endIn(); d < 290*time.Second || d > 300*time.Second {
		t.Errorf("after connect with 10 s, the end is %v away, want the 300 s it had", d)
	}
	connect(900, http.StatusOK)
	if d := endIn(); d < 890*time.Second || d > 900*time.Second {
		t.Errorf("after connect with 900 s, the end is %v away, want 900 s", d)
	}
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	connect(10, http.StatusCreated)
	if d := endIn(); d < 0 || d > 10*time.Second {
		t.Errorf("after resume with 10 s, the end is %v away, want 10 s", d)
	}
}

// TestLifecycle_AutoPauseOnTimeout: a sandbox created with autoPause is
// paused, not killed, when its timeout passes (lifecycle.onTimeout
// "pause"), its processes frozen; connect resumes it with a new timeout.
// One without autoPause is killed as before.
func TestLifecycle_AutoPauseOnTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	auto := h.create(t, map[string]any{"templateID": "base", "timeout": 60, "autoPause": true})
	plain := h.create(t, map[string]any{"templateID": "base", "timeout": 60})
	var info struct {
		State     string `json:"state"`
		Lifecycle struct {
			OnTimeout string `json:"onTimeout"`
		} `json:"lifecycle"`
	}
	resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+auto.SandboxID, nil)
	decode(t, resp.body, &info)
	if info.Lifecycle.OnTimeout != "pause" {
		t.Errorf("lifecycle.onTimeout = %q, want pause", info.Lifecycle.OnTimeout)
	}
	h.clock.Advance(2 * time.Minute)
	if _, err := h.svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	resp = h.do(t, h.admin, http.MethodGet, "/sandboxes/"+auto.SandboxID, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("the autoPause sandbox after its timeout: %d %s", resp.status, resp.body)
	}
	decode(t, resp.body, &info)
	if info.State != "paused" {
		t.Errorf("the autoPause sandbox after its timeout is %q, want paused", info.State)
	}
	if st, err := h.rt.Inspect(ctx, auto.SandboxID); err != nil || !st.Paused {
		t.Errorf("its container: %+v, %v; want frozen", st, err)
	}
	wantError(t, h.do(t, h.admin, http.MethodGet, "/sandboxes/"+plain.SandboxID, nil), http.StatusNotFound)
	// Still paused on the next tick: its timeout was cleared.
	h.clock.Advance(time.Hour)
	if _, err := h.svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+auto.SandboxID+"/connect", map[string]any{"timeout": 60}); resp.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", resp.status, resp.body)
	}
	if st, err := h.rt.Inspect(ctx, auto.SandboxID); err != nil || st.Paused || st.State != "running" {
		t.Errorf("after connect its container is %+v, %v; want running", st, err)
	}
	if resp := h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+auto.SandboxID, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
}

// TestPause_KeepMemory: pause's memory field (the SDK's keepMemory):
// false stops the sandbox, keeping its file system (E2B still reads it
// paused, and connect starts it afresh); true hibernates it, which under
// a runtime without checkpoints (the Docker runtime) stops it too.
func TestPause_KeepMemory(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, memory := range []bool{false, true} {
		c := h.create(t, map[string]any{"templateID": "base", "timeout": 120})
		if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", map[string]any{"memory": memory}); resp.status != http.StatusNoContent {
			t.Fatalf("pause memory=%v: %d %s", memory, resp.status, resp.body)
		}
		sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, c.SandboxID)
		if err != nil || sb.State != service.StateStopped {
			t.Errorf("pause memory=%v: the sandbox is %s (%v), want stopped", memory, sb.State, err)
		}
		var info struct {
			State string `json:"state"`
		}
		resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+c.SandboxID, nil)
		decode(t, resp.body, &info)
		if info.State != "paused" {
			t.Errorf("pause memory=%v: E2B state %q, want paused", memory, info.State)
		}
		wantError(t, h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", map[string]any{"memory": memory}), http.StatusConflict)
		if resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+c.SandboxID+"/connect", map[string]any{"timeout": 60}); resp.status != http.StatusCreated {
			t.Fatalf("connect after pause memory=%v: %d %s", memory, resp.status, resp.body)
		}
		if resp := h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+c.SandboxID, nil); resp.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", resp.status, resp.body)
		}
	}
}
