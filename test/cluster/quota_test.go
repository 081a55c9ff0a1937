package cluster_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// Quotas are the cluster's: an owner with a quota of 2 sandboxes who runs
// two, wherever they were placed, is refused a third through every node
// (and nothing is made) once the nodes have published what it holds
// (within about a second, seen in GET /v1/cluster/nodes?owner=), and gets
// one again once it destroyed one.
func TestCluster_QuotaCountsTheOwnersSandboxesOnEveryNode(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	owner := randomName("quota")
	a, err := call(ctx, c.Nodes[0], http.MethodPost, "/v1/tokens", map[string]any{
		"name": owner, "role": "user", "owner": owner, "quota": map[string]any{"sandboxes": 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	if a.Status != http.StatusCreated || json.Unmarshal(a.Body, &tok) != nil || tok.Token == "" {
		t.Fatalf("create a token with a quota: %v", a)
	}
	as := []string{"Authorization", "Bearer " + tok.Token}
	createAs := func(d *daemontest.Daemon) answer {
		t.Helper()
		a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes", createBody("", nil, ""), as...)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status == http.StatusCreated {
			var sb sandbox
			if err := json.Unmarshal(a.Body, &sb); err != nil {
				t.Fatal(err)
			}
			destroyAtEnd(t, c, sb.ID)
		}
		return a
	}
	// holds waits until every node sees the owner hold n sandboxes in all.
	holds := func(n int64) {
		t.Helper()
		for _, d := range c.Nodes {
			err := testenv.Poll(ctx, testenv.Deadline, func() error {
				a, err := call(ctx, d, http.MethodGet, "/v1/cluster/nodes?owner="+owner, nil)
				if err != nil {
					return err
				}
				var nodes struct {
					Items []struct {
						ID    string `json:"id"`
						Usage struct {
							Sandboxes int64 `json:"sandboxes"`
						} `json:"owner_usage"`
					} `json:"items"`
				}
				if a.Status != http.StatusOK || json.Unmarshal(a.Body, &nodes) != nil {
					return fmt.Errorf("nodes: %v", a)
				}
				var sum int64
				for _, n := range nodes.Items {
					sum += n.Usage.Sandboxes
				}
				if sum != n {
					return fmt.Errorf("%s sees the owner hold %d sandboxes in all, want %d (%s)", d.NodeID(), sum, n, a.Body)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	var ids []string
	for i := range 2 {
		a := createAs(c.Nodes[i])
		var sb sandbox
		if a.Status != http.StatusCreated || json.Unmarshal(a.Body, &sb) != nil {
			t.Fatalf("create %d of the quota's 2: %v", i, a)
		}
		ids = append(ids, sb.ID)
	}
	holds(2)
	for _, d := range c.Nodes {
		if a := createAs(d); a.Status != http.StatusForbidden || !strings.Contains(string(a.Body), "quota") {
			t.Errorf("a third sandbox through %s: %v, want 403 naming the quota", d.NodeID(), a)
		}
	}
	if a, err := call(ctx, c.Nodes[0], http.MethodDelete, "/v1/sandboxes/"+ids[0], nil, as...); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("destroy %s: %v, %v", ids[0], a, err)
	}
	holds(1)
	if a := createAs(c.Nodes[2]); a.Status != http.StatusCreated {
		t.Errorf("a second sandbox again, through %s: %v", c.Nodes[2].NodeID(), a)
	}
}
