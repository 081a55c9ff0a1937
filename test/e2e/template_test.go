package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// A daemon killed (SIGKILL) in the middle of a template build and of a
// snapshot leaves nothing half made that is listed ready: after the
// restart the build is failed with its reason, a capture cut short is
// gone, their images are removed and the build's sandbox is destroyed;
// a snapshot that answered before the kill still makes sandboxes.
func TestTemplate_KillMidBuildAndMidSnapshot(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "template", "--pool", "none")
	c := newClient(d, false)

	// Mid-build: a step that outlives the daemon.
	tpl, err := c.BuildTemplate(ctx, sandboxd.Recipe{Name: "slow", Base: busyboxImage, Steps: []sandboxd.Step{{Run: "echo started; sleep 600"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		var log strings.Builder
		lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_ = c.TemplateLogs(lctx, tpl.ID, &log) // ends with the context: the build runs on
		if !strings.Contains(log.String(), "started") {
			return errors.New("the build's step has not started")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A snapshot that answers before the kill, and one the kill may cut
	// short (a sandbox with 64 MB written takes a while to capture).
	src := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	if _, err := c.Exec(ctx, src.ID, sandboxd.ExecRequest{Command: "echo kept > /root/kept && head -c 67108864 /dev/urandom > /root/big"}); err != nil {
		t.Fatal(err)
	}
	done, err := c.Snapshot(ctx, src.ID, "done")
	if err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		_, _ = c.Snapshot(ctx, src.ID, "cut") // may answer, may be cut short
	}()
	// Kill once the capture has begun (its template is listed) or ended.
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		select {
		case <-cut:
			return nil
		default:
		}
		ts, err := c.ListTemplates(ctx)
		if err != nil {
			return err
		}
		for _, x := range ts {
			if x.Name == "cut" {
				return nil
			}
		}
		return errors.New("the second capture has not begun")
	}); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	<-cut

	if err := d.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	c = newClient(d, false)
	ts, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sandboxd.Template{}
	for _, x := range ts {
		byName[x.Name] = x
		if x.State == sandboxd.TemplateBuilding {
			t.Errorf("template %s (%s) is still building after the restart", x.ID, x.Name)
		}
	}
	if got := byName["slow"]; got.State != sandboxd.TemplateFailed || !strings.Contains(got.Error, "cut short") {
		t.Errorf("the build the kill cut short: %+v", got)
	}
	if got := byName["done"]; got.ID != done.ID || got.State != sandboxd.TemplateReady {
		t.Errorf("the snapshot answered before the kill: %+v", got)
	}
	for _, name := range []string{"done", "cut"} {
		x, ok := byName[name]
		if !ok {
			continue // "cut" was cut short: gone
		}
		if x.State != sandboxd.TemplateReady {
			t.Errorf("snapshot %q is %s after the restart, want ready or gone", name, x.State)
			continue
		}
		sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Template: x.ID})
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /root/kept"})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "kept" {
			t.Errorf("a sandbox from snapshot %q: %+v, %v", name, res, err)
		}
	}
	images, err := docker(ctx, "images", "--format", "{{.Repository}}:{{.Tag}}", "sandboxd/template")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range strings.Fields(images) {
		id := strings.TrimPrefix(ref, "sandboxd/template:")
		if id == byName["slow"].ID {
			t.Errorf("the failed build's image %s is still there", ref)
		}
	}
	// The build's sandbox is gone: the node runs the source and the
	// sandboxes made from the snapshots, nothing else.
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		ours, err := nodeContainers(ctx, d.NodeID())
		if err != nil {
			return err
		}
		rows, err := listAll(ctx, c, sandboxd.ListOptions{})
		if err != nil {
			return err
		}
		if len(ours) != len(rows) {
			return fmt.Errorf("the node runs %d containers for %d sandboxes", len(ours), len(rows))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	for _, x := range ts {
		if x.State == sandboxd.TemplateReady {
			t.Cleanup(func() { _ = newClient(d, false).DeleteTemplate(context.Background(), x.ID) })
		}
	}
}
