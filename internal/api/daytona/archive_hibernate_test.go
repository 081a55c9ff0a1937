package daytona_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestArchive_HibernatesWhereItCan: on a daemon whose sandboxes run
// under gVisor (--engine oci), archive of a started sandbox hibernates
// it: the state reads "archived" as the SDK wants, the service holds it
// paused and hibernated (no memory), and start recovers it with its
// processes where they were (the same background process, alive), the
// mark cleared.
func TestArchive_HibernatesWhereItCan(t *testing.T) {
	need(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	dir, err := os.MkdirTemp("", "dth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var b [6]byte
	rand.Read(b[:])
	nodeID := "dth-" + hex.EncodeToString(b[:])
	testenv.TrackNode(t, nodeID)
	s, err := newStack(context.Background(), dir, nodeID, netEnv.agentBin, "--engine", "oci", "--default-runtime", "gvisor")
	if err != nil {
		t.Fatalf("the gVisor daemon: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the gVisor daemon: %v", err)
		}
	})

	sb := s.create(t, s.User, nil)
	res := execute(t, s, sb.ID, map[string]any{"command": "sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!'"})
	pid := strings.TrimSpace(res.Result)
	if res.ExitCode != 0 || pid == "" {
		t.Fatalf("start a background process: %+v", res)
	}

	resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/archive", nil)
	if resp.status != http.StatusOK {
		t.Fatalf("archive: %d %s", resp.status, resp.body)
	}
	var got struct {
		State string `json:"state"`
	}
	decode(t, resp.body, &got)
	if got.State != "archived" {
		t.Errorf("archive answered state %q, want archived", got.State)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.State != "archived" {
		t.Errorf("state after archive %q, want archived", got.State)
	}
	var page struct{ Items []sandbox }
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox?states=archived", nil).body, &page)
	if len(page.Items) != 1 || page.Items[0].ID != sb.ID {
		t.Errorf("list states=archived: %+v, want the sandbox", page.Items)
	}
	native, err := s.Service.Get(t.Context(), service.Caller{Owner: "alice"}, sb.ID)
	if err != nil || native.State != service.StatePaused || native.HibernatedAt.IsZero() {
		t.Fatalf("service view %s hibernated at %v (%v), want paused and hibernated", native.State, native.HibernatedAt, err)
	}

	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/start", nil); resp.status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.status, resp.body)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	if got.State != "started" {
		t.Errorf("state after start %q, want started", got.State)
	}
	if res := execute(t, s, sb.ID, map[string]any{"command": "sh -c 'kill -0 " + pid + " && echo alive'"}); res.Result != "alive\n" {
		t.Errorf("the background process after recover: %+v, want it alive", res)
	}
	if native, err := s.Service.Get(t.Context(), service.Caller{Owner: "alice"}, sb.ID); err != nil || !native.ArchivedAt.IsZero() {
		t.Errorf("archive mark after start: %v (%v), want cleared", native.ArchivedAt, err)
	}
}
