package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// The cluster under faults: a keyed create
// retried after a failover, a destroy during a quorum loss or an engine
// outage, and what calls answer meanwhile.

// errorBody is the v1 error body.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

// errorOf decodes a's v1 error body.
func errorOf(a answer) errorBody {
	var e errorBody
	_ = json.Unmarshal(a.Body, &e)
	return e
}

// wantUnavailable fails t unless a is 503 unavailable, retryable, with a
// message that contains cause.
func wantUnavailable(t *testing.T, what string, a answer, cause string) {
	t.Helper()
	e := errorOf(a)
	if a.Status != http.StatusServiceUnavailable || e.Error.Code != "unavailable" || !e.Error.Retryable || !strings.Contains(e.Error.Message, cause) {
		t.Errorf("%s: %v; want 503 unavailable, retryable, naming %q", what, a, cause)
	}
}

// keyedCreate creates a sandbox through d with Idempotency-Key key until
// one lands on d (a fresh key for each attempt that lands elsewhere, that
// sandbox destroyed at once), and returns it with its key. The sandbox is
// destroyed at the end of t.
func keyedCreate(ctx context.Context, t *testing.T, c *daemontest.Cluster, d *daemontest.Daemon, body map[string]any) (sandbox, string) {
	t.Helper()
	for range 40 {
		key := randomName("key")
		a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes", body, "Idempotency-Key", key)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != http.StatusCreated {
			t.Fatalf("keyed create through %s: %v, want 201", d.NodeID(), a)
		}
		var sb sandbox
		if err := json.Unmarshal(a.Body, &sb); err != nil || sb.ID == "" {
			t.Fatalf("keyed create: %v: no sandbox in %s", err, a.Body)
		}
		destroyAtEnd(t, c, sb.ID)
		owner := ownerOf(ctx, t, c, sb.ID)
		if owner == d {
			return sb, key
		}
		if err := client(owner).DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("40 keyed creates through %s landed elsewhere", d.NodeID())
	return sandbox{}, ""
}

