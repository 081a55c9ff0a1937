package v1_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
)

// domain is the wire's custom-domain binding, as a client sees it.
type domain struct {
	Hostname     string `json:"hostname"`
	Port         int    `json:"port"`
	SandboxID    string `json:"sandbox_id"`
	Verified     bool   `json:"verified"`
	Verification struct {
		Type, Name, Value string
	} `json:"verification"`
}

// TestDomains binds a custom hostname to an http server in one sandbox
// with an admin token (verified at once: the admin's grant): adding it
// again is a no-op, another sandbox or port gets hostname_conflict,
// requests with that Host reach the server once the port is exposed, and
// after removal the hostname is free and routes nowhere.
func TestDomains(t *testing.T) {
	t.Parallel()
	tok := needEnv(t).AdminToken
	web := create(t, tok, baseSandbox)
	other := create(t, tok, `{"image":"`+apitest.BusyboxImage+`"}`)
	background(t, tok, web.ID, "python3 -m http.server 8000 --bind 127.0.0.1 --directory /etc")
	const host = "app.example.test"
	base := "/v1/sandboxes/" + web.ID + "/domains"

	want := domain{Hostname: host, Port: 8000, SandboxID: web.ID, Verified: true}
	want.Verification.Type, want.Verification.Name = "TXT", "_sandboxd-challenge."+host
	for _, body := range []string{
		`{"hostname":"app.example.test","port":8000}`,
		`{"hostname":"App.Example.Test.","port":8000}`, // the same name, normalized
	} {
		got := decode[domain](t, do(t, tok, "POST", base, body), http.StatusOK)
		want.Verification.Value = got.Verification.Value
		if got != want {
			t.Errorf("add %s = %+v, want %+v", body, got, want)
		}
	}
	list := decode[struct{ Items []domain }](t, do(t, tok, "GET", base, ""), http.StatusOK)
	if diff := cmp.Diff([]domain{want}, list.Items); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	wantError(t, do(t, tok, "POST", "/v1/sandboxes/"+other.ID+"/domains", `{"hostname":"app.example.test","port":8000}`),
		http.StatusConflict, "hostname_conflict")
	wantError(t, do(t, tok, "POST", base, `{"hostname":"app.example.test","port":9000}`),
		http.StatusConflict, "hostname_conflict")

	c := loopbackClient(t)
	url := "http://" + host + ":" + listenPort() + "/hostname"
	if r := get(t, c, url, ""); r.status != http.StatusNotFound {
		t.Errorf("bound hostname, port not exposed: %v, want 404", r)
	}
	expose(t, env.URL, tok, web.ID, `{"port":8000,"public":true}`)
	waitReady(t, c, url, "")
	hostname := sh(t, tok, web.ID, "cat /etc/hostname")
	if r := get(t, c, url, ""); r.status != http.StatusOK || !bytes.Equal(r.body, []byte(hostname)) {
		t.Errorf("GET through the custom domain: %v, want 200 with %q", r, hostname)
	}

	for range 2 { // removing is safe to repeat
		if r := do(t, tok, "DELETE", base+"/"+host, ""); r.status != http.StatusNoContent {
			t.Fatalf("remove: %v", r)
		}
	}
	if r := get(t, c, url, ""); r.status != http.StatusNotFound {
		t.Errorf("removed hostname: %v, want 404", r)
	}
	list = decode[struct{ Items []domain }](t, do(t, tok, "GET", base, ""), http.StatusOK)
	if len(list.Items) != 0 {
		t.Errorf("list after removal = %+v, want none", list.Items)
	}
	if got := decode[domain](t, do(t, tok, "POST", "/v1/sandboxes/"+other.ID+"/domains", `{"hostname":"app.example.test","port":80}`), http.StatusOK); got.SandboxID != other.ID {
		t.Errorf("the freed hostname went to %s, want %s", got.SandboxID, other.ID)
	}
	// Removing it through the first sandbox touches nothing of the second's.
	if r := do(t, tok, "DELETE", base+"/"+host, ""); r.status != http.StatusNoContent {
		t.Fatalf("remove: %v", r)
	}
	list = decode[struct{ Items []domain }](t, do(t, tok, "GET", "/v1/sandboxes/"+other.ID+"/domains", ""), http.StatusOK)
	if len(list.Items) != 1 {
		t.Errorf("the other sandbox's domains = %+v, want its binding kept", list.Items)
	}
}

func TestDomains_BadInput(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	base := "/v1/sandboxes/" + id + "/domains"
	for _, body := range []string{
		``, `{}`, `{"hostname":"ok.example.test"}`, `{"hostname":"ok.example.test","port":0}`,
		`{"hostname":"ok.example.test","port":70000}`, `{"hostname":"under_score.test","port":80}`,
		`{"hostname":"-x.test","port":80}`, `{"hostname":"80-` + id + `.localhost","port":80}`,
		`{"hostname":"localhost","port":80}`, `{"hostname":"127.0.0.1","port":80}`, `{"hostname":"10.0.0.7","port":80}`, `{"hostname":"ok.example.test","port":80,"tls":true}`,
	} {
		wantError(t, do(t, tok, "POST", base, body), http.StatusBadRequest, "invalid_argument")
	}
	other := token(t, "someone-else")
	wantError(t, do(t, other, "POST", base, `{"hostname":"ok.example.test","port":80}`), http.StatusNotFound, "not_found")
	wantError(t, do(t, other, "GET", base, ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, other, "DELETE", base+"/ok.example.test", ""), http.StatusNotFound, "not_found")
}
