package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// randomName is a fresh sandbox name or hostname label.
func randomName(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:10])
}

// race sends n calls at once (released together) and returns their
// answers, in order.
func race(ctx context.Context, t *testing.T, n int, send func(i int) (answer, error)) []answer {
	t.Helper()
	out := make([]answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i], errs[i] = send(i)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	return out
}

// Names are unique cluster-wide: of 30 creates of one name sent at once
// to the 3 nodes (each placed by headroom, so run by any node), exactly
// one is created and the others answer 409 name_conflict, and exactly one
// container is made. (Not parallel: it counts the shared nodes'
// containers, so the parallel tests wait for it.)
func TestCluster_ConcurrentCreatesOfOneNameMakeOneSandbox(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	before, err := nodeCount(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	name := randomName("race")
	const n = 30
	answers := race(ctx, t, n, func(i int) (answer, error) {
		return call(ctx, c.Nodes[i%len(c.Nodes)], http.MethodPost, "/v1/sandboxes", createBody(name, nil, ""))
	})
	var winners []sandbox
	for i, a := range answers {
		switch {
		case a.Status == http.StatusCreated:
			var sb sandbox
			if err := json.Unmarshal(a.Body, &sb); err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			destroyAtEnd(t, c, sb.ID)
			winners = append(winners, sb)
		case a.Status == http.StatusConflict && a.code() == "name_conflict":
		default:
			t.Errorf("create %d (through %s): %v, want 201 or 409 name_conflict", i, c.Nodes[i%len(c.Nodes)].NodeID(), a)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d creates of name %q answered 201 (%+v), want exactly 1", len(winners), name, winners)
	}
	owner := ownerOf(ctx, t, c, winners[0].ID) // exactly one container of it
	after, err := nodeCount(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if after != before+1 {
		t.Errorf("the nodes have %d containers after the race, %d before; want one more", after, before)
	}
	// Every node finds the one sandbox by its name.
	for _, d := range c.Nodes {
		a, err := call(ctx, d, http.MethodGet, "/v1/sandboxes/"+name, nil)
		if err != nil {
			t.Fatal(err)
		}
		var sb sandbox
		_ = json.Unmarshal(a.Body, &sb)
		if a.Status != http.StatusOK || sb.ID != winners[0].ID {
			t.Errorf("GET by name through %s: %v, want 200 with %s (owned by %s)", d.NodeID(), a, winners[0].ID, owner.NodeID())
		}
	}
}

// An Idempotency-Key is bound cluster-wide: the same create with the same
// key sent at once to three different nodes makes one sandbox, and every
// answer names it.
func TestCluster_OneIdempotencyKeyOnThreeNodesMakesOneSandbox(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	key := sandboxd.NewIdempotencyKey()
	body := createBody("", map[string]string{"K": key}, "")
	answers := race(ctx, t, len(c.Nodes), func(i int) (answer, error) {
		return call(ctx, c.Nodes[i], http.MethodPost, "/v1/sandboxes", body, "Idempotency-Key", key)
	})
	ids := map[string]bool{}
	for i, a := range answers {
		var sb sandbox
		if a.Status == http.StatusCreated || a.Status == http.StatusOK {
			_ = json.Unmarshal(a.Body, &sb)
		}
		if sb.ID == "" {
			t.Errorf("create through %s: %v, want 201 (or 200) with a sandbox", c.Nodes[i].NodeID(), a)
			continue
		}
		if !ids[sb.ID] {
			ids[sb.ID] = true
			destroyAtEnd(t, c, sb.ID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("one Idempotency-Key on %d nodes made sandboxes %v, want one", len(c.Nodes), ids)
	}
	for id := range ids {
		ownerOf(ctx, t, c, id) // exactly one container
	}
}

// differentOwners creates sandboxes through c's first node until two of
// them live on different nodes, destroying the others at once, and
// returns the two with their owners.
func differentOwners(ctx context.Context, t *testing.T, c *daemontest.Cluster) (x, y sandbox, ox, oy *daemontest.Daemon) {
	t.Helper()
	x = create(ctx, t, c, c.Nodes[0], createBody("", nil, ""))
	ox = ownerOf(ctx, t, c, x.ID)
	for range 30 {
		y = create(ctx, t, c, c.Nodes[0], createBody("", nil, ""))
		if oy = ownerOf(ctx, t, c, y.ID); oy != ox {
			return x, y, ox, oy
		}
		if err := client(oy).DestroySandbox(ctx, y.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("30 creates all landed on %s: placement does not spread", ox.NodeID())
	return
}

// A custom hostname is unique cluster-wide: bound at once to two
// sandboxes owned by two nodes, each request sent to the other's owner,
// exactly one binding wins and the other answers 409 hostname_conflict;
// the loser's undo leaves the winner's binding in place.
func TestCluster_OneHostnameBoundFromTwoNodes(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	x, y, ox, oy := differentOwners(ctx, t, c)
	host := randomName("h") + ".example.test"
	type bind struct {
		sb  sandbox
		via *daemontest.Daemon
	}
	binds := []bind{{x, oy}, {y, ox}}
	answers := race(ctx, t, 2, func(i int) (answer, error) {
		return call(ctx, binds[i].via, http.MethodPost, "/v1/sandboxes/"+binds[i].sb.ID+"/domains",
			map[string]any{"hostname": host, "port": 8080})
	})
	winner := -1
	for i, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			if winner >= 0 {
				t.Fatalf("both bindings of %s won: %v and %v", host, answers[0], answers[1])
			}
			winner = i
		case a.Status == http.StatusConflict && a.code() == "hostname_conflict":
		default:
			t.Errorf("bind %s to %s through %s: %v, want 200 or 409 hostname_conflict", host, binds[i].sb.ID, binds[i].via.NodeID(), a)
		}
	}
	if winner < 0 {
		t.Fatalf("no binding of %s won: %v and %v", host, answers[0], answers[1])
	}
	loser := 1 - winner
	for i, b := range binds {
		ds, err := client(c.Nodes[2]).ListDomains(ctx, b.sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		bound := len(ds) == 1 && ds[0].Hostname == host
		if bound != (i == winner) || len(ds) > 1 {
			t.Errorf("domains of %s (winner: %v): %+v", b.sb.ID, i == winner, ds)
		}
	}
	// The loser's undo did not release the winner's key: binding it again
	// still conflicts, through any node.
	for _, d := range c.Nodes {
		a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes/"+binds[loser].sb.ID+"/domains", map[string]any{"hostname": host, "port": 8080})
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusConflict || a.code() != "hostname_conflict" {
			t.Errorf("bind %s to the loser %s again through %s: %v, want 409 hostname_conflict", host, binds[loser].sb.ID, d.NodeID(), a)
		}
	}
}

// A sandbox owned by one node is fully usable through another: exec, file
// upload and download, and its preview URL (a private port, opened by the
// admin token of the node that received the call).
func TestCluster_SandboxOfAnotherNodeWorksThroughThisOne(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	sb := create(ctx, t, c, c.Nodes[0], createBody("", map[string]string{"GREETING": "hi-from-env"}, ""))
	owner := ownerOf(ctx, t, c, sb.ID)
	for _, a := range c.Nodes {
		if a == owner {
			continue
		}
		t.Run("via-"+a.NodeID(), func(t *testing.T) {
			out, err := sh(ctx, a, sb.ID, `echo "$GREETING"`)
			if err != nil {
				t.Fatal(err)
			}
			if out != "hi-from-env\n" {
				t.Errorf("exec through %s: %q, want the env of the create", a.NodeID(), out)
			}

			data := make([]byte, 1<<20)
			_, _ = rand.Read(data)
			path := "/tmp/up-" + a.NodeID()
			if err := client(a).UploadFile(ctx, sb.ID, path, bytes.NewReader(data)); err != nil {
				t.Fatalf("upload through %s: %v", a.NodeID(), err)
			}
			fr, err := client(a).DownloadFile(ctx, sb.ID, path)
			if err != nil {
				t.Fatalf("download through %s: %v", a.NodeID(), err)
			}
			got, err := io.ReadAll(fr)
			fr.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("download through %s: %d bytes, not the %d uploaded", a.NodeID(), len(got), len(data))
			}
			// The owner sees the same file: the calls did reach it.
			if out, err := sh(ctx, owner, sb.ID, "wc -c < "+path); err != nil || out != fmt.Sprintf("%d\n", len(data)) {
				t.Errorf("size of %s read through the owner: %q, %v", path, out, err)
			}
		})
	}
	a := c.Nodes[0]
	if a == owner {
		a = c.Nodes[1]
	}
	if err := serveHTTP(ctx, a, sb.ID, "app-"+sb.ID); err != nil {
		t.Fatal(err)
	}
	if ans, err := call(ctx, a, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 8080}); err != nil || ans.Status != http.StatusOK {
		t.Fatalf("expose 8080 through %s: %v %v", a.NodeID(), ans, err)
	}
	for _, d := range c.Nodes {
		if err := wantPreview(ctx, d, sb.ID, "app-"+sb.ID); err != nil {
			t.Errorf("owner %s: %v", owner.NodeID(), err)
		}
	}
	// Private: without a credential it stays closed, whichever node.
	for _, d := range c.Nodes {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/", nil)
		req.Host = "8080-" + sb.ID + ".localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("preview of a private port through %s without a token: %s, want 401", d.NodeID(), resp.Status)
		}
	}
}

// A list is the cluster's: through any node, sandboxes placed on all of
// them are listed once each, in creation order, across pages of 2 (each
// node pages by the same keys, so the merged pages neither skip nor
// repeat), filtered by tag.
func TestCluster_ListThroughAnyNodeShowsEveryNodesSandboxes(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	tag := randomName("list")
	var made []string
	owners := map[string]bool{}
	// Placement is by headroom: six creates land on two nodes or more
	// almost always; a few more make sure of it.
	for i := 0; i < 12 && (i < 6 || len(owners) < 2); i++ {
		body := createBody("", nil, "")
		body["tags"] = map[string]string{"list": tag}
		sb := create(ctx, t, c, c.Nodes[i%len(c.Nodes)], body)
		made = append(made, sb.ID)
		owners[ownerOf(ctx, t, c, sb.ID).NodeID()] = true
	}
	if len(owners) < 2 {
		t.Fatalf("%d creates all landed on one node: the test needs two", len(made))
	}
	list := func(d *daemontest.Daemon, query string) []string {
		t.Helper()
		var ids []string
		for token, pages := "", 0; ; pages++ {
			if pages > len(made) {
				t.Fatalf("through %s: more pages than sandboxes (%v so far)", d.NodeID(), ids)
			}
			a, err := call(ctx, d, http.MethodGet, "/v1/sandboxes?limit=2&tag.list="+tag+query+"&page_token="+token, nil)
			if err != nil {
				t.Fatal(err)
			}
			var page struct {
				Items []sandbox `json:"items"`
				Next  string    `json:"next_page_token"`
			}
			if a.Status != http.StatusOK || json.Unmarshal(a.Body, &page) != nil {
				t.Fatalf("list through %s: %v", d.NodeID(), a)
			}
			for _, sb := range page.Items {
				ids = append(ids, sb.ID)
			}
			if token = page.Next; token == "" {
				return ids
			}
		}
	}
	for _, d := range c.Nodes {
		if got := list(d, ""); fmt.Sprint(got) != fmt.Sprint(made) {
			t.Errorf("list through %s: %v, want %v (creation order)", d.NodeID(), got, made)
		}
	}
}

// A sandbox is found through every node the moment its create answered,
// not once their watches caught up: a node whose directory lacks a
// placement reads it from etcd before it answers for the id itself.
func TestCluster_ReadThroughAnotherNodeRightAfterCreate(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)
	for i := range 8 {
		via := c.Nodes[i%len(c.Nodes)]
		sb := create(ctx, t, c, via, createBody("", nil, ""))
		for _, d := range c.Nodes {
			if ans, err := call(ctx, d, http.MethodGet, "/v1/sandboxes/"+sb.ID, nil); err != nil || ans.Status != http.StatusOK {
				t.Errorf("GET %s through %s right after its create through %s: %v %v", sb.ID, d.NodeID(), via.NodeID(), ans, err)
			}
		}
	}
}
