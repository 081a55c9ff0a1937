package e2b_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

// snapshotInfo is SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// exec runs a shell line as user in sandbox id and returns its stdout,
// failing the test on a non-zero exit.
func (h *harness) exec(t *testing.T, id, command string) string {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), service.Caller{Admin: true}, id, service.ExecRequest{Command: command, User: "user"})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: exit %d, stderr %s", command, id, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// snapshot takes a snapshot of sandbox id through the facade (the
// harness removes its image when the test ends).
func (h *harness) snapshot(t *testing.T, id string, body map[string]any) snapshotInfo {
	t.Helper()
	resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+id+"/snapshots", body)
	if resp.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", resp.status, resp.body)
	}
	var s snapshotInfo
	decode(t, resp.body, &s)
	return s
}

func TestSnapshot_CreateFromItsIDSeesTheFile(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	src := h.create(t, map[string]any{"templateID": "base"})
	h.exec(t, src.SandboxID, "echo hello > /home/user/hello.txt")

	snap := h.snapshot(t, src.SandboxID, map[string]any{"name": "snap-a"})
	if !strings.HasPrefix(snap.SnapshotID, "tpl-") || !slices.Equal(snap.Names, []string{"snap-a"}) {
		t.Fatalf("snapshot answered %+v, want a tpl- id and names [snap-a]", snap)
	}
	// By id, by name, and with the default tag E2B's ids carry.
	for _, templateID := range []string{snap.SnapshotID, "snap-a", snap.SnapshotID + ":default"} {
		c := h.create(t, map[string]any{"templateID": templateID})
		if c.TemplateID != templateID {
			t.Errorf("created from %q: templateID %q", templateID, c.TemplateID)
		}
		if got := h.exec(t, c.SandboxID, "cat /home/user/hello.txt"); got != "hello\n" {
			t.Errorf("created from %q: the file holds %q, want hello", templateID, got)
		}
		sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, c.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if got := sb.Annotations["e2b.user"]; got != "user" {
			t.Errorf("created from %q: envd's default user %q, want the source's (user)", templateID, got)
		}
	}
	// A built-in's name is refused as a snapshot's: create would never reach it.
	wantError(t, h.do(t, h.admin, http.MethodPost, "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{"name": "base"}), http.StatusBadRequest)
	// Another owner sees none of it: its create falls back to an image of that name.
	wantError(t, h.do(t, h.user, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "snap-a"}), http.StatusNotFound)
}

func TestSnapshots_ListFiltersAndPages(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	a := h.create(t, map[string]any{"templateID": "base"})
	b := h.create(t, map[string]any{"templateID": "base"})
	sa1 := h.snapshot(t, a.SandboxID, nil)
	sa2 := h.snapshot(t, a.SandboxID, map[string]any{"name": "a-two"})
	sb := h.snapshot(t, b.SandboxID, nil)

	list := func(query url.Values) ([]snapshotInfo, string) {
		t.Helper()
		resp := h.do(t, h.admin, http.MethodGet, "/snapshots?"+query.Encode(), nil)
		if resp.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", query.Encode(), resp.status, resp.body)
		}
		var out []snapshotInfo
		decode(t, resp.body, &out)
		return out, resp.header.Get("X-Next-Token")
	}
	ids := func(ss []snapshotInfo) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.SnapshotID)
		}
		slices.Sort(out)
		return out
	}

	got, next := list(url.Values{"sandboxID": {a.SandboxID}})
	want := []string{sa1.SnapshotID, sa2.SnapshotID}
	slices.Sort(want)
	if diff := cmp.Diff(want, ids(got)); diff != "" || next != "" {
		t.Errorf("sandboxID filter (-want +got):\n%s next %q", diff, next)
	}
	if got, _ := list(url.Values{"name": {"a-two:default"}}); len(got) != 1 || got[0].SnapshotID != sa2.SnapshotID {
		t.Errorf("name filter: %+v, want only %s", got, sa2.SnapshotID)
	}

	// Pages of one: every snapshot once, then no token.
	var paged []snapshotInfo
	q := url.Values{"limit": {"1"}}
	for range 10 {
		page, next := list(q)
		paged = append(paged, page...)
		if next == "" {
			break
		}
		q.Set("nextToken", next)
	}
	want = []string{sa1.SnapshotID, sa2.SnapshotID, sb.SnapshotID}
	slices.Sort(want)
	if diff := cmp.Diff(want, ids(paged)); diff != "" {
		t.Errorf("paged (-want +got):\n%s", diff)
	}
	wantError(t, h.do(t, h.admin, http.MethodGet, "/snapshots?nextToken=%21", nil), http.StatusBadRequest)
	// A fork's capture is not a snapshot.
	h.fork(t, b.SandboxID, map[string]any{"count": 1})
	if got, _ := list(url.Values{"sandboxID": {b.SandboxID}}); len(got) != 1 {
		t.Errorf("after a fork, the source's snapshots are %+v, want only %s", got, sb.SnapshotID)
	}
}

