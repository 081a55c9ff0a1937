package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Labels the Docker runtime puts on every container.
const (
	labelNode    = "sandboxd.node"
	labelSandbox = "sandboxd.sandbox"
)

// callTimeout bounds one API call; a create pulls nothing (the images are
// there) but starts a container on a busy machine.
const callTimeout = 90 * time.Second

// answer is an API response.
type answer struct {
	Status int
	Body   []byte
}

// code is the v1 error body's code, "" when there is none.
func (a answer) code() string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(a.Body, &e)
	return e.Error.Code
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.Status, bytes.TrimSpace(a.Body)) }

// sandbox is the part of the v1 sandbox object the tests read.
type sandbox struct {
	ID   string            `json:"id"`
	Name string            `json:"name"`
	Env  map[string]string `json:"env"`
}

// call sends one request to d with d's admin token (which works on every
// node of a cluster), body encoded as JSON unless nil, and header pairs.
// A Host header pair sets the request's Host.
func call(ctx context.Context, d *daemontest.Daemon, method, path string, body any, header ...string) (answer, error) {
	return callWith(ctx, http.DefaultClient, d, method, path, body, header...)
}

// freshConns is a client that opens a connection per request. A node
// closes a kept-alive connection, without saying so, after it answered 503
// for a forward to a node that does not answer, and the next request on it
// fails with "connection reset by peer" (the daemon bug the quorum test
// steps around with this client; reported with this package).
// TestMain makes it reach LAN hosts.
var freshConns = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// callWith is call through hc.
func callWith(ctx context.Context, hc *http.Client, d *daemontest.Daemon, method, path string, body any, header ...string) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s on %s: %w", method, path, d.NodeID(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Body: b}, err
}

// createBody is a small busybox sandbox's create request.
func createBody(name string, env map[string]string, failover string) map[string]any {
	b := map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128}
	if name != "" {
		b["name"] = name
	}
	if env != nil {
		b["env"] = env
	}
	if failover != "" {
		b["failover"] = failover
	}
	return b
}

// create creates a sandbox through d, fails t unless it answers 201, and
// destroys the sandbox at the end of t through whichever node of c runs.
func create(ctx context.Context, t *testing.T, c *daemontest.Cluster, d *daemontest.Daemon, body map[string]any) sandbox {
	t.Helper()
	a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes", body)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != http.StatusCreated {
		t.Fatalf("create through %s: %v, want 201", d.NodeID(), a)
	}
	var sb sandbox
	if err := json.Unmarshal(a.Body, &sb); err != nil || sb.ID == "" {
		t.Fatalf("create through %s: %v: no sandbox in %s", d.NodeID(), err, a.Body)
	}
	destroyAtEnd(t, c, sb.ID)
	return sb
}

// destroyAtEnd destroys sandbox id when t ends, through the first running
// node of c that answers, unless it is gone already. (Each node's Close
// removes its containers anyway; this keeps the cluster's keys clean for
// the tests that share it.)
func destroyAtEnd(t *testing.T, c *daemontest.Cluster, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := testenv.Poll(ctx, testenv.Deadline, func() error {
			d := running(c)
			if d == nil {
				return nil // the cluster is gone; Close removed the containers
			}
			a, err := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id, nil)
			if err != nil {
				return err
			}
			if a.Status != http.StatusNoContent && a.Status != http.StatusNotFound {
				return fmt.Errorf("destroy %s through %s: %v", id, d.NodeID(), a)
			}
			return nil
		})
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// running is the first node of c whose process runs, nil if none.
func running(c *daemontest.Cluster) *daemontest.Daemon {
	for _, d := range c.Nodes {
		if d.PID() != 0 {
			return d
		}
	}
	return nil
}

// ctr is one container of a sandbox.
type ctr struct {
	Name, Node, State string
}

// engineFree reports whether the nodes run --engine oci
// (daemontest.TestEngine): their sandboxes are then the oci runtime's,
// and a sandbox's "container" is what daemontest's OCISandboxes lists,
// named by its keyed host name.
func engineFree() bool { return daemontest.TestEngine() == "oci" }

// ociContainers lists the oci runtime's sandboxes of every node, as
// containers, by sandbox id.
func ociContainers(ctx context.Context) (map[string][]ctr, error) {
	list, err := env.dt.OCISandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]ctr{}
	for _, sb := range list {
		out[sb.ID] = append(out[sb.ID], ctr{Name: sb.Hostname, Node: sb.Node, State: sb.State})
	}
	return out, nil
}

