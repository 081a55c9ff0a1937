package v1_test

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
)

const busybox = `"image":"` + apitest.BusyboxImage + `"`

// TestCreate_BadInput: every bad request gets its typed error and changes
// nothing (no row; the create chain rolls back what it started).
func TestCreate_BadInput(t *testing.T) {
	tok := token(t, "bad-input")
	tests := []struct {
		name   string
		body   string
		header []string
		status int
		code   string
	}{
		{"malformed JSON", `{"image":`, nil, 400, "invalid_argument"},
		{"not JSON", `image=x`, nil, 400, "invalid_argument"},
		{"empty body", ``, nil, 400, "invalid_argument"},
		{"null", `null`, nil, 400, "invalid_argument"},
		{"array", `[]`, nil, 400, "invalid_argument"},
		{"unknown field", `{"imagee":"x"}`, nil, 400, "invalid_argument"},
		{"trailing data", `{` + busybox + `} {}`, nil, 400, "invalid_argument"},
		{"wrong type", `{"cpu":"lots"}`, nil, 400, "invalid_argument"},
		{"negative cpu", `{` + busybox + `,"cpu":-1}`, nil, 400, "invalid_argument"},
		{"tiny negative cpu", `{` + busybox + `,"cpu":-0.0001}`, nil, 400, "invalid_argument"},
		{"tiny cpu", `{` + busybox + `,"cpu":0.0001}`, nil, 400, "invalid_argument"},
		{"huge cpu", `{` + busybox + `,"cpu":1e300}`, nil, 400, "invalid_argument"},
		{"negative memory", `{` + busybox + `,"memory_mb":-512}`, nil, 400, "invalid_argument"},
		{"huge memory", `{` + busybox + `,"memory_mb":1000000000000}`, nil, 400, "invalid_argument"},
		{"memory beyond int64", `{` + busybox + `,"memory_mb":1e30}`, nil, 400, "invalid_argument"},
		{"negative timeout", `{` + busybox + `,"timeout_s":-1}`, nil, 400, "invalid_argument"},
		{"huge timeout", `{` + busybox + `,"timeout_s":9223372036854775807}`, nil, 400, "invalid_argument"},
		{"name not a DNS label", `{` + busybox + `,"name":"Not_A_Label"}`, nil, 400, "invalid_argument"},
		{"name too long", `{` + busybox + `,"name":"` + strings.Repeat("a", 64) + `"}`, nil, 400, "invalid_argument"},
		{"name like an id", `{` + busybox + `,"name":"sb-0123456789abcdef"}`, nil, 400, "invalid_argument"},
		{"bad env key", `{` + busybox + `,"env":{"1X":"y"}}`, nil, 400, "invalid_argument"},
		{"unknown runtime", `{` + busybox + `,"runtime":"qemu"}`, nil, 400, "invalid_argument"},
		{"negative auto-stop", `{` + busybox + `,"lifecycle":{"auto_stop_s":-1}}`, nil, 400, "invalid_argument"},
		{"auto-stop past a week", `{` + busybox + `,"lifecycle":{"auto_stop_s":604801}}`, nil, 400, "invalid_argument"},
		{"negative auto-delete", `{` + busybox + `,"lifecycle":{"auto_delete_s":-1}}`, nil, 400, "invalid_argument"},
		{"auto-archive past 30 days", `{` + busybox + `,"lifecycle":{"auto_archive_s":2592001}}`, nil, 400, "invalid_argument"},
		{"unknown on_timeout", `{` + busybox + `,"lifecycle":{"on_timeout":"explode"}}`, nil, 400, "invalid_argument"},
		{"unknown lifecycle field", `{` + busybox + `,"lifecycle":{"auto_stop":5}}`, nil, 400, "invalid_argument"},
		// An image not on the host is pulled, but only from the registries
		// --registry-allow names (apitest: 127.0.0.1).
		{"image from a registry not allowed", `{"image":"nope/nope:1"}`, nil, 403, "permission_denied"},
		{"image with spaces", `{"image":"a b"}`, nil, 400, "invalid_argument"},
		{"oversize body", `{"image":"` + strings.Repeat("x", 1<<20) + `"}`, nil, 413, "payload_too_large"},
		{"idempotency key too long", `{` + busybox + `}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "invalid_argument"},
		{"idempotency key not ASCII", `{` + busybox + `}`, []string{"Idempotency-Key", "clé"}, 400, "invalid_argument"},
		{"idempotency key not printable", `{` + busybox + `}`, []string{"Idempotency-Key", "k\tk"}, 400, "invalid_argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rows(t, "bad-input")
			wantError(t, do(t, tok, "POST", "/v1/sandboxes", tt.body, tt.header...), tt.status, tt.code)
			if after := rows(t, "bad-input"); after != before {
				t.Errorf("sandbox rows: %d before, %d after a rejected create", before, after)
			}
		})
	}
}

func TestCreate_DefaultImage(t *testing.T) {
	t.Parallel()
	tok := token(t, "default-image")
	r := do(t, tok, "POST", "/v1/sandboxes", `{"image":""}`)
	if r.status == http.StatusBadRequest && strings.Contains(string(r.body), apitest.BaseImage) {
		t.Fatalf("the default image %s is not built: run scripts/build-images.sh (%s)", apitest.BaseImage, r.body)
	}
	sb := decode[sandbox](t, r, http.StatusCreated)
	t.Cleanup(func() { destroy(t, sb.ID) })
	if sb.Image != apitest.BaseImage {
		t.Errorf("image = %q, want the default %q", sb.Image, apitest.BaseImage)
	}
}

// TestCreate_DefaultTimeout: a create that sends no timeout_s gets the
// daemon's --default-timeout (1 h by default, the test stack's); one that
// sends 0 has none; an explicit value is kept. Absent and 0 are different
// bodies for an Idempotency-Key.
func TestCreate_DefaultTimeout(t *testing.T) {
	t.Parallel()
	tok := token(t, "default-timeout")
	lifetime := func(sb sandbox) time.Duration {
		if sb.ExpiresAt == nil {
			return 0
		}
		return sb.ExpiresAt.Sub(sb.CreatedAt)
	}
	// The lifetime counts from the commit, a little after created_at.
	const slack = 2 * time.Minute
	absent := create(t, tok, `{`+busybox+`}`)
	if got := lifetime(absent); got < time.Hour || got > time.Hour+slack {
		t.Errorf("no timeout_s: expires_at - created_at = %v (expires_at %v), want the 1h default", got, absent.ExpiresAt)
	}
	none := create(t, tok, `{`+busybox+`,"timeout_s":0}`)
	if none.ExpiresAt != nil {
		t.Errorf("timeout_s 0: expires_at = %v, want none", none.ExpiresAt)
	}
	if got := decode[sandbox](t, do(t, tok, "GET", "/v1/sandboxes/"+none.ID, ""), http.StatusOK); got.ExpiresAt != nil {
		t.Errorf("timeout_s 0: GET expires_at = %v, want none", got.ExpiresAt)
	}
	explicit := create(t, tok, `{`+busybox+`,"timeout_s":120}`)
	if got := lifetime(explicit); got < 2*time.Minute || got > 2*time.Minute+slack {
		t.Errorf("timeout_s 120: lifetime %v, want 2m", got)
	}
	key := "default-timeout-" + absent.ID
	keyed := decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`}`, "Idempotency-Key", key), http.StatusCreated)
	t.Cleanup(func() { destroy(t, keyed.ID) })
	wantError(t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"timeout_s":0}`, "Idempotency-Key", key),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
}

