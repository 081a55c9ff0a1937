package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// failoverDeadline bounds a failover: the dead node's lease (10 s) runs
// out, a survivor takes each sandbox over and starts its container, on a
// busy 2-core machine.
const failoverDeadline = 3 * time.Minute

// bigBudget is a memory budget (MB) far above the others' default 16 GB:
// placement by free memory then picks its node whenever it draws it, so
// creates through any node land there two times in three.
const bigBudget = "65536"

// landOn creates sandboxes through d with body until one lands on d,
// destroying the others at once, and returns it.
func landOn(ctx context.Context, t *testing.T, c *daemontest.Cluster, d *daemontest.Daemon, body map[string]any) sandbox {
	t.Helper()
	for range 40 {
		sb := create(ctx, t, c, d, body)
		owner := ownerOf(ctx, t, c, sb.ID)
		if owner == d {
			return sb
		}
		if err := client(owner).DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("40 creates through %s landed elsewhere", d.NodeID())
	return sandbox{}
}

// When a node dies (SIGKILL), its sandboxes with failover "recreate" come
// back on another node with the same ids and env, and their exposed port
// routes again; the others read as lost (410), and one its owner deletes
// frees its name. When the dead node comes
// back it destroys its stale copies of the moved sandboxes (and only
// those: the new owners' containers keep running), and the sandboxes the
// cluster had declared lost, still running there, are its again
// (clusterNode.dropStale).
func TestCluster_FailoverRecreatesOnAnotherNode(t *testing.T) {
	requireDocker(t)
	c := env.dt.StartCluster(t, []daemontest.ClusterNode{
		{Name: "fa"}, {Name: "fv", Args: []string{"--memory-budget", bigBudget}}, {Name: "fc"},
	})
	ctx := testContext(t, 12*time.Minute)
	victim := c.Nodes[1]
	survivors := []*daemontest.Daemon{c.Nodes[0], c.Nodes[2]}

	var recreate, plain []sandbox
	for i := range 5 {
		failover := "recreate"
		if i >= 3 {
			failover = ""
		}
		sb := landOn(ctx, t, c, victim, createBody(randomName("fo"), map[string]string{"ROLE": fmt.Sprintf("sandbox-%d", i)}, failover))
		if failover == "" {
			plain = append(plain, sb)
			continue
		}
		recreate = append(recreate, sb)
		if a, err := call(ctx, survivors[0], http.MethodPost, "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 8080}); err != nil || a.Status != http.StatusOK {
			t.Fatalf("expose 8080 of %s: %v %v", sb.ID, a, err)
		}
	}

	victim.Kill()
	killed := time.Now()

	for _, sb := range recreate {
		want := sb.Env["ROLE"] + "\n"
		err := testenv.Poll(ctx, failoverDeadline, func() error {
			out, err := sh(ctx, survivors[0], sb.ID, `echo "$ROLE"`)
			if err != nil {
				return err
			}
			if out != want {
				return fmt.Errorf("exec in %s: %q, want %q", sb.ID, out, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("sandbox %s after its node died: %v", sb.ID, err)
		}
		cs, err := containersOf(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(cs, func(x ctr) bool {
			return x.Node != victim.NodeID() && x.State == "running" && qualifiedName(x, sb.ID)
		}) {
			t.Errorf("sandbox %s answers, but no container of a survivor runs it: %+v", sb.ID, cs)
		}
		// Its port intent was replayed: the new container's app answers
		// on the same preview URL, through the other survivor.
		if err := serveHTTP(ctx, survivors[1], sb.ID, "app-"+sb.ID); err != nil {
			t.Fatal(err)
		}
		if err := wantPreview(ctx, survivors[1], sb.ID, "app-"+sb.ID); err != nil {
			t.Error(err)
		}
	}
	t.Logf("the %d recreate sandboxes answered %v after the kill", len(recreate), time.Since(killed).Round(time.Second))

	for _, sb := range plain {
		err := testenv.Poll(ctx, failoverDeadline, func() error {
			a, err := call(ctx, survivors[1], http.MethodGet, "/v1/sandboxes/"+sb.ID, nil)
			if err != nil {
				return err
			}
			if a.Status == http.StatusGone && a.code() == "lost" {
				return nil
			}
			return fmt.Errorf("GET %s: %v, want 410 lost", sb.ID, a)
		})
		if err != nil {
			t.Errorf("sandbox %s without failover after its node died: %v", sb.ID, err)
		}
	}
	// Its owner deletes one lost sandbox: 204, and its name is free at
	// once (a new sandbox takes it); the node's copy goes when it returns.
	deleted, kept := plain[0], plain[1:]
	if a, err := call(ctx, survivors[0], http.MethodDelete, "/v1/sandboxes/"+deleted.ID, nil); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("DELETE of lost %s: %v, %v; want 204", deleted.ID, a, err)
	}
	// Another node's directory learns of the delete through its watch.
	err := testenv.Poll(ctx, testenv.Deadline, func() error {
		a, err := call(ctx, survivors[1], http.MethodGet, "/v1/sandboxes/"+deleted.ID, nil)
		if err == nil && a.Status != http.StatusNotFound {
			err = fmt.Errorf("GET of deleted %s: %v; want 404", deleted.ID, a)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	reuse := create(ctx, t, c, survivors[1], createBody(deleted.Name, nil, ""))
	if reuse.ID == deleted.ID {
		t.Errorf("the freed name %q names the deleted sandbox again", deleted.Name)
	}

	sctx, cancel := context.WithTimeout(ctx, daemontest.StartTimeout)
	err = victim.Start(sctx)
	cancel()
	if err != nil {
		t.Fatalf("restart %s: %v", victim.NodeID(), err)
	}
	if err := c.WaitReady(ctx, c.Nodes...); err != nil {
		t.Fatal(err)
	}
	for _, sb := range recreate {
		err := testenv.Poll(ctx, testenv.Deadline, func() error {
			cs, err := containersOf(ctx, sb.ID)
			if err != nil {
				return err
			}
			if len(cs) != 1 || cs[0].Node == victim.NodeID() || cs[0].State != "running" {
				return fmt.Errorf("containers of %s: %+v, want only the new owner's, running", sb.ID, cs)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		if out, err := sh(ctx, victim, sb.ID, `echo "$ROLE"`); err != nil || out != sb.Env["ROLE"]+"\n" {
			t.Errorf("exec in %s through the restarted %s: %q, %v", sb.ID, victim.NodeID(), out, err)
		}
	}
	// The deleted one's copy on the returned node is destroyed; its name
	// still names the new sandbox.
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		cs, err := containersOf(ctx, deleted.ID)
		if err != nil {
			return err
		}
		if len(cs) != 0 {
			return fmt.Errorf("containers of deleted %s: %+v, want none", deleted.ID, cs)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if a, err := call(ctx, victim, http.MethodGet, "/v1/sandboxes/"+deleted.Name, nil); err != nil || !strings.Contains(string(a.Body), reuse.ID) {
		t.Errorf("GET %s through the returned node: %v, %v; want %s", deleted.Name, a, err, reuse.ID)
	}
	for _, sb := range kept {
		err := testenv.Poll(ctx, testenv.Deadline, func() error {
			out, err := sh(ctx, survivors[0], sb.ID, `echo "$ROLE"`)
			if err == nil && out != sb.Env["ROLE"]+"\n" {
				err = fmt.Errorf("exec in %s: %q", sb.ID, out)
			}
			return err
		})
		if err != nil {
			t.Errorf("sandbox %s, lost while its node was away, once it is back: %v", sb.ID, err)
		}
	}
}

// Without quorum (2 of 3 nodes killed) a create on the survivor fails
// fast with 503 unavailable and makes no container, while exec in a
// sandbox the survivor owns keeps working. Once the two come back the
// cluster is ready again.
func TestCluster_QuorumLossRefusesCreatesButKeepsExec(t *testing.T) {
	requireDocker(t)
	c := env.dt.StartCluster(t, []daemontest.ClusterNode{
		{Name: "qa"}, {Name: "qb"}, {Name: "qs", Args: []string{"--memory-budget", bigBudget}},
	})
	ctx := testContext(t, 10*time.Minute)
	survivor := c.Nodes[2]
	sb := landOn(ctx, t, c, survivor, createBody(randomName("q"), nil, ""))

	c.Nodes[0].Kill()
	c.Nodes[1].Kill()
	// Whatever happens below, quorum is back before the destroys that
	// clean up (cleanups run last-registered first).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*daemontest.StartTimeout)
		defer cancel()
		for _, d := range c.Nodes[:2] {
			if d.PID() == 0 {
				if err := d.Start(ctx); err != nil {
					t.Errorf("restart %s: %v", d.NodeID(), err)
				}
			}
		}
	})

	before, err := testenv.NodeContainers(ctx, survivor.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	// A few creates: placement may pick the survivor (its claim times out
	// on etcd) or a dead node (the forward fails to dial).
	const prompt = 30 * time.Second
	for i := range 4 {
		start := time.Now()
		a, err := callWith(ctx, freshConns, survivor, http.MethodPost, "/v1/sandboxes", createBody("", nil, ""))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("create %d without quorum: %v", i, err)
		}
		t.Logf("create %d without quorum: %d %s in %v", i, a.Status, a.code(), took.Round(time.Millisecond))
		if a.Status != http.StatusServiceUnavailable || a.code() != "unavailable" {
			t.Errorf("create %d without quorum: %v, want 503 unavailable", i, a)
		}
		if took > prompt {
			t.Errorf("create %d without quorum took %v, want under %v", i, took.Round(time.Millisecond), prompt)
		}
	}
	after, err := testenv.NodeContainers(ctx, survivor.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused creates changed the survivor's containers: %d before, %d after", len(before), len(after))
	}

	if out, err := sh(ctx, survivor, sb.ID, "echo still-here"); err != nil || out != "still-here\n" {
		t.Errorf("exec without quorum: %q, %v", out, err)
	}

	for _, d := range c.Nodes[:2] {
		sctx, cancel := context.WithTimeout(ctx, daemontest.StartTimeout)
		err := d.Start(sctx)
		cancel()
		if err != nil {
			t.Fatalf("restart %s: %v", d.NodeID(), err)
		}
	}
	if err := c.WaitReady(ctx, c.Nodes...); err != nil {
		t.Fatalf("after quorum is back: %v", err)
	}
}
