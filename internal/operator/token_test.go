package operator

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// TestTokenCommand_CreatePrintsTheE2BForm: `sandboxd token create` keeps
// stdout the token alone and tells the e2b_ form on stderr; --json
// carries both.
func TestTokenCommand_CreatePrintsTheE2BForm(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := TokenCommand([]string{"create", "--name", "ci", "--data-dir", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("token create: exit %d, stderr %q", code, stderr.String())
	}
	tok := strings.TrimSpace(stdout.String())
	if _, err := auth.Parse(tok); err != nil || strings.Count(stdout.String(), "\n") != 1 {
		t.Fatalf("stdout %q: want the token alone (%v)", stdout.String(), err)
	}
	if want := "E2B_API_KEY=" + auth.E2BKey(tok); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not say %s", stderr.String(), want)
	}

	stdout.Reset()
	if code := TokenCommand([]string{"create", "--name", "ci2", "--json", "--data-dir", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("token create --json: exit %d", code)
	}
	var out struct {
		Token     string `json:"token"`
		E2BAPIKey string `json:"e2b_api_key"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.E2BAPIKey != auth.E2BKey(out.Token) || out.Token == "" {
		t.Errorf("--json: %s (%v), want token and its e2b_api_key", stdout.Bytes(), err)
	}
}
