package daytona_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

type volumeBody struct {
	ID, Name, State, OrganizationID string
}

func TestVolumes_CreateMountShareAndDelete(t *testing.T) {
	s := need(t)
	name := "vol-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	resp := s.do(t, s.Admin, http.MethodPost, "/volumes", map[string]string{"name": name})
	var v volumeBody
	decode(t, resp.body, &v)
	if resp.status != http.StatusOK || v.ID != name || v.Name != name || v.State != "ready" {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/volumes", map[string]string{"name": name}), http.StatusBadRequest)
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/volumes", map[string]string{"name": "Not A Label"}), http.StatusBadRequest)
	for _, p := range []string{"/volumes/" + name, "/volumes/by-name/" + name} {
		if resp := s.do(t, s.Admin, http.MethodGet, p, nil); resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"name":"`+name+`"`) {
			t.Errorf("GET %s: %d %s", p, resp.status, resp.body)
		}
	}
	var list []volumeBody
	decode(t, s.do(t, s.Admin, http.MethodGet, "/volumes", nil).body, &list)
	if !strings.Contains(string(s.do(t, s.Admin, http.MethodGet, "/volumes", nil).body), `"id":"`+name+`"`) {
		t.Errorf("list %+v lacks %s", list, name)
	}
	// Volumes are per owner: another tenant sees none of them.
	wantError(t, s.do(t, s.User, http.MethodGet, "/volumes/by-name/"+name, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.User, http.MethodDelete, "/volumes/"+name, nil), http.StatusNotFound)

	// Two sandboxes mounting it share its data; the DTO reports the mount.
	mount := []map[string]string{{"volumeId": name, "mountPath": "/home/user/data"}}
	a := s.create(t, s.Admin, map[string]any{"volumes": mount})
	resp = s.do(t, s.Admin, http.MethodGet, "/sandbox/"+a.ID, nil)
	if !strings.Contains(string(resp.body), `"volumes":[{"volumeId":"`+name+`","mountPath":"/home/user/data"}]`) {
		t.Errorf("sandbox DTO lacks its volume: %s", resp.body)
	}
	if r := execute(t, s, a.ID, map[string]any{"command": "echo shared > /home/user/data/f && cat /home/user/data/f"}); r.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	b := s.create(t, s.Admin, map[string]any{"volumes": mount})
	if r := execute(t, s, b.ID, map[string]any{"command": "cat /home/user/data/f"}); r.Result != "shared\n" {
		t.Errorf("second sandbox reads %+v", r)
	}

	// In use (running, then stopped): 409 naming a sandbox; data kept.
	e := wantError(t, s.do(t, s.Admin, http.MethodDelete, "/volumes/"+name, nil), http.StatusConflict)
	if !strings.Contains(e.Message, "in use") {
		t.Errorf("in-use message %q", e.Message)
	}
	for _, sb := range []sandbox{a, b} {
		if resp := s.do(t, s.Admin, http.MethodPost, "/sandbox/"+sb.ID+"/stop", nil); resp.status/100 != 2 {
			t.Fatalf("stop: %d %s", resp.status, resp.body)
		}
	}
	wantError(t, s.do(t, s.Admin, http.MethodDelete, "/volumes/"+name, nil), http.StatusConflict)
	for _, sb := range []sandbox{a, b} {
		if resp := s.do(t, s.Admin, http.MethodDelete, "/sandbox/"+sb.ID, nil); resp.status/100 != 2 {
			t.Fatalf("delete sandbox: %d %s", resp.status, resp.body)
		}
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, "/volumes/"+name, nil); resp.status != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, "/volumes/"+name, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.Admin, http.MethodDelete, "/volumes/"+name, nil), http.StatusNotFound)
}

func TestVolumes_CreateWithAnUnknownOrPartialVolumeIsRefused(t *testing.T) {
	s := need(t)
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/sandbox", map[string]any{
		"volumes": []map[string]string{{"volumeId": "no-such-volume", "mountPath": "/data"}},
	}), http.StatusNotFound)
	name := "vsub-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	if resp := s.do(t, s.Admin, http.MethodPost, "/volumes", map[string]string{"name": name}); resp.status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	for _, v := range []map[string]string{
		{"volumeId": name, "mountPath": "/data", "subpath": "../part"},
		{"volumeId": name, "mountPath": "/data", "subpath": "/etc"},
		{"volumeId": name, "mountPath": "/data", "subpath": strings.Repeat("a/", 600) + "a"},
		{"volumeId": name, "mountPath": "relative"},
		{"volumeId": name, "mountPath": "/"},
	} {
		wantError(t, s.do(t, s.Admin, http.MethodPost, "/sandbox", map[string]any{"volumes": []map[string]string{v}}), http.StatusBadRequest)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, "/volumes/"+name, nil); resp.status != http.StatusOK {
		t.Errorf("delete: %d %s", resp.status, resp.body)
	}
}