func TestDeleteSnapshot_TwiceIsNotFound(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	src := h.create(t, map[string]any{"templateID": "base"})
	snap := h.snapshot(t, src.SandboxID, nil)
	if resp := h.do(t, h.admin, http.MethodDelete, "/templates/"+snap.SnapshotID+"%3Adefault", nil); resp.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	wantError(t, h.do(t, h.admin, http.MethodDelete, "/templates/"+snap.SnapshotID, nil), http.StatusNotFound)
	wantError(t, h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": snap.SnapshotID}), http.StatusNotFound)
}

func TestDeleteSnapshot_InUseIsConflict(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	src := h.create(t, map[string]any{"templateID": "base"})
	snap := h.snapshot(t, src.SandboxID, nil)
	c := h.create(t, map[string]any{"templateID": snap.SnapshotID})
	resp := h.do(t, h.admin, http.MethodDelete, "/templates/"+snap.SnapshotID, nil)
	wantError(t, resp, http.StatusConflict)
	if !strings.Contains(string(resp.body), "in use") {
		t.Errorf("409 body %s does not say it is in use", resp.body)
	}
	if resp := h.do(t, h.admin, http.MethodDelete, "/sandboxes/"+c.SandboxID, nil); resp.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", resp.status, resp.body)
	}
	if resp := h.do(t, h.admin, http.MethodDelete, "/templates/"+snap.SnapshotID, nil); resp.status != http.StatusNoContent {
		t.Fatalf("delete once unused: %d %s", resp.status, resp.body)
	}
}

// forkResult is SandboxForkResult.
type forkResult struct {
	Sandbox *created `json:"sandbox"`
	Error   any      `json:"error"`
}

// fork forks sandbox id through the facade, registers the forks' kills and
// returns them.
func (h *harness) fork(t *testing.T, id string, body map[string]any) []created {
	t.Helper()
	resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+id+"/fork", body)
	if resp.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", resp.status, resp.body)
	}
	var results []forkResult
	decode(t, resp.body, &results)
	var out []created
	for i, r := range results {
		if r.Sandbox == nil || r.Error != nil {
			t.Fatalf("fork result %d: %s", i, resp.body)
		}
		h.cleanup(t, r.Sandbox.SandboxID)
		out = append(out, *r.Sandbox)
	}
	return out
}

