package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

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
	snap, err := h.svc.Snapshot(ctx, alice, src.ID, "note")
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
			if s, err := h.svc.Snapshot(ctx, alice, src.ID, ""); err == nil {
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
	eventually(t, "the build sandbox runs", func() bool { return h.containers(t) == 1 })

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
