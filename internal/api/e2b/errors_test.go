package e2b_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestErrors_EveryE2BPathAnswersInE2BShape: what E2B's API has and the
// facade does not implement answers 501 in E2B's shape with a message
// naming it (never 404, which the SDK reads as "sandbox not found"); a
// sandbox route of an unknown sandbox is 404; a bad key is 401 first.
func TestErrors_EveryE2BPathAnswersInE2BShape(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	id, unknown := c.SandboxID, "sb-00000000deadbeef"
	for _, tc := range []struct {
		method, path string
		key          string
		body         any
		status       int
		mention      string
	}{
		{http.MethodGet, "/templates", h.admin, nil, http.StatusNotImplemented, "templates"},
		{http.MethodDelete, "/templates/snap-1", h.admin, nil, http.StatusNotFound, ""},
		{http.MethodGet, "/templates/t/builds/b/status", h.admin, nil, http.StatusNotFound, "build b not found"},
		{http.MethodPut, "/templates/t/files/" + strings.Repeat("0", 64) + "?token=forged", "", "x", http.StatusForbidden, "not valid"},
		{http.MethodPost, "/v2/templates", h.admin, map[string]any{}, http.StatusNotImplemented, "templates"},
		{http.MethodPost, "/snapshots", h.admin, map[string]any{}, http.StatusNotImplemented, "snapshots"},
		{http.MethodPost, "/sandboxes/" + unknown + "/snapshots", h.admin, map[string]any{}, http.StatusNotFound, ""},
		{http.MethodPost, "/sandboxes/" + unknown + "/fork", h.admin, map[string]any{}, http.StatusNotFound, ""},
		{http.MethodGet, "/v2/sandboxes/" + unknown + "/logs", h.admin, nil, http.StatusNotFound, ""},
		{http.MethodGet, "/v2/sandboxes/" + id + "/logs?direction=sideways", h.admin, nil, http.StatusBadRequest, "direction"},
		{http.MethodGet, "/v2/sandboxes/" + id + "/logs?cursor=253402300800000", h.admin, nil, http.StatusBadRequest, "cursor"},
		{http.MethodGet, "/sandboxes/" + id + "/logs?start=9000000000000000", h.admin, nil, http.StatusBadRequest, "start"},
		{http.MethodGet, "/volumes", h.admin, nil, http.StatusNotImplemented, "volumes"},
		{http.MethodGet, "/teams", h.admin, nil, http.StatusNotImplemented, "teams"},
		{http.MethodGet, "/v3/templates", "", nil, http.StatusUnauthorized, ""},
		{http.MethodPost, "/sandboxes/" + id + "/fork", "e2b_00", nil, http.StatusUnauthorized, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp := h.do(t, tc.key, tc.method, tc.path, tc.body)
			wantError(t, resp, tc.status)
			if !strings.Contains(string(resp.body), tc.mention) {
				t.Errorf("body %s does not mention %q", resp.body, tc.mention)
			}
		})
	}
}

// TestEnvd_UnknownSandboxAnswersE2BsEdgeBody: envd traffic for a sandbox
// that is not there is 502 with E2B's edge body, sandboxId included; on a
// Connect path the code is Connect's "unavailable".
func TestEnvd_UnknownSandboxAnswersE2BsEdgeBody(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const id = "sb-00000000deadbeef"
	for _, tc := range []struct {
		method, path string
		code         any
	}{
		{http.MethodGet, "/health", float64(502)},
		{http.MethodGet, "/files?path=/etc/hostname", float64(502)},
		{http.MethodPost, "/filesystem.Filesystem/Stat", "unavailable"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, h.url+tc.path, strings.NewReader("{}"))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("Content-Type", "application/json")
		resp := doReq(t, req)
		var body struct {
			SandboxID string `json:"sandboxId"`
			Message   string `json:"message"`
			Code      any    `json:"code"`
		}
		if err := json.Unmarshal(resp.body, &body); err != nil || resp.status != http.StatusBadGateway {
			t.Fatalf("%s %s: %d %s (%v), want 502 JSON", tc.method, tc.path, resp.status, resp.body, err)
		}
		if body.SandboxID != id || body.Message != "The sandbox was not found" || body.Code != tc.code {
			t.Errorf("%s %s: body %s, want sandboxId %s, E2B's message and code %v", tc.method, tc.path, resp.body, id, tc.code)
		}
	}
}
