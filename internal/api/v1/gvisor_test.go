package v1_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// requireGVisor skips t when this daemon offers no gVisor, outside CI (make
// setup registers runsc with the engine), and fails it in CI.
func requireGVisor(t *testing.T, tok string) {
	t.Helper()
	r := do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"runtime":"gvisor","memory_mb":64}`)
	if r.status != http.StatusBadRequest {
		t.Fatalf("probe: %s, want 400", r)
	}
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	if e.Error.Message == "runtime: gvisor is not available on this daemon (the engine has no runsc; scripts/setup-gvisor.sh registers it)" {
		if testenv.CI() {
			t.Fatal("gVisor unavailable and CI is set: make setup registers runsc")
		}
		t.Skip("skipping: " + e.Error.Message)
	}
}

// A sandbox created with runtime gvisor runs its commands under gVisor's
// kernel and says so on reads; what gVisor cannot do here is refused.
func TestCreate_GVisor(t *testing.T) {
	t.Parallel()
	needEnv(t)
	tok := token(t, "gvisor-user")
	requireGVisor(t, tok)

	for _, tc := range []struct{ name, body, field string }{
		{"too little memory", `{` + busybox + `,"runtime":"gvisor","memory_mb":128}`, "memory_mb"},
	} {
		r := do(t, tok, "POST", "/v1/sandboxes", tc.body)
		wantError(t, r, http.StatusBadRequest, "invalid_argument")
		if n := rows(t, "gvisor-user"); n != 0 {
			t.Fatalf("%s: %d rows left after a refused create", tc.name, n)
		}
	}

	sb := create(t, tok, `{`+busybox+`,"runtime":"gvisor","memory_mb":256}`)
	if sb.Runtime != "gvisor" {
		t.Errorf("runtime on create = %q, want gvisor", sb.Runtime)
	}
	got := decode[sandbox](t, do(t, tok, "GET", "/v1/sandboxes/"+sb.ID, ""), http.StatusOK)
	if got.Runtime != "gvisor" {
		t.Errorf("runtime on get = %q, want gvisor", got.Runtime)
	}
	// gVisor's kernel prints its own banner.
	res := decode[struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"cmd":["sh","-c","dmesg | head -1"]}`), http.StatusOK)
	if res.ExitCode != 0 || res.Stdout == "" || !strings.Contains(res.Stdout, "gVisor") {
		t.Errorf("dmesg in a gvisor sandbox: %+v, want gVisor's banner", res)
	}
}
