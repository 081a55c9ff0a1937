package service_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// sh execs a shell line in sandbox id as c and returns its stdout, failing
// the test on an error or a non-zero exit.
func sh(t *testing.T, h *harness, c service.Caller, id, line string) string {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), c, id, service.ExecRequest{Command: line})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", line, id, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q in %s: exit %d, stderr %q", line, id, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// waitBuilt follows a build's log to its end and returns the template and
// the log.
func waitBuilt(t *testing.T, h *harness, c service.Caller, id string) (service.Template, string) {
	t.Helper()
	var log strings.Builder
	if err := h.svc.FollowBuildLog(t.Context(), c, id, func(b []byte) error { log.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	tpl, err := h.svc.GetTemplate(t.Context(), c, id)
	if err != nil {
		t.Fatal(err)
	}
	return tpl, log.String()
}

// A recipe's steps write a file, set env and a workdir, and start a
// server: a sandbox created from the template has the file and the env,
// and its server answers by the time the create does. The same recipe
// again is the same template.
func TestTemplate_BuildThenCreateFromIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	recipe := service.Recipe{
		Name: "web",
		Base: busybox,
		Steps: []service.Step{
			{Workdir: "/srv/www"},
			{Copy: &service.CopyStep{Path: "/srv/www/index.html", Content: []byte("hello from the template\n")}},
			{Env: map[string]string{"GREETING": "built-in"}},
			{Run: `echo "built with $GREETING" > /srv/www/built.txt && echo step-output`},
		},
		StartCmd: "httpd -f -p 8080 -h /srv/www",
		ReadyCmd: "wget -q -O /dev/null http://127.0.0.1:8080/index.html",
	}
	tpl, cached, err := h.svc.BuildTemplate(ctx, alice, recipe)
	if err != nil || cached || tpl.State != store.TemplateBuilding {
		t.Fatalf("build: %+v cached=%v, %v", tpl, cached, err)
	}
	tpl, log := waitBuilt(t, h, alice, tpl.ID)
	if tpl.State != store.TemplateReady || tpl.SizeBytes <= 0 {
		t.Fatalf("the built template: %+v\nlog:\n%s", tpl, log)
	}
	if !strings.Contains(log, "step-output") {
		t.Errorf("the build log lacks the step's output:\n%s", log)
	}
	again, cached, err := h.svc.BuildTemplate(ctx, alice, recipe)
	if err != nil || !cached || again.ID != tpl.ID {
		t.Errorf("the same recipe again: %+v cached=%v, %v; want %s from the cache", again, cached, err, tpl.ID)
	}

	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
	got := sh(t, h, alice, c.ID, `cat /srv/www/built.txt; echo "$GREETING"; wget -q -O- http://127.0.0.1:8080/index.html; echo "token=${SANDBOXD_AGENT_TOKEN-unset}"`)
	if want := "built with built-in\nbuilt-in\nhello from the template\ntoken=unset\n"; got != want {
		t.Errorf("the sandbox made from the template sees %q, want %q", got, want)
	}
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "bob", Template: tpl.ID}); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("bob creates from alice's template: %v, want ErrNotFound", err)
	}
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "bob", Image: "sandboxd/template:" + tpl.ID}); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("bob creates from alice's template's image: %v, want ErrInvalidArgument", err)
	}
}

// A step that fails fails the build, says which step, and leaves no
// image and no build sandbox.
func TestTemplate_FailedStepFailsTheBuild(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	alice := service.Caller{Owner: "alice"}
	tpl, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: busybox, Steps: []service.Step{
		{Run: "echo fine"}, {Run: "wget -q -T 2 -O- http://example.com/ || exit 7"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tpl, log := waitBuilt(t, h, alice, tpl.ID)
	if tpl.State != store.TemplateFailed || !strings.Contains(tpl.Error, "step 2") || !strings.Contains(tpl.Error, "exit code 7") {
		t.Errorf("the failed build: %+v\nlog:\n%s", tpl, log)
	}
	if _, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Template: tpl.ID}); !errors.Is(err, service.ErrConflict) {
		t.Errorf("a create from a failed template: %v, want ErrConflict", err)
	}
	eventually(t, "the build sandbox is destroyed", func() bool { return h.containers(t) == 0 })
}