// A create with an Idempotency-Key and failover "recreate" whose node is
// killed: while the sandbox is being recreated, exec answers 503
// unavailable, retryable (never 409); once it is back, the create retried
// with its key through a live node answers the recreated sandbox, named or
// not: the same id, 201, never a second sandbox or a name_conflict.
func TestCluster_KeyedCreateRetriedAfterFailoverAnswersTheRecreatedSandbox(t *testing.T) {
	requireDocker(t)
	c := env.dt.StartCluster(t, []daemontest.ClusterNode{
		{Name: "ka"}, {Name: "kv", Args: []string{"--memory-budget", bigBudget}}, {Name: "kc"},
	})
	ctx := testContext(t, 12*time.Minute)
	victim, survivors := c.Nodes[1], []*daemontest.Daemon{c.Nodes[0], c.Nodes[2]}

	type keyed struct {
		sb   sandbox
		key  string
		body map[string]any
	}
	var made []keyed
	for _, name := range []string{randomName("kn"), ""} {
		body := createBody(name, map[string]string{"ROLE": "keyed"}, "recreate")
		sb, key := keyedCreate(ctx, t, c, victim, body)
		made = append(made, keyed{sb, key, body})
	}

	victim.Kill()

	// Until it runs again, exec in a sandbox being recreated is a
	// retryable 503; a 409 or any other answer fails.
	for _, k := range made {
		var wrong []string
		err := testenv.Poll(ctx, failoverDeadline, func() error {
			a, err := call(ctx, survivors[0], http.MethodPost, "/v1/sandboxes/"+k.sb.ID+"/exec", map[string]any{"command": "echo ok"})
			if err != nil {
				return err
			}
			switch {
			case a.Status == http.StatusOK:
				return nil
			case a.Status != http.StatusServiceUnavailable || !errorOf(a).Error.Retryable:
				wrong = append(wrong, a.String())
			}
			return fmt.Errorf("exec in %s during its failover: %v", k.sb.ID, a)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(wrong) > 0 {
			t.Errorf("exec in %s during its failover answered %d time(s) other than 503 retryable, e.g. %s", k.sb.ID, len(wrong), wrong[0])
		}
	}

	for _, k := range made {
		for _, d := range survivors {
			a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes", k.body, "Idempotency-Key", k.key)
			if err != nil {
				t.Fatal(err)
			}
			var got sandbox
			_ = json.Unmarshal(a.Body, &got)
			if a.Status != http.StatusCreated || got.ID != k.sb.ID {
				if got.ID != "" && got.ID != k.sb.ID {
					destroyAtEnd(t, c, got.ID)
				}
				t.Errorf("keyed create (name %q) retried through %s after the failover: %v; want 201 with %s", k.sb.Name, d.NodeID(), a, k.sb.ID)
			}
		}
		if out, err := sh(ctx, survivors[1], k.sb.ID, `echo "$ROLE"`); err != nil || out != "keyed\n" {
			t.Errorf("exec in recreated %s: %q, %v", k.sb.ID, out, err)
		}
	}
	// One sandbox per key, on the survivors.
	for _, d := range survivors {
		left, err := testenv.NodeContainers(ctx, d.NodeID())
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > len(made) {
			t.Errorf("node %s has %d containers (%v), want at most %d: a retry made a second sandbox", d.NodeID(), len(left), left, len(made))
		}
	}
}

// A destroy without quorum (2 of 3 nodes killed) answers 503 "the cluster
// has no quorum", retryable, and leaves the sandbox as it was: visible,
// running, its name held. A create then answers the same cause (not that
// "the node that has this sandbox did not answer"). Once quorum is back
// the destroy completes and the name is free at once.
func TestCluster_DestroyWithoutQuorumLeavesTheSandbox(t *testing.T) {
	requireDocker(t)
	c := env.dt.StartCluster(t, []daemontest.ClusterNode{
		{Name: "da"}, {Name: "db"}, {Name: "ds", Args: []string{"--memory-budget", bigBudget}},
	})
	ctx := testContext(t, 10*time.Minute)
	survivor := c.Nodes[2]
	sb := landOn(ctx, t, c, survivor, createBody(randomName("dq"), nil, ""))

	c.Nodes[0].Kill()
	c.Nodes[1].Kill()
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

	a, err := callWith(ctx, freshConns, survivor, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantUnavailable(t, "DELETE without quorum", a, "quorum")
	if a, err := callWith(ctx, freshConns, survivor, http.MethodGet, "/v1/sandboxes/"+sb.ID, nil); err != nil || a.Status != http.StatusOK {
		t.Errorf("GET after the refused DELETE: %v, %v; want 200", a, err)
	}
	if out, err := sh(ctx, survivor, sb.ID, "echo still-here"); err != nil || out != "still-here\n" {
		t.Errorf("exec after the refused DELETE: %q, %v", out, err)
	}
	if cs, err := containersOf(ctx, sb.ID); err != nil || len(cs) != 1 || cs[0].State != "running" {
		t.Errorf("containers of %s after the refused DELETE: %+v, %v; want one, running", sb.ID, cs, err)
	}

	// Placement may draw a dead node, the survivor, or the survivor may
	// not have seen the loss yet: wait for its view, then every create
	// names the cause.
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		a, err := callWith(ctx, freshConns, survivor, http.MethodGet, "/readyz", nil)
		if err == nil && a.Status != http.StatusServiceUnavailable {
			err = fmt.Errorf("/readyz without quorum: %v", a)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		a, err := callWith(ctx, freshConns, survivor, http.MethodPost, "/v1/sandboxes", createBody("", nil, ""))
		if err != nil {
			t.Fatal(err)
		}
		wantUnavailable(t, fmt.Sprintf("create %d without quorum", i), a, "quorum")
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
		t.Fatal(err)
	}
	if a, err := call(ctx, survivor, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("DELETE with quorum back: %v, %v; want 204", a, err)
	}
	if cs, err := containersOf(ctx, sb.ID); err != nil || len(cs) != 0 {
		t.Errorf("containers of %s after the DELETE: %+v, %v; want none", sb.ID, cs, err)
	}
	create(ctx, t, c, c.Nodes[0], createBody(sb.Name, nil, "")) // the name is free
}

// engineProxy forwards a unix socket to the Docker engine's, until cut.
type engineProxy struct {
	path string
	mu   sync.Mutex
	ln   net.Listener
	conn map[net.Conn]bool
}

// newEngineProxy listens on a socket in dir and forwards it to the engine.
func newEngineProxy(t *testing.T, dir string) *engineProxy {
	t.Helper()
	p := &engineProxy{path: filepath.Join(dir, "engine.sock"), conn: map[net.Conn]bool{}}
	if err := p.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.cut)
	return p
}

// engineSocket is the engine's socket path (DOCKER_HOST's when it is a
// unix socket).
func engineSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		return h
	}
	return "/var/run/docker.sock"
}

