package daytona_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestUnsupported_RefusedInDaytonasShapeNeverA404: deactivating snapshots,
// fork lineage, images with local files, pause, resize,
// SSH access, signed preview URLs, LSP, computer use and the git
// operations beyond clone and status were 404s
// (the SDK's "not found"); each is a 501 in Daytona's shape whose message
// says what is not supported, after authentication.
func TestUnsupported_RefusedInDaytonasShapeNeverA404(t *testing.T) {
	s, sb := sharedSandbox(t)
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, "/snapshots/my-snapshot/deactivate", "always active"},
		{http.MethodGet, "/sandbox/" + sb.ID + "/forks", "fork lineage"},
		{http.MethodGet, "/sandbox/" + sb.ID + "/parent", "fork lineage"},
		{http.MethodGet, "/object-storage/push-access", "object storage"},
		{http.MethodPost, "/sandbox/" + sb.ID + "/pause", "pausing"},
		{http.MethodPost, "/sandbox/" + sb.ID + "/resize", "resizing"},
		{http.MethodPost, "/sandbox/" + sb.ID + "/ssh-access?expiresInMinutes=60", "SSH"},
		{http.MethodGet, "/sandbox/ssh-access/validate?token=x", "SSH"},
		{http.MethodGet, "/sandbox/" + sb.ID + "/ports/3000/signed-preview-url", "signed preview"},
		{http.MethodPost, "/toolbox/" + sb.ID + "/lsp/start", "language servers"},
		{http.MethodGet, "/toolbox/" + sb.ID + "/lsp/document-symbols?languageId=typescript", "language servers"},
		{http.MethodPost, "/toolbox/" + sb.ID + "/computeruse/start", "computer use"},
		{http.MethodGet, "/toolbox/" + sb.ID + "/computeruse/screenshot", "computer use"},
		{http.MethodPost, "/toolbox/" + sb.ID + "/git/add", "git operation"},
		{http.MethodGet, "/toolbox/" + sb.ID + "/git/branches", "git operation"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			body := wantError(t, s.do(t, s.Admin, tc.method, tc.path, map[string]any{}), http.StatusNotImplemented)
			if !strings.Contains(body.Message, tc.want) {
				t.Errorf("message %q does not mention %q", body.Message, tc.want)
			}
			wantError(t, s.do(t, "", tc.method, tc.path, map[string]any{}), http.StatusUnauthorized)
		})
	}
}

// TestCreate_NetworkListsAndFailedImageBuildsAre400s: what create cannot
// do about the network, and a declarative image whose build fails (pip
// has no network to install from), is a 400 naming it, leaving nothing.
func TestCreate_NetworkListsAndFailedImageBuildsAre400s(t *testing.T) {
	s := need(t)
	for want, body := range map[string]map[string]any{
		"networkAllowList": {"networkAllowList": "10.0.0.0/8"},
		"domainAllowList":  {"domainAllowList": "example.com"},
		"image":            {"buildInfo": map[string]any{"dockerfileContent": "FROM sandboxd/base:bookworm\nRUN pip install requests\n"}},
	} {
		t.Run(want, func(t *testing.T) {
			before := footprint(t, s)
			if got := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", body), http.StatusBadRequest); !strings.Contains(got.Message, want) {
				t.Errorf("message %q does not name %s", got.Message, want)
			}
			if after := footprint(t, s); after != before {
				t.Errorf("before %s, after %s", before, after)
			}
		})
	}
}