// containersOf lists the containers (any state) labelled with sandbox id,
// on any node.
func containersOf(ctx context.Context, id string) ([]ctr, error) {
	if engineFree() {
		cs, err := ociContainers(ctx)
		return cs[id], err
	}
	out, err := docker(ctx, "ps", "-a", "--no-trunc", "--filter", "label="+labelSandbox+"="+id,
		"--format", `{{.Names}} {{.Label "`+labelNode+`"}} {{.State}}`)
	if err != nil {
		return nil, err
	}
	var cs []ctr
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 3 {
			cs = append(cs, ctr{Name: f[0], Node: f[1], State: f[2]})
		}
	}
	return cs, nil
}

// qualifiedName reports whether c's name is a keyed container name
// qualified by its node ("<name>.<node id>") that does not show the
// sandbox id (docker.Runtime.ContainerName). Under --engine oci no engine
// name exists: the keyed host name must not show the id.
func qualifiedName(c ctr, id string) bool {
	if engineFree() {
		return c.Name != "" && !strings.Contains(c.Name, id) && !strings.Contains(c.Name, strings.TrimPrefix(id, "sb-"))
	}
	return strings.HasSuffix(c.Name, "."+c.Node) && !strings.Contains(c.Name, id)
}

// ownerOf is the node whose container runs sandbox id (its node label).
func ownerOf(ctx context.Context, t *testing.T, c *daemontest.Cluster, id string) *daemontest.Daemon {
	t.Helper()
	cs, err := containersOf(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("sandbox %s has %d containers (%+v), want 1", id, len(cs), cs)
	}
	for _, d := range c.Nodes {
		if d.NodeID() == cs[0].Node {
			if !qualifiedName(cs[0], id) {
				t.Errorf("container of %s is named %q, want a keyed name qualified by its node %s", id, cs[0].Name, d.NodeID())
			}
			return d
		}
	}
	t.Fatalf("sandbox %s runs on %s, not a node of this cluster", id, cs[0].Node)
	return nil
}

// nodeCount is how many containers the nodes of c have, in all.
func nodeCount(ctx context.Context, c *daemontest.Cluster) (int, error) {
	n := 0
	if engineFree() {
		cs, err := containersOn(ctx, c.Nodes...)
		for _, l := range cs {
			n += len(l)
		}
		return n, err
	}
	for _, d := range c.Nodes {
		left, err := testenv.NodeContainers(ctx, d.NodeID())
		if err != nil {
			return 0, err
		}
		n += len(left)
	}
	return n, nil
}

// docker runs the docker CLI and returns its standard output.
func docker(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// client is an SDK client of d with d's admin token, one attempt per call
// (a retry would hide which node answered).
func client(d *daemontest.Daemon) *sandboxd.Client {
	return sandboxd.New(d.URL(), d.Token(), sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 1}))
}

// sh runs a shell command in sandbox id through d and returns its stdout,
// failing unless it exits 0.
func sh(ctx context.Context, d *daemontest.Daemon, id, cmd string) (string, error) {
	res, err := client(d).Exec(ctx, id, sandboxd.ExecRequest{Command: cmd, Timeout: time.Minute})
	if err != nil {
		return "", fmt.Errorf("exec %q in %s through %s: %w", cmd, id, d.NodeID(), err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exec %q in %s through %s: exit %d: %s", cmd, id, d.NodeID(), res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}

// serveHTTP starts busybox httpd on port 8080 of sandbox id (through d),
// serving body at /.
func serveHTTP(ctx context.Context, d *daemontest.Daemon, id, body string) error {
	_, err := sh(ctx, d, id, "mkdir -p /www && echo "+body+" > /www/index.html && httpd -p 8080 -h /www")
	return err
}

// preview GETs the preview URL of port 8080 of sandbox id through d (any
// node), with d's admin token, and returns the answer.
func preview(ctx context.Context, d *daemontest.Daemon, id string) (answer, error) {
	return call(ctx, d, http.MethodGet, "/", nil, "Host", "8080-"+id+".localhost")
}

// wantPreview waits until the preview of id through d answers 200 body.
func wantPreview(ctx context.Context, d *daemontest.Daemon, id, body string) error {
	return testenv.Poll(ctx, testenv.Deadline, func() error {
		a, err := preview(ctx, d, id)
		if err != nil {
			return err
		}
		if a.Status != http.StatusOK || strings.TrimSpace(string(a.Body)) != body {
			return fmt.Errorf("preview of %s through %s: %v, want 200 %s", id, d.NodeID(), a, body)
		}
		return nil
	})
}
