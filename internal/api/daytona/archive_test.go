package daytona_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestArchive_StopsKeepsTheFilesystemAndStartRecovers: archive stops a
// running sandbox and shows it archived (in GET, list and the event
// stream); start recovers it with its files; the auto-archive interval is
// honoured at create and by its route, and reported back.
func TestArchive_StopsKeepsTheFilesystemAndStartRecovers(t *testing.T) {
	s := need(t)
	events := dialEvents(t, s, "")
	if ack := events.connect(s.User); ack[:2] != "40" {
		t.Fatalf("CONNECT: %q", ack)
	}
	label := "archive-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sb := s.create(t, s.User, map[string]any{"autoArchiveInterval": 60, "labels": map[string]string{"archive": label}})
	var got struct {
		State       string `json:"state"`
		AutoArchive int    `json:"autoArchiveInterval"`
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.AutoArchive != 60 {
		t.Errorf("autoArchiveInterval %d, want 60", got.AutoArchive)
	}
	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/autoarchive/120", nil); resp.status != http.StatusOK {
		t.Fatalf("autoarchive: %d %s", resp.status, resp.body)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.AutoArchive != 120 {
		t.Errorf("autoArchiveInterval after the route %d, want 120", got.AutoArchive)
	}
	if got := execute(t, s, sb.ID, map[string]any{"command": "echo kept > /home/daytona/marker"}); got.ExitCode != 0 {
		t.Fatalf("write marker: %+v", got)
	}

	resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/archive", nil)
	if resp.status != http.StatusOK {
		t.Fatalf("archive: %d %s", resp.status, resp.body)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.State != "archived" {
		t.Errorf("state after archive %q, want archived", got.State)
	}
	if native, err := s.Service.Get(t.Context(), service.Caller{Owner: "alice"}, sb.ID); err != nil || native.State != service.StateStopped {
		t.Errorf("service state %q (%v), want stopped", native.State, err)
	}
	for {
		ev := events.nextFor(sb.ID)
		if ev.OldState == "started" { // the archive's stop
			if ev.NewState != "archived" {
				t.Errorf("event of the archive %+v, want started → archived", ev)
			}
			break
		}
	}
	labels := url.QueryEscape(`{"archive":"` + label + `"}`)
	for states, want := range map[string]int{"archived": 1, "stopped": 0, "started,archived": 1} {
		var page struct{ Items []sandbox }
		decode(t, s.do(t, s.User, http.MethodGet, "/sandbox?labels="+labels+"&states="+states, nil).body, &page)
		if len(page.Items) != want {
			t.Errorf("list states=%s: %d items, want %d", states, len(page.Items), want)
		}
	}
	// Archiving again changes nothing.
	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/archive", nil); resp.status != http.StatusOK {
		t.Fatalf("archive again: %d %s", resp.status, resp.body)
	}

	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/start", nil); resp.status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.status, resp.body)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.State != "started" {
		t.Errorf("state after start %q, want started", got.State)
	}
	if res := execute(t, s, sb.ID, map[string]any{"command": "cat /home/daytona/marker"}); res.Result != "kept\n" {
		t.Errorf("marker after recover: %+v", res)
	}
	// A plain stop is stopped, not archived (the interval has not passed).
	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/stop", nil); resp.status != http.StatusOK {
		t.Fatalf("stop: %d %s", resp.status, resp.body)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.State != "stopped" {
		t.Errorf("state after stop %q, want stopped", got.State)
	}
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/autoarchive/-1", nil), http.StatusBadRequest)
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", map[string]any{"autoArchiveInterval": -5}), http.StatusBadRequest)
}