// TestCreate_Answer checks the create answer: the sandbox object, the
// private key shown once, Server-Timing, and what GET shows afterwards.
func TestCreate_Answer(t *testing.T) {
	t.Parallel()
	tok := token(t, "answer")
	r := do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"name":"answer","cpu":0.5,"memory_mb":128,"tags":{"team":"ml"},"env":{"FOO":"bar"},"secret_env":{"TOKEN":"s3cret"},"timeout_s":3600}`)
	sb := decode[sandbox](t, r, http.StatusCreated)
	t.Cleanup(func() { destroy(t, sb.ID) })

	if !regexp.MustCompile(`^sb-[0-9a-f]{16}$`).MatchString(sb.ID) {
		t.Errorf("id = %q", sb.ID)
	}
	if sb.Name != "answer" || sb.State != "running" || sb.CPU != 0.5 || sb.MemoryMB != 128 ||
		sb.Tags["team"] != "ml" || sb.Env["FOO"] != "bar" || sb.ExpiresAt == nil {
		t.Errorf("sandbox = %+v", sb)
	}
	if !strings.HasPrefix(sb.SSHPublicKey, "ssh-ed25519 ") || !strings.Contains(sb.SSHPrivateKey, "PRIVATE KEY") {
		t.Errorf("ssh keys missing: public %q, private %d bytes", sb.SSHPublicKey, len(sb.SSHPrivateKey))
	}
	if strings.Contains(string(r.body), "s3cret") {
		t.Error("the create answer contains a secret_env value")
	}
	timing := r.header.Get("Server-Timing")
	if !regexp.MustCompile(`^[A-Za-z0-9_-]+;dur=[0-9.]+(, [A-Za-z0-9_-]+;dur=[0-9.]+)+$`).MatchString(timing) ||
		!strings.Contains(timing, "validate;dur=") || !strings.Contains(timing, "runtime;dur=") {
		t.Errorf("Server-Timing = %q, want one entry per step", timing)
	}

	for _, ref := range []string{sb.ID, sb.Name} {
		got := decode[sandbox](t, do(t, tok, "GET", "/v1/sandboxes/"+ref, ""), http.StatusOK)
		if got.ID != sb.ID || got.SSHPrivateKey != "" || got.SSHPublicKey != sb.SSHPublicKey {
			t.Errorf("GET %s = %+v; want the same sandbox without its private key", ref, got)
		}
	}
}

// TestCreate_IdempotencyKeyRace: 32 concurrent creates with one key make
// one sandbox, and every answer names it; the key with another body is 422.
func TestCreate_IdempotencyKeyRace(t *testing.T) {
	t.Parallel()
	tok := token(t, "idem")
	key := "race-" + rand.Text() // fresh per run: a key stays live for 24 hours
	const n = 32
	body := `{` + busybox + `,"tags":{"race":"idem"}}`
	var (
		wg      sync.WaitGroup
		answers [n]response
	)
	for i := range n {
		wg.Go(func() {
			// Same request, spelled differently: whitespace and field order
			// do not change the request hash.
			b := body
			if i%2 == 1 {
				b = `{ "tags": {"race": "idem"}, ` + busybox + ` }`
			}
			answers[i] = do(t, tok, "POST", "/v1/sandboxes", b, "Idempotency-Key", key)
		})
	}
	wg.Wait()

	var id string
	withKey := 0
	for i, r := range answers {
		sb := decode[sandbox](t, r, http.StatusCreated)
		if i == 0 {
			id = sb.ID
			t.Cleanup(func() { destroy(t, id) })
		}
		if sb.ID != id {
			t.Errorf("answer %d names %s, answer 0 %s", i, sb.ID, id)
		}
		if sb.SSHPrivateKey != "" {
			withKey++
		} else if r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("answer %d has no private key and no Idempotent-Replayed header", i)
		}
	}
	if withKey != 1 {
		t.Errorf("%d answers carry the private key, want exactly 1", withKey)
	}
	list := decode[struct{ Items []sandbox }](t, do(t, tok, "GET", "/v1/sandboxes?tag.race=idem", ""), http.StatusOK)
	if len(list.Items) != 1 {
		t.Errorf("%d sandboxes tagged race=idem, want 1", len(list.Items))
	}

	before := rows(t, "idem")
	wantError(t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"tags":{"race":"other"}}`, "Idempotency-Key", key),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	if rows(t, "idem") != before {
		t.Error("a reused key changed the sandbox rows")
	}
	// Another owner's identical key is another key.
	other := create(t, token(t, "idem-other"), body)
	if other.ID == id {
		t.Error("two owners' Idempotency-Keys collided")
	}
}

