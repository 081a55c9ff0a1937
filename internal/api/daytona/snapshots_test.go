package daytona_test

import (
	"bufio"
	"cmp"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// snapshotBody is the part of a SnapshotDto tests look at.
type snapshotBody struct {
	ID, Name, State string
	General         bool
	Size            *float64
	ErrorReason     *string
	SourceSandboxID *string `json:"sourceSandboxId"`
}

type snapshotPageBody struct {
	Items                   []snapshotBody
	Total, Page, TotalPages int
}

// uniqueName is a DNS label unique to this run.
func uniqueName(prefix string) string {
	return prefix + "-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
}

// cleanupSnapshot deletes alice's snapshot name when the test ends (after
// the sandboxes it registered later).
func (s *stack) cleanupSnapshot(t *testing.T, name string) {
	t.Cleanup(func() { s.Service.DeleteTemplate(context.Background(), service.Caller{Owner: "alice"}, name) })
}

// getSnapshot answers GET /snapshots/{x} decoded, and the status.
func (s *stack) getSnapshot(t *testing.T, x string) (snapshotBody, int) {
	t.Helper()
	resp := s.do(t, s.User, http.MethodGet, "/snapshots/"+x, nil)
	var d snapshotBody
	if resp.status == http.StatusOK {
		decode(t, resp.body, &d)
	}
	return d, resp.status
}

// waitSnapshot polls GET /snapshots/{name} until it leaves building, as
// the SDK does.
func (s *stack) waitSnapshot(t *testing.T, name string) snapshotBody {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		d, status := s.getSnapshot(t, name)
		if status != http.StatusOK {
			t.Fatalf("GET /snapshots/%s: %d", name, status)
		}
		if d.State != "building" {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %s still building", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSnapshots_SandboxSnapshotCreateFromListGetDelete: createSnapshot
// captures the sandbox's files and answers the sandbox still started;
// the snapshot is listed (and by sourceSandboxId), got by name and id; a
// sandbox created from it sees the file; deleting it while that sandbox
// exists is 409, and after, 200 then 404.
func TestSnapshots_SandboxSnapshotCreateFromListGetDelete(t *testing.T) {
	s := need(t)
	src := s.create(t, s.User, nil)
	if r := execute(t, s, src.ID, map[string]any{"command": "sh -c 'echo captured > /home/daytona/snap.txt'"}); r.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	name := uniqueName("snap")
	resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/snapshot", map[string]string{"name": name})
	var after sandbox
	decode(t, resp.body, &after)
	if resp.status != http.StatusOK || after.ID != src.ID || after.State != "started" {
		t.Fatalf("snapshot: %d %s", resp.status, resp.body)
	}
	s.cleanupSnapshot(t, name)

	byName, status := s.getSnapshot(t, name)
	if status != http.StatusOK || byName.Name != name || byName.State != "active" || byName.SourceSandboxID == nil || *byName.SourceSandboxID != src.ID {
		t.Fatalf("GET by name: %d %+v", status, byName)
	}
	if byID, status := s.getSnapshot(t, byName.ID); status != http.StatusOK || byID.Name != name {
		t.Errorf("GET by id %s: %d %+v", byName.ID, status, byID)
	}
	var page snapshotPageBody
	decode(t, s.do(t, s.User, http.MethodGet, "/snapshots?page=1&limit=200", nil).body, &page)
	if !hasSnapshot(page.Items, name) || !hasSnapshot(page.Items, "base") || page.Page != 1 || page.Total < 2 || page.TotalPages != 1 {
		t.Errorf("list: %+v", page)
	}
	decode(t, s.do(t, s.User, http.MethodGet, "/snapshots?sourceSandboxId="+src.ID, nil).body, &page)
	if len(page.Items) != 1 || page.Items[0].Name != name || page.Total != 1 {
		t.Errorf("list by source: %+v", page)
	}
	// Names are per tenant: the admin token (no tenant) finds it by id only.
	wantError(t, s.do(t, s.Admin, http.MethodGet, "/snapshots/"+name, nil), http.StatusNotFound)
	// A name taken, or not a DNS label, is refused.
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/snapshot", map[string]string{"name": name}), http.StatusConflict)
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/snapshot", map[string]string{"name": "Not_A_Label"}), http.StatusBadRequest)
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/snapshot", map[string]string{"name": "base"}), http.StatusConflict)

	from := s.create(t, s.User, map[string]any{"snapshot": name})
	if r := execute(t, s, from.ID, map[string]any{"command": "cat /home/daytona/snap.txt"}); r.Result != "captured\n" {
		t.Errorf("sandbox from the snapshot reads %+v", r)
	}
	if e := wantError(t, s.do(t, s.User, http.MethodDelete, "/snapshots/"+name, nil), http.StatusConflict); !strings.Contains(e.Message, "in use") {
		t.Errorf("in-use message %q", e.Message)
	}
	if resp := s.do(t, s.User, http.MethodDelete, "/sandbox/"+from.ID, nil); resp.status != http.StatusOK {
		t.Fatalf("delete sandbox: %d %s", resp.status, resp.body)
	}
	if resp := s.do(t, s.User, http.MethodDelete, "/snapshots/"+byName.ID, nil); resp.status != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.User, http.MethodGet, "/snapshots/"+name, nil), http.StatusNotFound)
	wantError(t, s.do(t, s.User, http.MethodDelete, "/snapshots/base", nil), http.StatusForbidden)
}

// TestSnapshots_AdminWithoutOwnerIsRefusedClearly: templates belong to
// a tenant; the admin token and its sandboxes have none, so snapshot,
// fork and build are 403s that say what to use instead.
func TestSnapshots_AdminWithoutOwnerIsRefusedClearly(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	for p, body := range map[string]map[string]any{
		"/sandbox/" + sb.ID + "/snapshot": {"name": uniqueName("adm")},
		"/sandbox/" + sb.ID + "/fork":     {},
		"/snapshots":                      {"name": uniqueName("adm"), "imageName": "sandboxd/base:bookworm"},
	} {
		e := wantError(t, s.do(t, s.Admin, http.MethodPost, p, body), http.StatusForbidden)
		if !strings.Contains(e.Message, "user token") {
			t.Errorf("%s: message %q", p, e.Message)
		}
	}
}

func hasSnapshot(items []snapshotBody, name string) bool {
	for _, it := range items {
		if it.Name == name {
			return true
		}
	}
	return false
}

// TestSnapshots_ForkSeesTheFilesAndIsIndependent: a fork is a new
// started sandbox with the source's files and labels; writes on either
// side stay there. A name for it is refused.
func TestSnapshots_ForkSeesTheFilesAndIsIndependent(t *testing.T) {
	s := need(t)
	src := s.create(t, s.User, map[string]any{"labels": map[string]string{"kind": "source"}})
	if r := execute(t, s, src.ID, map[string]any{"command": "sh -c 'echo before > /home/daytona/f.txt'"}); r.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/fork", map[string]string{"name": "named"}), http.StatusBadRequest)
	resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+src.ID+"/fork", map[string]any{})
	var fork sandbox
	decode(t, resp.body, &fork)
	if resp.status != http.StatusOK || fork.ID == "" || fork.ID == src.ID || fork.State != "started" || fork.ToolboxProxyURL == "" || fork.Labels["kind"] != "source" {
		t.Fatalf("fork: %d %s", resp.status, resp.body)
	}
	t.Cleanup(func() { s.Service.Destroy(context.Background(), service.Caller{Admin: true}, fork.ID) })
	if r := execute(t, s, fork.ID, map[string]any{"command": "cat /home/daytona/f.txt"}); r.Result != "before\n" {
		t.Errorf("fork reads %+v", r)
	}
	execute(t, s, fork.ID, map[string]any{"command": "sh -c 'echo fork > /home/daytona/f.txt'"})
	execute(t, s, src.ID, map[string]any{"command": "sh -c 'echo source > /home/daytona/g.txt'"})
	if r := execute(t, s, src.ID, map[string]any{"command": "cat /home/daytona/f.txt"}); r.Result != "before\n" {
		t.Errorf("the fork's write reached the source: %+v", r)
	}
	if r := execute(t, s, fork.ID, map[string]any{"command": "test -e /home/daytona/g.txt"}); r.ExitCode == 0 {
		t.Errorf("the source's write reached the fork")
	}
	// A fork's capture is not a snapshot.
	var page snapshotPageBody
	decode(t, s.do(t, s.User, http.MethodGet, "/snapshots?sourceSandboxId="+src.ID, nil).body, &page)
	if len(page.Items) != 0 {
		t.Errorf("fork listed as snapshots: %+v", page.Items)
	}
}