// A snapshot captures a file written at run time; a sandbox made from it
// has the file and the source's env, but not its secret env or its agent
// token; a template in
// use is not deleted, and is once its sandbox is gone.
func TestSnapshot_CreateFromItAndDeleteInUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox,
		Env: map[string]string{"PLAIN": "source"}, SecretEnv: map[string]string{"SECRET": "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, h, alice, src.ID, "echo written-at-run-time > /root/note")
	snap, err := h.svc.Snapshot(ctx, alice, src.ID, "note", service.SnapshotFiles)
	if err != nil || snap.State != store.TemplateReady || snap.SourceID != src.ID {
		t.Fatalf("snapshot: %+v, %v", snap, err)
	}
	if err := h.svc.Destroy(ctx, admin, src.ID); err != nil {
		t.Fatal(err)
	}

	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: "note"})
	if err != nil {
		t.Fatal(err)
	}
	got := sh(t, h, alice, c.ID, `cat /root/note; echo "${PLAIN-unset} ${SECRET-unset} ${SANDBOXD_AGENT_TOKEN-unset}"`)
	if want := "written-at-run-time\nsource unset unset\n"; got != want {
		t.Errorf("the sandbox made from the snapshot sees %q, want %q", got, want)
	}
	if err := h.svc.DeleteTemplate(ctx, alice, "note"); !errors.Is(err, service.ErrConflict) {
		t.Errorf("delete a snapshot in use: %v, want ErrConflict", err)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DeleteTemplate(ctx, alice, "note"); err != nil {
		t.Fatalf("delete the snapshot no sandbox uses: %v", err)
	}
	if _, err := h.svc.GetTemplate(ctx, alice, snap.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("the deleted snapshot: %v, want ErrNotFound", err)
	}
}

// A fork into 3 gives 3 sandboxes with the source's files, each its own:
// a change in one is seen in no other and not in the source.
func TestFork_IntoThreeIndependentSandboxes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, SecretEnv: map[string]string{"SECRET": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, src.ID) })
	sh(t, h, alice, src.ID, "echo source > /root/state")
	forks, err := h.svc.Fork(ctx, alice, src.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{src.ID: true}
	for _, f := range forks {
		t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, f.ID) })
		if ids[f.ID] {
			t.Fatalf("fork id %s twice", f.ID)
		}
		ids[f.ID] = true
	}
	var wg sync.WaitGroup
	for i, f := range forks {
		wg.Go(func() { sh(t, h, alice, f.ID, "echo fork-"+string(rune('a'+i))+" >> /root/state") })
	}
	wg.Wait()
	for i, f := range forks {
		want := "source\nfork-" + string(rune('a'+i)) + "\n"
		if got := sh(t, h, alice, f.ID, `cat /root/state; [ "$SECRET" = kept ]`); got != want {
			t.Errorf("fork %d sees %q, want %q", i, got, want)
		}
	}
	if got := sh(t, h, alice, src.ID, "cat /root/state"); got != "source\n" {
		t.Errorf("the source sees %q after its forks changed theirs", got)
	}
	if ts, err := h.svc.ListTemplates(ctx, alice); err != nil || len(ts) != 0 {
		t.Errorf("a fork's capture is listed: %+v, %v", ts, err)
	}
}

// Snapshot, pause, resume and destroy racing on one sandbox end in one
// consistent state: the sandbox is gone, and every snapshot that answered
// is ready and makes sandboxes.
func TestSnapshot_RacesPauseResumeAndDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		snaps []service.Template
	)
	for range 3 {
		wg.Go(func() {
			if s, err := h.svc.Snapshot(ctx, alice, src.ID, "", service.SnapshotFiles); err == nil {
				mu.Lock()
				snaps = append(snaps, s)
				mu.Unlock()
			}
		})
		wg.Go(func() { _, _ = h.svc.Pause(ctx, alice, src.ID) })
		wg.Go(func() { _, _ = h.svc.Resume(ctx, alice, src.ID) })
	}
	wg.Go(func() { _ = h.svc.Destroy(ctx, alice, src.ID) })
	wg.Wait()
	_ = h.svc.Destroy(ctx, alice, src.ID) // the destroy may have run first
	if _, err := h.svc.Get(ctx, alice, src.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("the sandbox after the race: %v, want ErrNotFound", err)
	}
	ts, err := h.svc.ListTemplates(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(snaps) {
		t.Errorf("%d snapshots answered, %d listed: %+v", len(snaps), len(ts), ts)
	}
	for _, s := range ts {
		if s.State != store.TemplateReady {
			t.Errorf("snapshot %s is %s after the race", s.ID, s.State)
			continue
		}
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: s.ID})
		if err != nil {
			t.Errorf("create from snapshot %s: %v", s.ID, err)
			continue
		}
		_ = h.svc.Destroy(ctx, admin, c.ID)
	}
}