// TestCreate_NameRace: 32 concurrent creates of one name: one 201, 31
// name_conflict.
func TestCreate_NameRace(t *testing.T) {
	t.Parallel()
	tok := token(t, "name-race")
	const n = 32
	var (
		wg      sync.WaitGroup
		answers [n]response
	)
	for i := range n {
		wg.Go(func() {
			answers[i] = do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"name":"race"}`)
		})
	}
	wg.Wait()
	won := 0
	for _, r := range answers {
		if r.status == http.StatusCreated {
			won++
			sb := decode[sandbox](t, r, http.StatusCreated)
			t.Cleanup(func() { destroy(t, sb.ID) })
			continue
		}
		wantError(t, r, http.StatusConflict, "name_conflict")
	}
	if won != 1 {
		t.Errorf("%d creates won the name, want 1", won)
	}
}

// TestCreate_NamesArePerTenant: a name is unique within its owner only.
// Tenant B may name a sandbox "web" while tenant A has one (it used to be
// name_conflict: a collision and an oracle of A's names), each tenant's
// "web" is its own, and the admin, who sees both, is refused the
// ambiguous name (409 conflict) but reaches each by id.
func TestCreate_NamesArePerTenant(t *testing.T) {
	t.Parallel()
	a, b := token(t, "names-a"), token(t, "names-b")
	sa := create(t, a, `{`+busybox+`,"name":"web"}`)
	r := do(t, b, "POST", "/v1/sandboxes", `{`+busybox+`,"name":"web"}`)
	sb := decode[sandbox](t, r, http.StatusCreated)
	t.Cleanup(func() { destroy(t, sb.ID) })
	wantError(t, do(t, a, "POST", "/v1/sandboxes", `{`+busybox+`,"name":"web"}`), http.StatusConflict, "name_conflict")

	for tok, want := range map[string]string{a: sa.ID, b: sb.ID} {
		if got := decode[sandbox](t, do(t, tok, "GET", "/v1/sandboxes/web", ""), http.StatusOK); got.ID != want {
			t.Errorf("GET /v1/sandboxes/web = %s, want the caller's own %s", got.ID, want)
		}
		list := decode[struct{ Items []sandbox }](t, do(t, tok, "GET", "/v1/sandboxes?name=web", ""), http.StatusOK)
		if len(list.Items) != 1 || list.Items[0].ID != want {
			t.Errorf("list ?name=web = %+v, want only %s", list.Items, want)
		}
	}
	wantError(t, do(t, env.AdminToken, "GET", "/v1/sandboxes/web", ""), http.StatusConflict, "conflict")
	for _, id := range []string{sa.ID, sb.ID} {
		decode[sandbox](t, do(t, env.AdminToken, "GET", "/v1/sandboxes/"+id, ""), http.StatusOK)
	}
	// Destroying B's "web" by name leaves A's.
	if r := do(t, b, "DELETE", "/v1/sandboxes/web", ""); r.status != http.StatusNoContent {
		t.Fatalf("B destroys its web: %v", r)
	}
	decode[sandbox](t, do(t, a, "GET", "/v1/sandboxes/web", ""), http.StatusOK)
}

// TestLifecycle walks one sandbox through get, patch, stop, start and
// delete, and checks that a second delete is not_found.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	tok := token(t, "lifecycle")
	sb := create(t, tok, `{`+busybox+`,"name":"life","tags":{"a":"1"}}`)
	path := "/v1/sandboxes/" + sb.ID

	got := decode[sandbox](t, do(t, tok, "PATCH", path, `{"tags":{"b":"2"},"timeout_s":600}`), http.StatusOK)
	if got.Tags["b"] != "2" || got.Tags["a"] != "" || got.ExpiresAt == nil {
		t.Errorf("after PATCH: %+v", got)
	}
	got = decode[sandbox](t, do(t, tok, "PATCH", path, `{"timeout_s":0}`), http.StatusOK)
	if got.ExpiresAt != nil || got.Tags["b"] != "2" {
		t.Errorf("after clearing the timeout: %+v", got)
	}
	wantError(t, do(t, tok, "PATCH", path, `{"timeout_s":-5}`), 400, "invalid_argument")
	wantError(t, do(t, tok, "PATCH", path, `{"name":"x"}`), 400, "invalid_argument")

	if got := decode[sandbox](t, do(t, tok, "POST", path+"/stop", ""), http.StatusOK); got.State != "stopped" {
		t.Errorf("after stop: state %s", got.State)
	}
	if got := decode[sandbox](t, do(t, tok, "POST", path+"/stop", ""), http.StatusOK); got.State != "stopped" {
		t.Errorf("after a second stop: state %s", got.State)
	}
	if got := decode[sandbox](t, do(t, tok, "POST", path+"/start", ""), http.StatusOK); got.State != "running" {
		t.Errorf("after start: state %s", got.State)
	}
	if r := do(t, tok, "DELETE", path, ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %v", r)
	}
	wantError(t, do(t, tok, "GET", path, ""), 404, "not_found")
	wantError(t, do(t, tok, "DELETE", path, ""), 404, "not_found")
}

// TestLifecycle_Rules: a create's lifecycle rules are read back as sent,
// PATCH replaces them ({} clears them) and a bad one is a 400 naming the
// field that changes nothing; auto_delete_s 0 destroys the sandbox at its
// stop.
func TestLifecycle_Rules(t *testing.T) {
	t.Parallel()
	tok := token(t, "lifecycle-rules")
	sb := create(t, tok, `{`+busybox+`,"lifecycle":{"auto_stop_s":900,"auto_delete_s":0,"auto_archive_s":3600,"on_timeout":"pause"}}`)
	path := "/v1/sandboxes/" + sb.ID
	rules := func(r response) string {
		t.Helper()
		var got struct {
			Lifecycle json.RawMessage `json:"lifecycle"`
		}
		if r.status != http.StatusOK && r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		return string(got.Lifecycle)
	}
	if got, want := rules(do(t, tok, "GET", path, "")), `{"auto_stop_s":900,"auto_delete_s":0,"auto_archive_s":3600,"on_timeout":"pause"}`; got != want {
		t.Errorf("read: lifecycle %s, want %s", got, want)
	}
	r := do(t, tok, "PATCH", path, `{"lifecycle":{"auto_delete_s":-5}}`)
	wantError(t, r, 400, "invalid_argument")
	if !strings.Contains(string(r.body), "lifecycle.auto_delete_s") {
		t.Errorf("the 400 does not name the field: %s", r.body)
	}
	if got := rules(do(t, tok, "GET", path, "")); !strings.Contains(got, `"auto_stop_s":900`) {
		t.Errorf("a refused PATCH changed the rules: %s", got)
	}
	if got := rules(do(t, tok, "PATCH", path, `{"lifecycle":{"auto_delete_s":60}}`)); got != `{"auto_delete_s":60}` {
		t.Errorf("after PATCH: lifecycle %s", got)
	}
	if got := rules(do(t, tok, "PATCH", path, `{"lifecycle":{}}`)); got != "" {
		t.Errorf("after PATCH {}: lifecycle %s, want none", got)
	}
	do(t, tok, "PATCH", path, `{"lifecycle":{"auto_delete_s":0}}`)
	if got := decode[sandbox](t, do(t, tok, "POST", path+"/stop", ""), http.StatusOK); got.State != "stopped" {
		t.Errorf("stop with auto_delete_s 0: state %s, want its last view, stopped", got.State)
	}
	wantError(t, do(t, tok, "GET", path, ""), 404, "not_found")
}

func TestList_Query(t *testing.T) {
	t.Parallel()
	tok := token(t, "list")
	a := create(t, tok, `{`+busybox+`,"tags":{"k":"a","both":"y"}}`)
	create(t, tok, `{`+busybox+`,"tags":{"k":"b","both":"y"}}`)

	list := decode[struct {
		Items         []sandbox
		NextPageToken string `json:"next_page_token"`
	}](t, do(t, tok, "GET", "/v1/sandboxes?tag.both=y&tag.k=a", ""), http.StatusOK)
	if len(list.Items) != 1 || list.Items[0].ID != a.ID {
		t.Errorf("tag AND filter = %+v, want just %s", list.Items, a.ID)
	}
	page := decode[struct {
		Items         []sandbox
		NextPageToken string `json:"next_page_token"`
	}](t, do(t, tok, "GET", "/v1/sandboxes?limit=1&state=running", ""), http.StatusOK)
	if len(page.Items) != 1 || page.NextPageToken == "" {
		t.Fatalf("limit=1: %+v", page)
	}
	rest := decode[struct{ Items []sandbox }](t, do(t, tok, "GET", "/v1/sandboxes?limit=1&page_token="+page.NextPageToken, ""), http.StatusOK)
	if len(rest.Items) != 1 || rest.Items[0].ID == page.Items[0].ID {
		t.Errorf("second page = %+v", rest.Items)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=ten", "state=sleeping", "color=red", "name=a&name=b", "tag.=x"} {
		wantError(t, do(t, tok, "GET", "/v1/sandboxes?"+q, ""), 400, "invalid_argument")
	}
}

// TestAuth: no token, a wrong token, another owner's sandbox, a user on
// the token routes, an unknown route.
func TestAuth(t *testing.T) {
	t.Parallel()
	alice, bob := token(t, "alice"), token(t, "bob")
	sb := create(t, alice, `{`+busybox+`,"name":"alice-box"}`)
	wrong := "sbx_00000000_" + strings.Repeat("0", 64)

	for _, tok := range []string{"", wrong, "not-a-token"} {
		wantError(t, do(t, tok, "GET", "/v1/sandboxes", ""), 401, "unauthenticated")
		wantError(t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`}`), 401, "unauthenticated")
	}
	// Bob cannot see, touch or learn of Alice's sandbox.
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + sb.ID, ""},
		{"GET", "/v1/sandboxes/alice-box", ""},
		{"PATCH", "/v1/sandboxes/" + sb.ID, `{"tags":{}}`},
		{"DELETE", "/v1/sandboxes/" + sb.ID, ""},
		{"POST", "/v1/sandboxes/" + sb.ID + "/stop", ""},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"cmd":["true"]}`},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=/etc/hostname", ""},
	} {
		wantError(t, do(t, bob, req.method, req.path, req.body), 404, "not_found")
	}
	list := decode[struct{ Items []sandbox }](t, do(t, bob, "GET", "/v1/sandboxes", ""), http.StatusOK)
	for _, it := range list.Items {
		if it.ID == sb.ID {
			t.Error("bob's list shows alice's sandbox")
		}
	}
	// The admin sees it.
	decode[sandbox](t, do(t, env.AdminToken, "GET", "/v1/sandboxes/"+sb.ID, ""), http.StatusOK)

	wantError(t, do(t, alice, "GET", "/v1/tokens", ""), 403, "permission_denied")
	wantError(t, do(t, alice, "POST", "/v1/tokens", `{"name":"x","role":"admin"}`), 403, "permission_denied")
	wantError(t, do(t, alice, "GET", "/v1/nope", ""), 404, "not_found")
	r := do(t, alice, "PUT", "/v1/sandboxes", "")
	wantError(t, r, 405, "invalid_argument")
	if r.header.Get("Allow") == "" {
		t.Error("405 without Allow")
	}
}