func TestFork_TwoRunningWithTheSourcesFiles(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	src := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"team": "compat"}})
	h.exec(t, src.SandboxID, "echo from-source > /home/user/f.txt")

	forks := h.fork(t, src.SandboxID, map[string]any{"count": 2, "timeout": 60})
	if len(forks) != 2 || forks[0].SandboxID == forks[1].SandboxID {
		t.Fatalf("forks %+v, want two distinct sandboxes", forks)
	}
	for i, fk := range forks {
		if fk.TemplateID != "base" || fk.EnvdAccessToken == "" || fk.EnvdVersion == "" || fk.Domain == nil || fk.SandboxID == src.SandboxID {
			t.Errorf("fork %d answered %+v, want the create answer with the source's template", i, fk)
		}
		sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, fk.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != service.StateRunning || sb.Tags["team"] != "compat" || sb.Annotations["e2b.user"] != "user" {
			t.Errorf("fork %d: state %s, tags %v, annotations %v; want running with the source's", i, sb.State, sb.Tags, sb.Annotations)
		}
		if d := sb.ExpiresAt.Sub(h.clock.Now()); d < 50*time.Second || d > 60*time.Second {
			t.Errorf("fork %d expires %v from now, want about the 60 s asked", i, d)
		}
		if got := h.exec(t, fk.SandboxID, "cat /home/user/f.txt"); got != "from-source\n" {
			t.Errorf("fork %d reads %q, want the source's file", i, got)
		}
	}
	// Independent: a write in one is in neither the other nor the source.
	h.exec(t, forks[0].SandboxID, "echo changed > /home/user/f.txt")
	for _, id := range []string{forks[1].SandboxID, src.SandboxID} {
		if got := h.exec(t, id, "cat /home/user/f.txt"); got != "from-source\n" {
			t.Errorf("%s reads %q after a write in another fork", id, got)
		}
	}
	// Without a timeout, a fork lives E2B's default 15 s.
	fk := h.fork(t, src.SandboxID, nil)[0]
	sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, fk.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if d := sb.ExpiresAt.Sub(h.clock.Now()); d < 5*time.Second || d > 15*time.Second {
		t.Errorf("default fork expires %v from now, want about 15 s", d)
	}
}

func TestFork_MissingSourceIsHTTP404(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	wantError(t, h.do(t, h.admin, http.MethodPost, "/sandboxes/sb-00000000deadbeef/fork", map[string]any{"count": 2}), http.StatusNotFound)
}

func TestFork_BadCountIs400(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	src := h.create(t, map[string]any{"templateID": "base"})
	before := h.containers(t)
	for _, n := range []int{0, 17, -1} {
		wantError(t, h.do(t, h.admin, http.MethodPost, "/sandboxes/"+src.SandboxID+"/fork", map[string]any{"count": n}), http.StatusBadRequest)
	}
	if got := h.containers(t); got != before {
		t.Errorf("%d containers after refused forks, want %d", got, before)
	}
}

// TestSnapshot_CreateFromItWhileThePoolHoldsABaseSandbox: an idle pooled
// sandbox of the default image is not what a create from a snapshot gets
// (the default image is what the request's class looks like before its
// template is resolved).
func TestSnapshot_CreateFromItWhileThePoolHoldsABaseSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{realClock: true})
	src := h.create(t, map[string]any{"templateID": "base"})
	h.exec(t, src.SandboxID, "echo pooled > /home/user/p.txt")
	snap := h.snapshot(t, src.SandboxID, nil)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.svc.RunBackground(ctx, time.Hour, time.Hour)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		h.svc.DrainPool(dctx)
	})
	if _, err := h.svc.SetPool(t.Context(), []service.PoolTarget{{PoolClass: service.PoolClass{Image: "sandboxd/base:bookworm"}, Size: 1}}); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		n := 0
		for _, st := range h.svc.PoolStatus() {
			n += st.Ready
		}
		return n == 1
	}
	for deadline := time.Now().Add(time.Minute); !ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not fill within a minute")
		}
	}

	c := h.create(t, map[string]any{"templateID": snap.SnapshotID})
	if got := h.exec(t, c.SandboxID, "cat /home/user/p.txt 2>&1 || true"); got != "pooled\n" {
		t.Errorf("created from the snapshot with a pooled base sandbox idle: the file holds %q, want pooled", got)
	}
	if !ready() {
		t.Error("the create from a snapshot took the pool's idle base sandbox")
	}
}
