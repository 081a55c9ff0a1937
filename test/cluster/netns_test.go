package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// netns is a network namespace of the test's, removed at its end.
type netns struct{ name, addr string }

// exec runs name args... inside the namespace and returns its combined
// output.
func (n netns) exec(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	cmd.Env = daemontest.HermeticEnv()
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// twoNamespaces makes two network namespaces joined by a veth pair, with
// addresses 10.228.<x>.1 and .2 that exist only inside them, or skips t
// when namespaces cannot be made here (not root, no ip).
func twoNamespaces(t *testing.T) (a, b netns) {
	t.Helper()
	suffix := randomHex(t)[:6]
	x, _ := strconv.ParseUint(suffix[:2], 16, 8)
	a = netns{name: "etls-a-" + suffix, addr: fmt.Sprintf("10.228.%d.1", x)}
	b = netns{name: "etls-b-" + suffix, addr: fmt.Sprintf("10.228.%d.2", x)}
	va, vb := "etva"+suffix, "etvb"+suffix
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("netns", "add", a.name); err != nil {
		t.Skipf("skipping: cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", a.name) })
	if err := ip("netns", "add", b.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", b.name) }) // takes the veth pair with it
	for _, args := range [][]string{
		{"link", "add", va, "type", "veth", "peer", "name", vb},
		{"link", "set", va, "netns", a.name},
		{"link", "set", vb, "netns", b.name},
		{"-n", a.name, "addr", "add", a.addr + "/24", "dev", va},
		{"-n", b.name, "addr", "add", b.addr + "/24", "dev", vb},
		{"-n", a.name, "link", "set", va, "up"},
		{"-n", b.name, "link", "set", vb, "up"},
		{"-n", a.name, "link", "set", "lo", "up"},
		{"-n", b.name, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// startIn starts sandboxd on dataDir inside ns (API on the namespace's
// loopback; the LAN pass runs nodes whose API is beyond it) and waits for
// /readyz; it is stopped at the end of t. It runs the run's engine
// (daemontest.TestEngine), as every other node does; it makes no
// sandbox (under --engine oci one would need the host's cgroup
// hierarchies in the namespace's mounts, which daemontest's LAN hosts
// get).
func startIn(ctx context.Context, t *testing.T, ns netns, dataDir, nodeID string, hostPorts int) {
	t.Helper()
	logPath := filepath.Join(dataDir, "sandboxd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("ip", "netns", "exec", ns.name, env.dt.Bins.Sandboxd,
		"--engine", daemontest.TestEngine(),
		"--data-dir", dataDir, "--node-id", nodeID, "--listen", "127.0.0.1:7070",
		"--agent-binary", env.dt.Bins.Toolboxd, "--pool", "none",
		"--host-ports", fmt.Sprintf("%d-%d", hostPorts, hostPorts+39))
	cmd.Env = daemontest.HermeticEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("node %s log:\n%s", nodeID, lastLines(string(b), 30))
		}
	})
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done: // the node exited: stop waiting for it
			cancel()
		case <-pctx.Done():
		}
	}()
	err = testenv.Poll(pctx, daemontest.StartTimeout, func() error {
		_, err := ns.exec(pctx, "curl", "-fsS", "-m", "2", "http://127.0.0.1:7070/readyz")
		return err
	})
	if err != nil {
		t.Fatalf("node %s in %s: %v", nodeID, ns.name, err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Two nodes, each in its own network namespace, form a cluster by address
// (10.228.x.1 and .2, which exist only inside the namespaces): etcd's
// client and peer traffic crosses the veth pair over TLS with the
// cluster's certificates, an admin token made on one node works on the
// other, and from the second namespace etcd refuses a client in clear or
// without a certificate.
func TestCluster_TwoNamespacesByAddress(t *testing.T) {
	requireDocker(t)
	a, b := twoNamespaces(t)
	ctx := testContext(t, 4*daemontest.StartTimeout)
	dirA, dirB := t.TempDir(), t.TempDir()
	idA, idB := "etlsa"+randomHex(t)[:6], "etlsb"+randomHex(t)[:6]
	for dir, id := range map[string]string{dirA: idA, dirB: idB} {
		if err := os.WriteFile(filepath.Join(dir, "node-id"), []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := a.exec(ctx, env.dt.Bins.Sandboxd, "cluster", "init", "--data-dir", dirA,
		"--etcd-client", a.addr+":2379", "--etcd-peer", a.addr+":2380"); err != nil {
		t.Fatalf("init in %s: %v: %s", a.name, err, out)
	}
	ports := env.dt.PortBase + 4000
	startIn(ctx, t, a, dirA, idA, ports)
	// The API listens on loopback here, so the join's certificate request
	// runs where it reaches node A's API; the new member then peers with
	// A's across the namespaces, by address.
	if out, err := a.exec(ctx, env.dt.Bins.Sandboxd, "cluster", "join", "--data-dir", dirB,
		"--secret-file", filepath.Join(dirA, "cluster.secret"), "--via-api", "http://127.0.0.1:7070",
		"--etcd-client", b.addr+":2379", "--etcd-peer", b.addr+":2380"); err != nil {
		t.Fatalf("join: %v: %s", err, out)
	}
	startIn(ctx, t, b, dirB, idB, ports+40)

	err := testenv.Poll(ctx, daemontest.StartTimeout, func() error {
		table, err := b.exec(ctx, env.dt.Bins.Sandboxd, "cluster", "members", "--data-dir", dirB)
		if err != nil {
			return fmt.Errorf("%w: %s", err, table)
		}
		for _, want := range []string{"https://" + a.addr + ":2379", "https://" + b.addr + ":2379", idA, idB} {
			if !strings.Contains(table, want) || strings.Count(table, "http://127.0.0.1:7070") != 2 {
				return fmt.Errorf("members lack %s or a live node:\n%s", want, table)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tokenA, err := os.ReadFile(filepath.Join(dirA, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.exec(ctx, "curl", "-fsS", "-m", "5", "-H", "Authorization: Bearer "+strings.TrimSpace(string(tokenA)), "http://127.0.0.1:7070/v1/cluster/nodes")
	if err != nil || !strings.Contains(out, idA) {
		t.Errorf("node A's admin token on node B: %v: %s", err, out)
	}
	// From B's namespace, A's etcd in clear and over TLS without a
	// client certificate: no answer (curl fails), let alone a write.
	put := `{"key":"` + "L3NhbmRib3hkL3YxL3Rva2VuaGFzaC94" + `","value":"eA=="}`
	for _, url := range []string{"http://" + a.addr + ":2379/v3/kv/put", "https://" + a.addr + ":2379/v3/kv/put"} {
		if out, err := b.exec(ctx, "curl", "-sS", "-k", "-m", "5", "-X", "POST", url, "-d", put); err == nil {
			t.Errorf("POST %s without a certificate answered: %s", url, out)
		}
	}
	// With B's own certificate the same etcd answers: the refusals above
	// are the missing certificate, not the route.
	if out, err := b.exec(ctx, "curl", "-fsS", "-m", "5", "--cacert", filepath.Join(dirB, "etcd-ca.crt"),
		"--cert", filepath.Join(dirB, "etcd-node.crt"), "--key", filepath.Join(dirB, "etcd-node.key"),
		"-X", "POST", "https://"+a.addr+":2379/v3/kv/range", "-d", `{"key":"eA=="}`); err != nil {
		t.Errorf("A's etcd with B's certificate: %v: %s", err, out)
	}
}
