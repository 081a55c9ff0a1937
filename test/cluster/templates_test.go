package cluster_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

type template struct {
	ID    string   `json:"id"`
	State string   `json:"state"`
	Tags  []string `json:"tags"`
	Error string   `json:"error"`
}

// getTemplate reads template ref through d.
func getTemplate(ctx context.Context, d *daemontest.Daemon, ref string) (template, answer, error) {
	a, err := call(ctx, d, http.MethodGet, "/v1/templates/"+ref, nil)
	var tp template
	if err == nil && a.Status == http.StatusOK {
		err = json.Unmarshal(a.Body, &tp)
	}
	return tp, a, err
}

// copyRef is the engine reference node gives its copy of another node's
// template id (the service's copyRef).
func copyRef(node, id string) string {
	h := sha256.Sum256([]byte(node))
	return "sandboxd/template:" + id + ".n" + hex.EncodeToString(h[:4])
}

// A template built on one node is every node's: the others see it, its
// tags and its deletion at once; a create on another node pulls its image
// from the cluster's registry (with the registry's password) and runs
// from it; it is not deleted, through any node, while a sandbox made
// from it lives anywhere; and once deleted, the copies go from every
// node, images included.
func TestCluster_TemplateBuiltOnOneNodeCreatesOnAnother(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	if env.registry == nil {
		t.Skip("the shared cluster has no template registry (" + cmp.Or(registrytest.Available(), "LAN pass") + ")")
	}
	ctx := testContext(t, 8*time.Minute)
	maker, user, other := c.Nodes[0], c.Nodes[2], c.Nodes[1]
	name := randomName("shared")
	marker := randomName("built")

	a, err := call(ctx, maker, http.MethodPost, "/v1/templates", map[string]any{
		"name": name, "base": busyboxImage,
		"steps": []map[string]any{{"run": "echo " + marker + " > /marker"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusAccepted {
		t.Fatalf("build on %s: %v, want 202", maker.NodeID(), a)
	}
	var built template
	if err := json.Unmarshal(a.Body, &built); err != nil {
		t.Fatal(err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = call(ctx, maker, http.MethodDelete, "/v1/templates/"+built.ID, nil)
		}
	})
	var tp template
	if err := testenv.Poll(ctx, 5*time.Minute, func() error {
		var a answer
		tp, a, err = getTemplate(ctx, maker, built.ID)
		switch {
		case err != nil:
			return err
		case tp.State != "ready" && tp.State != "failed":
			return fmt.Errorf("build %s: %v", built.ID, a)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if tp.State == "failed" {
		t.Fatalf("the build failed: %s", tp.Error)
	}

	// Pushed before it was ready.
	status, digest, err := env.registry.Manifest(ctx, "sandboxd/templates", built.ID)
	if err != nil || status != http.StatusOK || digest == "" {
		t.Fatalf("the registry's manifest of %s: %d %q %v, want 200 and a digest", built.ID, status, digest, err)
	}

	// Every node knows it by name the moment its maker says it is ready.
	for _, d := range c.Nodes {
		tp, a, err := getTemplate(ctx, d, name)
		if err != nil || tp.ID != built.ID {
			t.Fatalf("GET /v1/templates/%s through %s: %v %v, want %s", name, d.NodeID(), a, err, built.ID)
		}
	}

	// Creates on another node (their volumes pin them there) pull the
	// image once, however many come at once, and run from it.
	before := manifestGets()
	const n = 3
	made := make([]sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := call(ctx, user, http.MethodPost, "/v1/sandboxes", map[string]any{
				"template": name, "cpu": 0.25, "memory_mb": 128,
				"mounts": []map[string]any{{"volume": randomName("v"), "path": "/mnt/v"}},
			})
			switch {
			case err != nil:
				errs[i] = err
			case a.Status != http.StatusCreated:
				errs[i] = fmt.Errorf("create %d through %s: %v", i, user.NodeID(), a)
			default:
				errs[i] = json.Unmarshal(a.Body, &made[i])
			}
		})
	}
	wg.Wait()
	for i, sb := range made {
		if sb.ID != "" {
			destroyAtEnd(t, c, sb.ID)
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	for _, sb := range made {
		if owner := ownerOf(ctx, t, c, sb.ID); owner.NodeID() != user.NodeID() {
			t.Fatalf("sandbox %s runs on %s, want %s (its volume's node)", sb.ID, owner.NodeID(), user.NodeID())
		}
		out, err := sh(ctx, user, sb.ID, "cat /marker")
		if err != nil || strings.TrimSpace(out) != marker {
			t.Fatalf("cat /marker in %s: %q %v, want %q", sb.ID, out, err, marker)
		}
	}
	if got := manifestGets(); got <= before {
		t.Errorf("the registry served no manifest of the template to %s (requests %d → %d)", user.NodeID(), before, got)
	}
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", copyRef(user.NodeID(), built.ID)); err != nil {
		t.Errorf("%s has no image of its copy: %v", user.NodeID(), err)
	}
	// The registry holds every tenant's templates: no tenant's create
	// pulls from it.
	if a, err := call(ctx, user, http.MethodPost, "/v1/sandboxes", map[string]any{
		"image": env.registry.Host + "/sandboxd/templates:" + built.ID, "mounts": []map[string]any{{"volume": randomName("v"), "path": "/mnt/v"}},
	}); err != nil || a.Status == http.StatusCreated {
		t.Errorf("a create of the registry's template image: %v %v, want a refusal", a, err)
	}
	sb := made[0]

	// A build over it on the third node, which has no copy yet, pulls it.
	a, err = call(ctx, other, http.MethodPost, "/v1/templates", map[string]any{
		"name": name + "-derived", "from_template": name, "steps": []map[string]any{{"run": "cat /marker > /derived"}},
	})
	if err != nil || a.Status != http.StatusAccepted {
		t.Fatalf("a build from %s on %s: %v %v, want 202", name, other.NodeID(), a, err)
	}
	var derived template
	if err := json.Unmarshal(a.Body, &derived); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(ctx, 5*time.Minute, func() error {
		got, a, err := getTemplate(ctx, other, derived.ID)
		if err != nil || (got.State != "ready" && got.State != "failed") {
			return fmt.Errorf("build %s: %v %v", derived.ID, a, err)
		}
		derived = got
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if derived.State != "ready" {
		t.Fatalf("the build from another node's template failed: %s", derived.Error)
	}
	if a, err := call(ctx, other, http.MethodDelete, "/v1/templates/"+derived.ID, nil); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("delete the derived template: %v %v", a, err)
	}

	// In use on one node: a delete through any node is refused.
	for _, d := range c.Nodes {
		a, err := call(ctx, d, http.MethodDelete, "/v1/templates/"+name, nil)
		if err != nil || a.Status != http.StatusConflict {
			t.Fatalf("DELETE through %s while %s uses it: %v %v, want 409", d.NodeID(), sb.ID, a, err)
		}
	}
	for _, sb := range made {
		if a, err := call(ctx, user, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil); err != nil || a.Status != http.StatusNoContent {
			t.Fatalf("destroy %s: %v %v", sb.ID, a, err)
		}
	}

	// Deleted through the third node: gone everywhere, copies and all.
	if a, err := call(ctx, other, http.MethodDelete, "/v1/templates/"+built.ID, nil); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("DELETE through %s: %v %v, want 204", other.NodeID(), a, err)
	}
	deleted = true
	for _, d := range c.Nodes {
		if err := testenv.Poll(ctx, testenv.Deadline, func() error {
			if _, a, err := getTemplate(ctx, d, built.ID); err != nil || a.Status != http.StatusNotFound {
				return fmt.Errorf("GET through %s after the delete: %v %v, want 404", d.NodeID(), a, err)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		if _, err := docker(ctx, "image", "inspect", copyRef(user.NodeID(), built.ID)); err == nil {
			return fmt.Errorf("%s still has the image of its copy", user.NodeID())
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// And the registry no longer serves it.
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		if status, _, err := env.registry.Manifest(ctx, "sandboxd/templates", digest); err != nil || status != http.StatusNotFound {
			return fmt.Errorf("the registry's manifest %s after the delete: %d %v, want 404", digest, status, err)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// manifestGets counts the manifest reads of the cluster's template
// repository the registry answered (a pull reads one by digest).
func manifestGets() int {
	n := 0
	for _, r := range env.registry.Requests() {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.Path, "/v2/sandboxd/templates/manifests/") {
			n++
		}
	}
	return n
}

// buildTemplate builds a busybox template named name through d that
// writes marker to /marker, waits until it is ready or failed, and deletes
// it at the end of t.
func buildTemplate(ctx context.Context, t *testing.T, d *daemontest.Daemon, name, marker string) template {
	t.Helper()
	a, err := call(ctx, d, http.MethodPost, "/v1/templates", map[string]any{
		"name": name, "base": busyboxImage,
		"steps": []map[string]any{{"run": "echo " + marker + " > /marker"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusAccepted {
		t.Fatalf("build on %s: %v, want 202", d.NodeID(), a)
	}
	var tp template
	if err := json.Unmarshal(a.Body, &tp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = call(ctx, d, http.MethodDelete, "/v1/templates/"+tp.ID, nil)
	})
	if err := testenv.Poll(ctx, 5*time.Minute, func() error {
		got, a, err := getTemplate(ctx, d, tp.ID)
		switch {
		case err != nil:
			return err
		case got.State != "ready" && got.State != "failed":
			return fmt.Errorf("build %s: %v", tp.ID, a)
		}
		tp = got
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if tp.State == "failed" {
		t.Fatalf("the build failed: %s", tp.Error)
	}
	return tp
}

// A template made while the cluster's registry is down is not lost: it is
// ready on its node at once, and shared with the others once the registry
// is back (the nodes' periodic pass publishes it). (Not parallel: it stops
// the registry the parallel template tests use.)
func TestCluster_TemplateMadeWhileTheRegistryIsDownIsSharedLater(t *testing.T) {
	c := sharedCluster(t)
	if env.registry == nil {
		t.Skip("the shared cluster has no template registry (" + cmp.Or(registrytest.Available(), "LAN pass") + ")")
	}
	ctx := testContext(t, 8*time.Minute)
	maker, other := c.Nodes[0], c.Nodes[1]
	env.registry.Stop()
	t.Cleanup(func() {
		if err := env.registry.Start(); err != nil {
			t.Errorf("start the registry again: %v", err)
		}
	})
	name, marker := randomName("late"), randomName("built")
	tp := buildTemplate(ctx, t, maker, name, marker)
	if _, a, err := getTemplate(ctx, other, tp.ID); err != nil || a.Status != http.StatusNotFound {
		t.Fatalf("GET through %s while the registry is down: %v %v, want 404 (not shared yet)", other.NodeID(), a, err)
	}
	if err := env.registry.Start(); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(ctx, 3*time.Minute, func() error {
		if got, a, err := getTemplate(ctx, other, name); err != nil || got.ID != tp.ID {
			return fmt.Errorf("GET %s through %s: %v %v, want %s", name, other.NodeID(), a, err, tp.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sb := create(ctx, t, c, other, map[string]any{
		"template": name, "cpu": 0.25, "memory_mb": 128,
		"mounts": []map[string]any{{"volume": randomName("v"), "path": "/mnt/v"}},
	})
	if out, err := sh(ctx, other, sb.ID, "cat /marker"); err != nil || strings.TrimSpace(out) != marker {
		t.Fatalf("cat /marker in %s on %s: %q %v, want %q", sb.ID, other.NodeID(), out, err, marker)
	}
}

// A snapshot with memory stays on the node that took it: its memory image
// is never copied, so it is not published (no other node lists it, none
// creates from it, the registry has no image of it), while creates through
// its own node stay there (placement would send some elsewhere) and
// restore the source's processes.
func TestCluster_SnapshotWithMemoryStaysOnItsNode(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	home, other := c.Nodes[0], c.Nodes[1]
	a, err := call(ctx, home, http.MethodPost, "/v1/sandboxes", map[string]any{"image": busyboxImage, "runtime": "gvisor", "memory_mb": 256})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status == http.StatusBadRequest && strings.Contains(string(a.Body), "gvisor") {
		t.Skipf("SKIP: %s has no gVisor: %v", home.NodeID(), a)
	}
	if a.Status != http.StatusCreated {
		t.Fatalf("create a gVisor sandbox through %s: %v", home.NodeID(), a)
	}
	var src sandbox
	if err := json.Unmarshal(a.Body, &src); err != nil {
		t.Fatal(err)
	}
	destroyAtEnd(t, c, src.ID)
	// The node that runs it (a create may be placed on another) is the
	// snapshot's.
	home = ownerOf(ctx, t, c, src.ID)
	for _, d := range c.Nodes {
		if d != home {
			other = d
		}
	}
	if _, err := sh(ctx, home, src.ID, `sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/pid`); err != nil {
		t.Fatal(err)
	}
	name := randomName("warm")
	a, err = call(ctx, home, http.MethodPost, "/v1/sandboxes/"+src.ID+"/snapshots", map[string]any{"name": name, "memory": true})
	if err != nil || a.Status != http.StatusCreated {
		t.Fatalf("snapshot with memory through %s: %v %v, want 201", home.NodeID(), a, err)
	}
	var snap template
	if err := json.Unmarshal(a.Body, &snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = call(ctx, home, http.MethodDelete, "/v1/templates/"+snap.ID, nil)
	})
	if _, a, err := getTemplate(ctx, other, name); err != nil || a.Status != http.StatusNotFound {
		t.Errorf("GET the snapshot through %s: %v %v, want 404", other.NodeID(), a, err)
	}
	if a, err := call(ctx, other, http.MethodPost, "/v1/sandboxes", map[string]any{"template": name}); err != nil || a.Status != http.StatusNotFound {
		t.Errorf("create from the snapshot through %s: %v %v, want 404", other.NodeID(), a, err)
	}
	if env.registry != nil {
		if status, _, err := env.registry.Manifest(ctx, "sandboxd/templates", snap.ID); err != nil || status != http.StatusNotFound {
			t.Errorf("the registry's manifest of the snapshot: %d %v, want 404", status, err)
		}
	}
	// Placement keeps every create of it home (the others lack it).
	for range 3 {
		restored := create(ctx, t, c, home, map[string]any{"template": name})
		if owner := ownerOf(ctx, t, c, restored.ID); owner != home {
			t.Fatalf("a sandbox restored from the snapshot runs on %s, want %s", owner.NodeID(), home.NodeID())
		}
		if out, err := sh(ctx, home, restored.ID, `kill -0 $(cat /tmp/pid) && echo alive`); err != nil || out != "alive\n" {
			t.Errorf("the source's process in the sandbox restored from the snapshot: %q %v, want alive", out, err)
		}
	}
}
