package v1_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// quotaToken issues, through the admin API, a user token for owner whose
// owner may hold at most quota (a JSON object), and checks the answer
// shows it.
func quotaToken(t *testing.T, owner, quota string) string {
	t.Helper()
	body := fmt.Sprintf(`{"name":"quota-test","role":"user","owner":%q,"quota":%s}`, owner, quota)
	tok := decode[struct {
		Token string
		Quota map[string]float64
	}](t, do(t, needEnv(t).AdminToken, "POST", "/v1/tokens", body), http.StatusCreated)
	if tok.Token == "" || len(tok.Quota) == 0 {
		t.Fatalf("token answer lacks the secret or the quota: %+v", tok)
	}
	return tok.Token
}

// wantQuota403 checks r is the refusal of a quota: 403 quota_exceeded,
// not retryable (it clears only when the caller stops or destroys a
// sandbox), no Retry-After, and a message that names the quota.
func wantQuota403(t *testing.T, r response, what string) {
	t.Helper()
	wantError(t, r, http.StatusForbidden, "quota_exceeded")
	if r.header.Get("Retry-After") != "" || strings.Contains(string(r.body), `"retryable":true`) ||
		!strings.Contains(string(r.body), "quota") || !strings.Contains(string(r.body), what) {
		t.Errorf("quota refusal %s (Retry-After %q): want no retry and a message naming the %s quota", r.body, r.header.Get("Retry-After"), what)
	}
}

// TestQuota_ConcurrentCreatesNeverExceedIt: of many concurrent creates by
// one owner exactly the quota's worth succeed, the others are 403 naming
// the quota, and another tenant still creates meanwhile. A destroy gives
// the room back.
func TestQuota_ConcurrentCreatesNeverExceedIt(t *testing.T) {
	t.Parallel()
	const attempts, quota = 6, 2
	tok := quotaToken(t, "quota-race", fmt.Sprintf(`{"sandboxes":%d}`, quota))
	other := quotaToken(t, "quota-bystander", `{"sandboxes":1}`)
	var (
		wg      sync.WaitGroup
		answers = make([]response, attempts)
		start   = make(chan struct{})
	)
	for i := range attempts {
		wg.Go(func() {
			<-start
			answers[i] = do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"memory_mb":64}`)
		})
	}
	close(start)
	bystander := create(t, other, `{`+busybox+`,"memory_mb":64}`)
	wg.Wait()
	var made []string
	for _, r := range answers {
		if r.status == http.StatusCreated {
			sb := decode[sandbox](t, r, http.StatusCreated)
			t.Cleanup(func() { destroy(t, sb.ID) })
			made = append(made, sb.ID)
			continue
		}
		wantQuota403(t, r, "sandboxes")
	}
	if len(made) != quota {
		t.Fatalf("%d creates succeeded under a quota of %d sandboxes", len(made), quota)
	}
	if n := rows(t, "quota-race"); n != quota {
		t.Errorf("%d rows of the owner, want %d", n, quota)
	}
	if bystander.State != "running" {
		t.Errorf("the other tenant's sandbox is %s", bystander.State)
	}
	if r := do(t, tok, "DELETE", "/v1/sandboxes/"+made[0], ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %v", r)
	}
	create(t, tok, `{`+busybox+`,"memory_mb":64}`)
}

// TestQuota_CPUMemoryAndStart: the CPU and memory quotas bound the sum of
// what an owner runs; a stopped sandbox holds none of it, so starting it
// again is refused while the room is taken; a request larger than the
// whole quota is a 400 (no retry helps); an admin is never limited.
func TestQuota_CPUMemoryAndStart(t *testing.T) {
	t.Parallel()
	tok := quotaToken(t, "quota-dims", `{"cpu":1,"memory_mb":512}`)
	a := create(t, tok, `{`+busybox+`,"cpu":0.5,"memory_mb":256}`)
	create(t, tok, `{`+busybox+`,"cpu":0.5,"memory_mb":128}`)
	wantQuota403(t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"cpu":0.1,"memory_mb":64}`), "CPU")
	wantError(t, do(t, tok, "POST", "/v1/sandboxes", `{`+busybox+`,"cpu":2}`), http.StatusBadRequest, "invalid_argument")

	if r := do(t, tok, "POST", "/v1/sandboxes/"+a.ID+"/stop", ""); r.status != http.StatusOK {
		t.Fatalf("stop: %v", r)
	}
	c := create(t, tok, `{`+busybox+`,"cpu":0.2,"memory_mb":64}`) // the room a released
	wantQuota403(t, do(t, tok, "POST", "/v1/sandboxes/"+a.ID+"/start", ""), "CPU")
	destroy(t, c.ID)
	if r := do(t, tok, "POST", "/v1/sandboxes/"+a.ID+"/start", ""); r.status != http.StatusOK {
		t.Fatalf("start after a destroy: %v", r)
	}
	// An admin starting the owner's sandbox is not bound by its quota.
	if r := do(t, needEnv(t).AdminToken, "POST", "/v1/sandboxes/"+a.ID+"/stop", ""); r.status != http.StatusOK {
		t.Fatalf("admin stop: %v", r)
	}
	create(t, tok, `{`+busybox+`,"cpu":0.5,"memory_mb":256}`)
	if r := do(t, needEnv(t).AdminToken, "POST", "/v1/sandboxes/"+a.ID+"/start", ""); r.status != http.StatusOK {
		t.Errorf("admin start past the owner's quota: %v", r)
	}
}

// TestQuota_TokenAPIValidates: a negative quota, or any quota on an admin
// token, is refused; no quota means unlimited (this daemon's default).
func TestQuota_TokenAPIValidates(t *testing.T) {
	t.Parallel()
	admin := needEnv(t).AdminToken
	for _, body := range []string{
		`{"name":"q","role":"user","owner":"o","quota":{"sandboxes":-1}}`,
		`{"name":"q","role":"user","owner":"o","quota":{"cpu":-0.5}}`,
		`{"name":"q","role":"user","owner":"o","quota":{"gpus":1}}`,
		`{"name":"q","role":"admin","quota":{"sandboxes":1}}`,
	} {
		wantError(t, do(t, admin, "POST", "/v1/tokens", body), http.StatusBadRequest, "invalid_argument")
	}
	r := do(t, admin, "POST", "/v1/tokens", `{"name":"q","role":"user","owner":"o"}`)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), `"quota"`) {
		t.Errorf("a token without a quota: %v", r)
	}
}
