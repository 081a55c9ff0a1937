package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// TestToken_CreatePrintsTheE2BForm: token create keeps stdout the token
// alone (scripts capture it) and tells people the e2b_ form on stderr;
// --json carries both.
func TestToken_CreatePrintsTheE2BForm(t *testing.T) {
	secret, _, _ := auth.Generate(auth.RoleUser, "ci")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/tokens" {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, 201, map[string]any{"id": "0000abcd", "name": "ci", "role": "user", "owner": "ci", "token": secret})
	}))
	t.Cleanup(srv.Close)
	want := auth.E2BKey(secret)

	got := sbx(t, srv, "", "token", "create", "--name", "ci")
	if got.code != exitOK || got.stdout != secret+"\n" || !strings.Contains(got.stderr, "E2B_API_KEY="+want) {
		t.Errorf("token create: exit %d, stdout %q (want the token alone), stderr %q (want E2B_API_KEY=%s)", got.code, got.stdout, got.stderr, want)
	}
	got = sbx(t, srv, "", "--json", "token", "create", "--name", "ci")
	var out struct {
		Token     string `json:"token"`
		E2BAPIKey string `json:"e2b_api_key"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &out); err != nil || out.Token != secret || out.E2BAPIKey != want {
		t.Errorf("token create --json: %q (%v), want token and e2b_api_key", got.stdout, err)
	}
}

// TestToken_E2BKey: token e2b-key prints the e2b_ form of a given token or
// of the one sbx would use, which the daemon maps back to the same token.
func TestToken_E2BKey(t *testing.T) {
	secret, _, _ := auth.Generate(auth.RoleAdmin, "admin")
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		code int
	}{
		"argument":  {map[string]string{}, []string{secret}, exitOK},
		"SBX_TOKEN": {map[string]string{"SBX_TOKEN": secret}, nil, exitOK},
		"no token":  {map[string]string{}, nil, exitUsage},
		"not ours":  {map[string]string{}, []string{"e2b_00"}, exitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			got := sbxEnv(t, tc.env, t.TempDir(), "", append([]string{"token", "e2b-key"}, tc.args...)...)
			if got.code != tc.code {
				t.Fatalf("exit %d (stderr %q), want %d", got.code, got.stderr, tc.code)
			}
			if tc.code != exitOK {
				return
			}
			key := strings.TrimSpace(got.stdout)
			if back, err := auth.FromE2BKey(key); err != nil || back != secret || !strings.HasPrefix(key, "e2b_") {
				t.Errorf("e2b-key printed %q, which maps back to %q, %v", key, back, err)
			}
		})
	}
}