// open (re)starts forwarding.
func (p *engineProxy) open() error {
	_ = os.Remove(p.path)
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	target := engineSocket()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conn[c], p.conn[up] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return nil
}

// cut stops forwarding: the listener and every connection close, as if
// the engine died.
func (p *engineProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conn {
		c.Close()
	}
	clear(p.conn)
	_ = os.Remove(p.path)
}

// A destroy while the container engine does not answer is a retryable 503
// "the container engine is unreachable", and the sandbox is as it was:
// visible and running (its agent answers without the engine), its name
// held. Once the engine is back the destroy completes. Under --engine oci
// the destroy needs no engine and completes at once, leaving nothing.
// (One node, its engine reached through a socket proxy the test cuts; a
// cluster node, as the destroy also releases cluster keys.)
func TestCluster_DestroyDuringEngineOutageLeavesTheSandbox(t *testing.T) {
	requireDocker(t)
	proxy := newEngineProxy(t, t.TempDir())
	// The node reaches the engine through the proxy; the test's own docker
	// calls do not. Not parallel: no other daemon starts meanwhile.
	old, had := os.LookupEnv("DOCKER_HOST")
	os.Setenv("DOCKER_HOST", "unix://"+proxy.path)
	c := env.dt.StartCluster(t, []daemontest.ClusterNode{{Name: "eo"}})
	if had {
		os.Setenv("DOCKER_HOST", old)
	} else {
		os.Unsetenv("DOCKER_HOST")
	}
	ctx := testContext(t, 8*time.Minute)
	d := c.Nodes[0]
	sb := create(ctx, t, c, d, createBody(randomName("eo"), nil, ""))
	t.Cleanup(func() { _ = proxy.open() }) // before the node's cleanup destroys it

	proxy.cut()
	a, err := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Engine() == "oci" {
		// Under --engine oci nothing of a sandbox is the engine's: the
		// destroy needs no engine, and completes, cluster keys included
		// (test/e2e's TestFault_EngineUnreachable says which calls still
		// need it).
		if a.Status != http.StatusNoContent {
			t.Fatalf("DELETE during an engine outage under --engine oci: %v; want 204", a)
		}
		if a, err := call(ctx, d, http.MethodGet, "/v1/sandboxes/"+sb.Name, nil); err != nil || a.Status != http.StatusNotFound {
			t.Errorf("GET by name after the DELETE: %v, %v; want 404", a, err)
		}
		if left, err := d.Leftovers(ctx, nil, sb.ID); err != nil || len(left) > 0 {
			t.Errorf("the sandbox destroyed during the outage left %v (%v)", left, err)
		}
		return
	}
	wantUnavailable(t, "DELETE during an engine outage", a, "engine")
	if a, err := call(ctx, d, http.MethodGet, "/v1/sandboxes/"+sb.Name, nil); err != nil || a.Status != http.StatusOK || !strings.Contains(string(a.Body), sb.ID) {
		t.Errorf("GET by name after the refused DELETE: %v, %v; want 200 with %s", a, err, sb.ID)
	}
	if out, err := sh(ctx, d, sb.ID, "echo still-here"); err != nil || out != "still-here\n" {
		t.Errorf("exec after the refused DELETE: %q, %v", out, err)
	}
	if cs, err := containersOf(ctx, sb.ID); err != nil || len(cs) != 1 || cs[0].State != "running" {
		t.Errorf("containers of %s after the refused DELETE: %+v, %v; want one, running", sb.ID, cs, err)
	}

	if err := proxy.open(); err != nil {
		t.Fatal(err)
	}
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		a, err := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil)
		if err == nil && a.Status != http.StatusNoContent {
			err = fmt.Errorf("DELETE with the engine back: %v; want 204", a)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := containersOf(ctx, sb.ID); err != nil || len(cs) != 0 {
		t.Errorf("containers of %s after the DELETE: %+v, %v; want none", sb.ID, cs, err)
	}
}