// TestNULInPath: a NUL byte in the path or a path query is invalid_argument.
func TestNULInPath(t *testing.T) {
	t.Parallel()
	tok := token(t, "nul")
	wantError(t, do(t, tok, "GET", "/v1/sandboxes/a%00b", ""), 400, "invalid_argument")
	wantError(t, do(t, tok, "GET", "/v1/sandboxes/x/files?path=/tmp/a%00b", ""), 400, "invalid_argument")
	wantError(t, do(t, tok, "GET", "/v1/sandboxes?name=a%00", ""), 400, "invalid_argument")
}

func TestTokens(t *testing.T) {
	t.Parallel()
	admin := needEnv(t).AdminToken
	type tokenJSON struct {
		ID, Name, Role, Owner, Token string
	}
	created := decode[tokenJSON](t, do(t, admin, "POST", "/v1/tokens", `{"name":"ci","role":"user","owner":"team-ci"}`), http.StatusCreated)
	if created.Token == "" || created.Role != "user" || created.Owner != "team-ci" {
		t.Fatalf("created = %+v", created)
	}
	decode[struct{ Items []sandbox }](t, do(t, created.Token, "GET", "/v1/sandboxes", ""), http.StatusOK)

	r := do(t, admin, "GET", "/v1/tokens", "")
	if strings.Contains(string(r.body), created.Token) {
		t.Error("the token list shows a secret")
	}
	list := decode[struct{ Items []tokenJSON }](t, r, http.StatusOK)
	found := false
	for _, it := range list.Items {
		found = found || it.ID == created.ID
	}
	if !found {
		t.Errorf("token %s not in the list", created.ID)
	}

	for _, body := range []string{`{"name":"x","role":"root"}`, `{"name":"","role":"admin"}`, `{"name":"x","role":"user"}`, `{"name":"x","role":"user","owner":"a","extra":1}`} {
		wantError(t, do(t, admin, "POST", "/v1/tokens", body), 400, "invalid_argument")
	}
	for range 2 { // revoking is idempotent
		if r := do(t, admin, "DELETE", "/v1/tokens/"+created.ID, ""); r.status != http.StatusNoContent {
			t.Fatalf("revoke: %v", r)
		}
	}
	wantError(t, do(t, admin, "DELETE", "/v1/tokens/ffffffff", ""), 404, "not_found")
	wantError(t, do(t, created.Token, "GET", "/v1/sandboxes", ""), 401, "unauthenticated")
}