// TestSnapshots_DockerfileBuildBecomesActive: POST /snapshots with a
// Dockerfile as Image renders it answers building; the build log streams
// and ends with the build; the snapshot turns active and a sandbox from
// it has the RUN's file and the ENV.
func TestSnapshots_DockerfileBuildBecomesActive(t *testing.T) {
	s := need(t)
	name := uniqueName("built")
	df := "FROM sandboxd/base:bookworm\nRUN echo hi > /built\nENV A=b\nENV SP='x y'\n"
	resp := s.do(t, s.User, http.MethodPost, "/snapshots", map[string]any{
		"name": name, "buildInfo": map[string]any{"contextHashes": []string{}, "dockerfileContent": df},
	})
	var d snapshotBody
	decode(t, resp.body, &d)
	if resp.status != http.StatusOK || d.Name != name || (d.State != "building" && d.State != "active") {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	s.cleanupSnapshot(t, name)

	var u struct{ URL string }
	decode(t, s.do(t, s.User, http.MethodGet, "/snapshots/"+d.ID+"/build-logs-url", nil).body, &u)
	if !strings.HasSuffix(u.URL, "/daytona/api/snapshots/"+d.ID+"/build-logs") {
		t.Fatalf("build-logs-url %q", u.URL)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u.URL+"?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+s.User)
	lresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(lresp.Body)
	for sc.Scan() { // ends when the build does
		log.WriteString(sc.Text() + "\n")
	}
	lresp.Body.Close()
	if !strings.Contains(log.String(), "echo hi > /built") || !strings.Contains(log.String(), "built ") {
		t.Errorf("build log:\n%s", log.String())
	}

	if d = s.waitSnapshot(t, name); d.State != "active" || d.Size == nil {
		t.Fatalf("build ended %+v", d)
	}
	sb := s.create(t, s.User, map[string]any{"snapshot": name})
	if r := execute(t, s, sb.ID, map[string]any{"command": `sh -c 'cat /built; echo "$A|$SP"'`}); r.Result != "hi\nb|x y\n" {
		t.Errorf("sandbox from the build reads %+v", r)
	}
}

// TestSnapshots_RefusedBuildsAre400s: a Dockerfile line the facade does
// not build and a name that is not a DNS label are 400s that say so, an
// image the host lacks from a registry it may not pull from a 403 (the
// test daemon pulls only from 127.0.0.1), and none leaves a snapshot.
func TestSnapshots_RefusedBuildsAre400s(t *testing.T) {
	s := need(t)
	for _, tc := range []struct {
		name   string
		body   map[string]any
		want   string
		status int
	}{
		{"copy", map[string]any{"name": uniqueName("bad"), "buildInfo": map[string]any{"dockerfileContent": "FROM sandboxd/base:bookworm\nCOPY a /a\n"}}, "line 2 (COPY a /a)", 0},
		{"cmd", map[string]any{"name": uniqueName("bad"), "buildInfo": map[string]any{"dockerfileContent": "FROM sandboxd/base:bookworm\nCMD [\"sleep\"]\n"}}, "CMD is not supported", 0},
		{"missing image", map[string]any{"name": uniqueName("bad"), "imageName": "example/no-such-image:1"}, "may pull from", http.StatusForbidden},
		{"missing local image", map[string]any{"name": uniqueName("bad"), "imageName": "sandboxd/no-such-image:1"}, "not present on this host", 0},
		{"not a label", map[string]any{"name": "My_Snapshot", "imageName": "sandboxd/base:bookworm"}, "DNS label", 0},
		{"no image", map[string]any{"name": uniqueName("bad")}, "imageName", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := wantError(t, s.do(t, s.User, http.MethodPost, "/snapshots", tc.body), cmp.Or(tc.status, http.StatusBadRequest))
			if !strings.Contains(e.Message, tc.want) {
				t.Errorf("message %q does not contain %q", e.Message, tc.want)
			}
			if _, status := s.getSnapshot(t, tc.body["name"].(string)); status != http.StatusNotFound {
				t.Errorf("GET after a refused create: %d", status)
			}
		})
	}
}

// TestSnapshots_ImageNameBuildsAnActiveSnapshot: imageName of a local
// image is a snapshot with no steps; create from it works.
func TestSnapshots_ImageNameBuildsAnActiveSnapshot(t *testing.T) {
	s := need(t)
	name := uniqueName("img")
	resp := s.do(t, s.User, http.MethodPost, "/snapshots", map[string]any{"name": name, "imageName": "sandboxd/base:bookworm", "entrypoint": []string{"sleep", "infinity"}})
	if resp.status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	s.cleanupSnapshot(t, name)
	if d := s.waitSnapshot(t, name); d.State != "active" {
		t.Fatalf("build ended %+v", d)
	}
	sb := s.create(t, s.User, map[string]any{"snapshot": name})
	if r := execute(t, s, sb.ID, map[string]any{"command": "true"}); r.ExitCode != 0 {
		t.Errorf("execute: %+v", r)
	}
}