// A build or capture a dead process left building is failed at the next
// start, its build sandbox destroyed: nothing half-made is listed ready.
func TestTemplate_BuildCutShortIsFailedAtRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	alice := service.Caller{Owner: "alice"}
	tpl, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: busybox, Steps: []service.Step{{Run: "sleep 600"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Its step runs: the build sandbox is made (a restart while it is
	// still being created rolls it back first, and the build fails on
	// that, not on the restart).
	eventually(t, "the build's step runs", func() bool {
		lines, err := h.svc.BuildLogLines(t.Context(), alice, tpl.ID, 0)
		return err == nil && slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "step 1: run") })
	})

	svc2, _, _, _ := restarted(t, h, 0)
	if err := svc2.Reconcile(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	got, err := svc2.GetTemplate(t.Context(), alice, tpl.ID)
	if err != nil || got.State != store.TemplateFailed || !strings.Contains(got.Error, "cut short") {
		t.Errorf("the build cut short, after the restart: %+v, %v", got, err)
	}
	eventually(t, "the build sandbox is destroyed", func() bool { return h.containers(t) == 0 })
}

// A name is a pointer: a build under it takes it once ready, the build it
// pointed to stays by its id until a sweep past the grace finds it unused
// (a sandbox made from it keeps it); tags point where they are put; a
// build of a recipe already built, under an id handed out, is a new
// template of the same image; a third build of an owner's at once waits
// for a slot instead of being refused.
func TestTemplate_NamesMoveTagsPointAndSupersededBuildsAreSwept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	recipe := func(v string) service.Recipe {
		return service.Recipe{Name: "app", Base: busybox, Steps: []service.Step{{Run: "echo " + v + " > /v"}}}
	}
	// Three at once: two run, one waits, and all three end ready.
	var (
		wg   sync.WaitGroup
		tpls [3]service.Template
		logs [3]string
	)
	for i, v := range []string{"v1", "v2", "v3"} {
		r := recipe(v)
		r.Tags = []string{v}
		tpl, _, err := h.svc.BuildTemplate(ctx, alice, r)
		if err != nil {
			t.Fatalf("build %s: %v", v, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tpls[i], logs[i] = waitBuilt(t, h, alice, tpl.ID)
		}()
	}
	wg.Wait()
	waited := 0
	for i, tpl := range tpls {
		if tpl.State != store.TemplateReady {
			t.Fatalf("build %d: %+v\n%s", i, tpl, logs[i])
		}
		if strings.Contains(logs[i], "waiting for a build slot") {
			waited++
		}
	}
	if waited == 0 {
		t.Errorf("no build of three waited for a slot (at most two of an owner's run at once)")
	}
	for i, v := range []string{"v1", "v2", "v3"} {
		got, err := h.svc.GetTemplate(ctx, alice, "app:"+v)
		if err != nil || got.ID != tpls[i].ID {
			t.Errorf("app:%s = %+v, %v; want %s", v, got, err, tpls[i].ID)
		}
	}
	if _, err := h.svc.GetTemplate(ctx, alice, "app"); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("app (latest) with only v1..v3 tagged: %v, want ErrNotFound", err)
	}
	if _, err := h.svc.TagTemplate(ctx, alice, "app:v1", "app", []string{"latest", "prod"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.svc.GetTemplate(ctx, alice, "app"); got.ID != tpls[0].ID || !slices.Equal(got.Tags, []string{"app:latest", "app:prod", "app:v1"}) {
		t.Errorf("app after tagging v1 latest and prod: %+v", got)
	}

	// v1's recipe again, under an id an edge handed out: ready at once,
	// the same image, and it takes v1's tags.
	r := recipe("v1")
	r.ID, r.Tags = service.NewTemplateID(), []string{"latest", "v1"}
	copied, cached, err := h.svc.BuildTemplate(ctx, alice, r)
	if err != nil || !cached || copied.ID != r.ID || copied.State != store.TemplateReady {
		t.Fatalf("the cached recipe under a new id: %+v cached=%v, %v", copied, cached, err)
	}
	if again, cached, err := h.svc.BuildTemplate(ctx, alice, r); err != nil || !cached || again.ID != r.ID {
		t.Errorf("the same id again (a retry): %+v cached=%v, %v", again, cached, err)
	}
	// v2 is in use by a sandbox; v1 and v3 lose their last tags.
	used, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: "app:v2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, h, alice, used.ID, "cat /v"); got != "v2\n" {
		t.Errorf("a sandbox of app:v2 reads %q", got)
	}
	if err := h.svc.UntagTemplate(ctx, alice, "app", []string{"v2", "v3", "prod"}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(11 * time.Minute)
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		kept bool
	}{{tpls[0].ID, false}, {tpls[1].ID, true}, {tpls[2].ID, false}, {copied.ID, true}} {
		_, err := h.svc.GetTemplate(ctx, admin, c.id)
		if kept := err == nil; kept != c.kept {
			t.Errorf("after the sweep, %s kept=%v (%v), want %v", c.id, kept, err, c.kept)
		}
	}
	if got := sh(t, h, alice, used.ID, "cat /v"); got != "v2\n" {
		t.Errorf("the sandbox of the swept-around v2 reads %q", got)
	}
	fromCopy, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: "app"})
	if err != nil {
		t.Fatalf("create from the copy once the build it copied is swept: %v", err)
	}
	if got := sh(t, h, alice, fromCopy.ID, "cat /v"); got != "v1\n" {
		t.Errorf("a sandbox of the copy reads %q", got)
	}
	for _, id := range []string{used.ID, fromCopy.ID} {
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{tpls[1].ID, copied.ID} {
		if err := h.svc.DeleteTemplate(ctx, admin, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}

// Copy steps: many files (more than the other steps' bound), a mode and a
// symbolic link all land as written.
func TestTemplate_CopyStepsFilesModesAndLinks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	alice := service.Caller{Owner: "alice"}
	var steps []service.Step
	for i := range 100 {
		steps = append(steps, service.Step{Copy: &service.CopyStep{Path: fmt.Sprintf("/data/f%03d", i), Content: []byte(strconv.Itoa(i))}})
	}
	steps = append(steps,
		service.Step{Copy: &service.CopyStep{Path: "/data/run.sh", Content: []byte("#!/bin/sh\necho ran\n"), Mode: 0o750}},
		service.Step{Copy: &service.CopyStep{Path: "/data/sub/latest", Link: "../f099"}},
		service.Step{Copy: &service.CopyStep{Path: "/data/owned", Content: []byte("o"), Owner: "nobody"}},
		service.Step{Run: "id -un > /tmp/whoami-run; touch /tmp/run-as-step", User: "nobody"},
		service.Step{Run: "id -un > /data/whoami-next"})
	tpl, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: busybox, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, log := waitBuilt(t, h, alice, tpl.ID); tpl.State != store.TemplateReady || tpl.User != "" {
		t.Fatalf("build (a run step's user is not the template's): %+v\n%s", tpl, log)
	}
	t.Cleanup(func() { _ = h.svc.DeleteTemplate(context.WithoutCancel(t.Context()), admin, tpl.ID) })
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Template: tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(t.Context()), admin, c.ID) })
	got := sh(t, h, alice, c.ID, `ls /data | wc -l; cat /data/f042; echo; /data/run.sh; stat -c %a /data/run.sh; cat /data/sub/latest; echo; readlink /data/sub/latest; stat -c %U /data/owned; cat /tmp/whoami-run /data/whoami-next`)
	if want := "104\n42\nran\n750\n99\n../f099\nnobody\nnobody\nroot\n"; got != want {
		t.Errorf("the sandbox sees %q, want %q", got, want)
	}
	if _, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: busybox, Steps: []service.Step{
		{Copy: &service.CopyStep{Path: "/x", Link: "y", Content: []byte("z")}},
	}}); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("a link with content: %v, want ErrInvalidArgument", err)
	}
}

