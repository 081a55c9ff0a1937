package e2e_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestOCIEngine_Smoke: a daemon started with --engine oci runs sandboxes
// with an OCI runtime directly (no container in the engine): create, exec,
// a file written through the API and read by a process, destroy; nothing
// is left in its OCI directory nor in the engine.
func TestOCIEngine_Smoke(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "oci", "--engine", "oci")
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	if sb.State != "running" {
		t.Fatalf("created sandbox state %q, want running", sb.State)
	}
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo hello from $(hostname | cut -c1-8); cat /proc/1/cmdline | tr '\\0' ' '"})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if !strings.HasPrefix(res.Stdout, "hello from sandbox-") || !strings.Contains(res.Stdout, "/opt/sandboxd/toolboxd") || res.ExitCode != 0 {
		t.Errorf("exec = %+v, want a greeting from a keyed host name and the agent as PID 1", res)
	}
	if err := c.UploadFile(ctx, sb.ID, "/tmp/oci-smoke.txt", strings.NewReader("written through the API\n")); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /tmp/oci-smoke.txt"}); err != nil || res.Stdout != "written through the API\n" {
		t.Errorf("cat the uploaded file = %+v, %v", res, err)
	}
	fr, err := c.DownloadFile(ctx, sb.ID, "/tmp/oci-smoke.txt")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	b, _ := io.ReadAll(fr)
	fr.Close()
	if string(b) != "written through the API\n" {
		t.Errorf("download = %q", b)
	}
	if left, err := engineContainers(ctx, d.NodeID()); err != nil || len(left) > 0 {
		t.Errorf("the engine holds containers of the oci daemon: %v, %v", left, err)
	}
	sandboxes := filepath.Join(d.OCIDir(), "sandboxes")
	if _, err := os.Stat(filepath.Join(sandboxes, sb.ID, "config.json")); err != nil {
		t.Errorf("no OCI bundle for the sandbox: %v", err)
	}
	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if _, err := c.GetSandbox(ctx, sb.ID); !isNotFound(err) {
		t.Errorf("get after destroy = %v, want not found", err)
	}
	if entries, err := os.ReadDir(sandboxes); err != nil || len(entries) > 0 {
		t.Errorf("the OCI directory still holds %v (%v)", entries, err)
	}
}

// requireOCI skips t where --engine oci cannot run.
func requireOCI(t *testing.T) {
	t.Helper()
	requireDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: --engine oci needs root")
	}
	if _, err := exec.LookPath("crun"); err != nil {
		if _, err := exec.LookPath("runc"); err != nil {
			t.Skip("SKIP: --engine oci needs crun or runc (scripts/setup-oci.sh installs crun)")
		}
	}
}

// TestOCIEngine_SurvivesDaemonSIGKILL: under --engine oci a daemon killed
// with SIGKILL leaves its sandbox running; the restarted daemon serves it
// (exec, stop, start) and destroys it, leaving nothing in its directory.
func TestOCIEngine_SurvivesDaemonSIGKILL(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "ocikill", "--engine", "oci")
	c := newClient(d, true)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo before > /tmp/mark"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(ctx); err != nil { // SIGKILL, then start again
		t.Fatalf("restart: %v", err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("after the SIGKILL: %+v, %v; want running", got, err)
	}
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /tmp/mark"})
	if err != nil || res.Stdout != "before\n" {
		t.Fatalf("exec after the SIGKILL = %+v, %v; want the file written before", res, err)
	}
	if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("start: %v", err)
	}
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /tmp/mark"}); err != nil || res.Stdout != "before\n" {
		t.Fatalf("exec after stop and start = %+v, %v", res, err)
	}
	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	sandboxes := filepath.Join(d.OCIDir(), "sandboxes")
	if entries, err := os.ReadDir(sandboxes); err != nil || len(entries) > 0 {
		t.Errorf("the OCI directory still holds %v (%v)", entries, err)
	}
}

// TestOCIEngine_Network: with --sandbox-network, a sandbox of --engine oci
// that asks for network gets eth0 on the daemon's bridge and a default
// route; one that does not has loopback only. Both go without a trace.
func TestOCIEngine_Network(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	ctx := testContext(t, 5*time.Minute)
	bridge := "sbo" + strconv.Itoa(os.Getpid()%100000)
	d := startDaemon(t, "ocinet", "--engine", "oci", "--sandbox-network", "--sandbox-network-name", bridge)
	t.Cleanup(func() {
		// The daemon keeps its firewall chains when it stops (its
		// sandboxes may run on): this test's bridge is going away.
		if err := netpolicy.New(netpolicy.Options{Bridge: bridge}).Teardown(context.Background()); err != nil {
			t.Errorf("firewall teardown: %v", err)
		}
		_, _ = docker(context.Background(), "network", "rm", bridge)
		_ = os.Remove(filepath.Join("/run/sandboxd-oci", bridge)) // its address leases, empty by now
	})
	c := newClient(d, true)
	withNet := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Network: true})
	without := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	res, err := c.Exec(ctx, withNet.ID, sandboxd.ExecRequest{Command: "ls /sys/class/net | sort | tr '\\n' ' '; ip route | grep -c default"})
	if err != nil || res.Stdout != "eth0 lo 1\n" {
		t.Errorf("with network: %+v, %v; want eth0, lo and a default route", res, err)
	}
	res, err = c.Exec(ctx, without.ID, sandboxd.ExecRequest{Command: "ls /sys/class/net | tr '\\n' ' '"})
	if err != nil || res.Stdout != "lo " {
		t.Errorf("without network: %+v, %v; want lo only", res, err)
	}
	for _, id := range []string{withNet.ID, without.ID} {
		if err := c.DestroySandbox(ctx, id); err != nil {
			t.Fatalf("destroy %s: %v", id, err)
		}
	}
	if out, _ := exec.Command("ip", "-o", "link", "show", "master", bridge).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("ports left on the bridge: %s", out)
	}
}
