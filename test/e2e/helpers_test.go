package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Labels the Docker runtime puts on every container (docs/design.md section 5).
const (
	labelNode    = "sandboxd.node"
	labelSandbox = "sandboxd.sandbox"
)

// container is one Docker container labelled with a node id.
type container struct {
	SandboxID string // its sandboxd.sandbox label
	State     string // Docker's state: created, running, exited, …
}

// nodeContainers lists every container, in any state, labelled with
// nodeID, keyed by sandbox id; under --engine oci (daemontest.TestEngine),
// the sandboxes of that node the oci runtime runs (ociSandboxes).
func nodeContainers(ctx context.Context, nodeID string) (map[string]container, error) {
	if daemontest.TestEngine() == "oci" {
		return ociSandboxes(ctx, nodeID)
	}
	return engineContainers(ctx, nodeID)
}

// engineContainers lists the engine's containers labelled with nodeID.
func engineContainers(ctx context.Context, nodeID string) (map[string]container, error) {
	out, err := docker(ctx, "ps", "-a", "--no-trunc",
		"--filter", "label="+labelNode+"="+nodeID,
		"--format", `{{.Label "`+labelSandbox+`"}} {{.State}}`)
	if err != nil {
		return nil, err
	}
	cs := map[string]container{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		id, state, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if id == "" {
			continue
		}
		cs[id] = container{SandboxID: id, State: state}
	}
	return cs, sc.Err()
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

// newClient returns an SDK client for d. Without retry it makes exactly one
// attempt per call, which tests that kill the daemon need: a retry could
// land on the next daemon process.
func newClient(d *daemonProcess, retry bool) *sandboxd.Client {
	opts := []sandboxd.Option{sandboxd.WithUserAgent("sandboxd-e2e")}
	if !retry {
		opts = append(opts, sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 1}))
	}
	return sandboxd.New(d.URL(), d.Token(), opts...)
}

// listAll returns every sandbox the client sees, walking all pages.
func listAll(ctx context.Context, c *sandboxd.Client, opts sandboxd.ListOptions) ([]sandboxd.Sandbox, error) {
	var out []sandboxd.Sandbox
	for sb, err := range c.AllSandboxes(ctx, opts) {
		if err != nil {
			return nil, err
		}
		out = append(out, *sb)
	}
	return out, nil
}

// metricValue scrapes GET /metrics and returns the value of the sample
// whose name and labels are exactly series (for example
// `sandboxd_sandboxes{state="creating"}`), and whether it was present,
// with the admin token tok.
func metricValue(ctx context.Context, baseURL, tok, series string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, true, err
		}
	}
	return 0, false, sc.Err()
}

// createTestSandbox creates a small busybox sandbox through c and destroys
// it at the end of t.
func createTestSandbox(ctx context.Context, t *testing.T, c *sandboxd.Client, req sandboxd.CreateRequest) *sandboxd.Sandbox {
	t.Helper()
	if req.Image == "" && req.Template == "" {
		req.Image = busyboxImage
	}
	if req.CPU == 0 {
		req.CPU = 0.25
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = 128
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox(%+v): %v", req, err)
	}
	destroyAtEnd(t, c, sb.ID)
	return sb
}

// destroyAtEnd destroys sandbox id when t ends, unless it is gone already.
func destroyAtEnd(t *testing.T, c *sandboxd.Client, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DestroySandbox(ctx, id); err != nil && !isNotFound(err) {
			t.Errorf("cleanup: destroy %s: %v", id, err)
		}
	})
}

// writeRandomFile writes size random bytes to a new file in dir and
// returns its path and SHA-256.
func writeRandomFile(t *testing.T, dir string, size int64) (path, sum string) {
	t.Helper()
	path = filepath.Join(dir, "random.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, size); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, hex.EncodeToString(h.Sum(nil))
}

// sha256File returns the SHA-256 of a file and its size.
func sha256File(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// isNotFound reports whether err is the API's not_found.
func isNotFound(err error) bool { return errors.Is(err, sandboxd.ErrNotFound) }

// ociSandboxes lists the sandboxes of nodeID that the oci runtime runs in
// the --oci-dir of any daemon of the tests, as containers
// (state "running" or "exited", as the engine says them).
func ociSandboxes(ctx context.Context, nodeID string) (map[string]container, error) {
	cs := map[string]container{}
	for _, dir := range env.dt.OCIDirs() {
		if _, err := os.Stat(filepath.Join(dir, "sandboxes")); err != nil {
			continue
		}
		rt, err := oci.New(oci.Options{NodeID: nodeID, Dir: dir, SocketRoot: filepath.Join(os.TempDir(), "sbx-e2e-unused")})
		if err != nil {
			return nil, err
		}
		list, err := rt.ListOurs(ctx)
		rt.Close()
		if err != nil {
			return nil, err
		}
		for _, in := range list {
			state := string(in.State)
			if in.Paused {
				state = "paused"
			}
			cs[in.SandboxID] = container{SandboxID: in.SandboxID, State: state}
		}
	}
	return cs, nil
}
