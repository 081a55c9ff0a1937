package e2b_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestCreate_MCPAnswersAsTheSDKExpects: a create with mcp servers (the SDK
// then names template mcp-gateway) makes a sandbox; the SDK's next step,
// `mcp-gateway --config …` as root, exits non-zero saying clearly that
// there is no gateway, which the SDK reports ("Failed to start MCP
// gateway: …") after killing the sandbox. An mcp that is no object is 400.
func TestCreate_MCPAnswersAsTheSDKExpects(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	needsBaseImageOfThisCheckout(t)
	c := h.create(t, map[string]any{"templateID": "mcp-gateway", "mcp": map[string]any{"exa": map[string]any{"apiKey": "k"}}})
	if c.TemplateID != "mcp-gateway" {
		t.Errorf("templateID %q, want mcp-gateway", c.TemplateID)
	}
	res, err := h.svc.Exec(t.Context(), service.Caller{Admin: true}, c.SandboxID, service.ExecRequest{
		Command: `mcp-gateway --config '{"exa":{"apiKey":"k"}}'`, User: "root",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "MCP gateway is not available") {
		t.Errorf("mcp-gateway: exit %d, stderr %q; want a failure saying there is no gateway", res.ExitCode, res.Stderr)
	}
	wantError(t, h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base", "mcp": "exa"}), http.StatusBadRequest)
}