// A build's sandbox counts against its owner's quota from its request to
// its end: with the owner's one sandbox running a build is refused with
// the quota's error; with it gone the build runs, and while it runs a
// create is refused; once it ended, the create goes through.
func TestTemplate_BuildCountsAgainstTheQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice", Quota: service.Quota{Sandboxes: 1}}
	create := func() (*service.Created, error) {
		return h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: alice.Owner, Image: busybox, Quota: alice.Quota})
	}
	sb, err := create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, sb.ID) })
	recipe := service.Recipe{Base: busybox, Steps: []service.Step{{Run: "sleep 15"}}}
	if tpl, _, err := h.svc.BuildTemplate(ctx, alice, recipe); !errors.Is(err, service.ErrQuotaExceeded) {
		t.Fatalf("a build while the owner's one sandbox runs: %+v, %v; want ErrQuotaExceeded", tpl, err)
	}
	if err := h.svc.Destroy(ctx, alice, sb.ID); err != nil {
		t.Fatal(err)
	}

	tpl, _, err := h.svc.BuildTemplate(ctx, alice, recipe)
	if err != nil {
		t.Fatalf("the build once the sandbox is gone: %v", err)
	}
	eventually(t, "the build sandbox runs", func() bool { return h.containers(t) == 1 })
	if sb, err := create(); !errors.Is(err, service.ErrQuotaExceeded) {
		if err == nil {
			_ = h.svc.Destroy(context.WithoutCancel(ctx), admin, sb.ID)
		}
		t.Errorf("a create while the owner's build runs: %v; want ErrQuotaExceeded", err)
	}
	if got, log := waitBuilt(t, h, alice, tpl.ID); got.State != store.TemplateReady {
		t.Fatalf("the build: %+v\n%s", got, log)
	}
	sb, err = create()
	if err != nil {
		t.Fatalf("a create once the build ended: %v", err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, sb.ID) })
}

