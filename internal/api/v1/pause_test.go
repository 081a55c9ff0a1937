package v1_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestPauseResume_Wire: pause and resume answer the sandbox, each twice
// with the same answer; exec on a paused sandbox is a 409 conflict that
// says to resume it; resume of a stopped sandbox says its processes
// restarted.
func TestPauseResume_Wire(t *testing.T) {
	t.Parallel()
	tok := needEnv(t).AdminToken
	sb := create(t, tok, `{`+busybox+`}`)
	type resumed struct {
		sandbox
		PausedAt           *string `json:"paused_at"`
		ProcessesRestarted *bool   `json:"processes_restarted"`
	}
	for range 2 {
		p := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/pause", ""), http.StatusOK)
		if p.State != "paused" || p.PausedAt == nil {
			t.Fatalf("pause answered state %q, paused_at %v", p.State, p.PausedAt)
		}
	}
	r := do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true"}`)
	wantError(t, r, http.StatusConflict, "conflict")
	if got := string(r.body); !strings.Contains(got, "paused; resume it") {
		t.Errorf("exec on a paused sandbox: %s", got)
	}
	if l := decode[struct {
		Items []sandbox `json:"items"`
	}](t, do(t, tok, "GET", "/v1/sandboxes?state=paused&limit=1000", ""), http.StatusOK); !slices.ContainsFunc(l.Items, func(x sandbox) bool { return x.ID == sb.ID }) {
		t.Errorf("a state=paused listing misses the paused sandbox")
	}
	for range 2 {
		res := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK)
		if res.State != "running" || res.ProcessesRestarted == nil || *res.ProcessesRestarted || res.PausedAt != nil {
			t.Fatalf("resume answered %+v", res)
		}
	}
	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/stop", ""), http.StatusOK)
	wantError(t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/pause", ""), http.StatusConflict, "conflict")
	res := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK)
	if res.State != "running" || res.ProcessesRestarted == nil || !*res.ProcessesRestarted {
		t.Errorf("resume of a stopped sandbox answered %+v, want processes_restarted", res)
	}
}

// TestHibernate_Wire: where the daemon's runtime cannot checkpoint (the
// Docker runtime), hibernate answers the sandbox stopped, with
// stopped_reason, twice alike; resume then restarts its processes. A
// sandbox that does not exist is a 404.
func TestHibernate_Wire(t *testing.T) {
	t.Parallel()
	tok := needEnv(t).AdminToken
	sb := create(t, tok, `{`+busybox+`}`)
	type hibernated struct {
		sandbox
		HibernatedAt  *string `json:"hibernated_at"`
		Stopped       *bool   `json:"stopped"`
		StoppedReason string  `json:"stopped_reason"`
	}
	for range 2 {
		h := decode[hibernated](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", ""), http.StatusOK)
		if h.State != "stopped" || h.Stopped == nil || !*h.Stopped || h.StoppedReason == "" || h.HibernatedAt != nil {
			t.Fatalf("hibernate under a runtime without checkpoints answered %+v", h)
		}
	}
	type resumed struct {
		sandbox
		ProcessesRestarted bool `json:"processes_restarted"`
	}
	if r := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK); r.State != "running" || !r.ProcessesRestarted {
		t.Errorf("resume after the stop answered %+v", r)
	}
	wantError(t, do(t, tok, "POST", "/v1/sandboxes/sb-0000000000000000/hibernate", ""), http.StatusNotFound, "not_found")
}