// TestMetrics: the create-step histogram, sandboxes by state and errors by
// code are exposed.
func TestMetrics(t *testing.T) {
	t.Parallel()
	tok := token(t, "metrics")
	create(t, tok, `{`+busybox+`}`)
	wantError(t, do(t, tok, "GET", "/v1/sandboxes/sb-ffffffffffffffff", ""), 404, "not_found")

	// /metrics is the admin's: no token is 401, a user's 403.
	wantError(t, do(t, "", "GET", "/metrics", ""), 401, "unauthenticated")
	wantError(t, do(t, tok, "GET", "/metrics", ""), 403, "permission_denied")
	r := do(t, env.AdminToken, "GET", "/metrics", "")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %v", r)
	}
	for _, want := range []string{
		`sandboxd_create_step_seconds_bucket{step="runtime",le=`,
		`sandboxd_create_step_seconds_count{step="total"}`,
		`sandboxd_sandboxes{state="running"}`,
		`sandboxd_api_errors_total{code="not_found"}`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`sandboxd_sandboxes\{state="running"\} (\d+)`).FindStringSubmatch(string(r.body)); m == nil || m[1] == "0" {
		t.Errorf("running sandboxes gauge = %v, want > 0", m)
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	got := decode[map[string]string](t, do(t, "", "GET", "/healthz", ""), http.StatusOK)
	if got["status"] != "ok" {
		t.Errorf("healthz = %v", got)
	}
}