// A relative workdir step before any absolute one is under the base
// image's working directory (sandboxd/base's is /home/user), as Docker's
// WORKDIR: run and copy steps and the start command run there, and a
// later relative one is under it (before: refused, or taken under /). One
// that climbs into /proc is refused before the build.
func TestTemplate_RelativeWorkdirIsUnderTheBaseImages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	alice := service.Caller{Owner: "alice"}
	tpl, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: base, Steps: []service.Step{
		{Workdir: "app"},
		{Run: "pwd > /tmp/pwd-app"},
		{Copy: &service.CopyStep{Path: "rel.txt", Content: []byte("here")}},
		{Workdir: "sub"},
		{Run: "pwd > /tmp/pwd-sub"},
	}, StartCmd: "pwd > /tmp/pwd-start; exec sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, log := waitBuilt(t, h, alice, tpl.ID); tpl.State != store.TemplateReady {
		t.Fatalf("build: %+v\n%s", tpl, log)
	}
	t.Cleanup(func() { _ = h.svc.DeleteTemplate(context.WithoutCancel(t.Context()), admin, tpl.ID) })
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Template: tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(t.Context()), admin, c.ID) })
	eventually(t, "the start command wrote its working directory", func() bool {
		res, err := h.svc.Exec(t.Context(), alice, c.ID, service.ExecRequest{Command: "test -s /tmp/pwd-start"})
		return err == nil && res.ExitCode == 0
	})
	got := sh(t, h, alice, c.ID, `cat /tmp/pwd-app /tmp/pwd-sub /home/user/app/rel.txt; echo; cat /tmp/pwd-start`)
	if want := "/home/user/app\n/home/user/app/sub\nhere\n/home/user/app/sub\n"; got != want {
		t.Errorf("the sandbox sees %q, want %q", got, want)
	}
	if _, _, err := h.svc.BuildTemplate(t.Context(), alice, service.Recipe{Base: busybox, Steps: []service.Step{
		{Workdir: "../../proc/self"},
	}}); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("a relative workdir into /proc: %v, want ErrInvalidArgument", err)
	}
}
