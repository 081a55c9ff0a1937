package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// unauthenticatedCount is node d's count of native-API answers with code
// unauthenticated (sandboxd_api_errors_total).
func unauthenticatedCount(ctx context.Context, t *testing.T, d *daemontest.Daemon) float64 {
	t.Helper()
	a, err := call(ctx, d, http.MethodGet, "/metrics", nil)
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("metrics of %s: %v, %v", d.NodeID(), a.Status, err)
	}
	const series = `sandboxd_api_errors_total{code="unauthenticated"} `
	sc := bufio.NewScanner(bytes.NewReader(a.Body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics of %s: %q: %v", d.NodeID(), sc.Text(), err)
			}
			return n
		}
	}
	t.Fatalf("metrics of %s: no %s", d.NodeID(), strings.TrimSpace(series))
	return 0
}

// A create without a valid credential is answered 401 by the node it
// reached, which neither reads its body to place it nor relays it, signed
// as a node's, to another node: placement runs behind the edge, from the
// request the edge decoded for an authenticated caller. (Placement below
// the edges read up to 1 MiB of any create's body and forwarded two thirds
// of them to the other nodes, which answered the 401.) Not parallel: it
// counts every node's 401s.
func TestCluster_UnauthenticatedCreateIsAnsweredWhereItLands(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t, 2*time.Minute)
	a := c.Nodes[0]
	before := make([]float64, len(c.Nodes))
	for i, d := range c.Nodes {
		before[i] = unauthenticatedCount(ctx, t, d)
	}
	const n = 12
	// Small enough to be sent whole before the 401 comes back, so that the
	// answer, not a write into a connection the node closed, is what is read.
	body := createBody("", map[string]string{"PAD": strings.Repeat("x", 4<<10)}, "")
	for i := range n {
		got, err := callWith(ctx, freshConns, a, http.MethodPost, "/v1/sandboxes", body, "Authorization", "Bearer not-a-token")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != http.StatusUnauthorized || got.code() != "unauthenticated" {
			t.Fatalf("create %d without a credential: %v, want 401 unauthenticated", i, got)
		}
	}
	for i, d := range c.Nodes {
		want := before[i]
		if d == a {
			want += n
		}
		if got := unauthenticatedCount(ctx, t, d); got != want {
			t.Errorf("node %s answered %v unauthenticated creates, want %v (every one by %s, where they landed)", d.NodeID(), got-before[i], want-before[i], a.NodeID())
		}
	}
}
