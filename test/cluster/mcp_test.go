package cluster_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// /mcp of a node that does not own a sandbox acts on it all the same:
// the MCP server calls its own node's API with the caller's token, and
// the cluster's forwarding takes the call to the owner. A sandbox
// created through /mcp is listed and destroyed the same way.
func TestMCP_ToolCallsReachTheOwningNode(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	sb := create(ctx, t, c, c.Nodes[0], createBody("", nil, ""))
	owner := ownerOf(ctx, t, c, sb.ID)
	var other *daemontest.Daemon
	for _, d := range c.Nodes {
		if d != owner {
			other = d
			break
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cluster-test", Version: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   other.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{other.Token(), http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", other.NodeID(), err)
	}
	defer cs.Close()
	tool := func(name string, args map[string]any, out any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s through %s: %v", name, other.NodeID(), err)
		}
		if res.IsError {
			t.Fatalf("%s through %s (the sandbox is on %s): %+v", name, other.NodeID(), owner.NodeID(), res.Content[0])
		}
		if out != nil {
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
	}

	tool("write_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/where", "content": "written through " + other.NodeID()}, nil)
	var res struct{ Stdout string }
	tool("exec", map[string]any{"sandbox": sb.ID, "command": "cat /tmp/where"}, &res)
	if res.Stdout != "written through "+other.NodeID() {
		t.Errorf("exec through %s: stdout %q", other.NodeID(), res.Stdout)
	}

	var made struct{ ID string }
	tool("create_sandbox", map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128}, &made)
	destroyAtEnd(t, c, made.ID)
	var listed struct {
		Sandboxes []struct{ ID string }
	}
	tool("list_sandboxes", nil, &listed)
	for _, id := range []string{sb.ID, made.ID} {
		if !slices.ContainsFunc(listed.Sandboxes, func(s struct{ ID string }) bool { return s.ID == id }) {
			t.Errorf("list_sandboxes through %s misses %s", other.NodeID(), id)
		}
	}
	tool("destroy_sandbox", map[string]any{"sandbox": made.ID}, nil)
	a, err := call(ctx, owner, http.MethodGet, "/v1/sandboxes/"+made.ID, nil)
	if err != nil || a.Status != http.StatusNotFound {
		t.Errorf("after destroy_sandbox through %s, GET on %s: %v %v; want 404", other.NodeID(), owner.NodeID(), a, err)
	}
}
