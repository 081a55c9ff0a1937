package oci_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// testNetwork makes a sandbox bridge of the test's own on the engine (as
// the daemon makes its own, through the Docker runtime) and removes it
// when the test ends.
func testNetwork(t *testing.T) *oci.Network {
	t.Helper()
	drt, err := docker.New(docker.Options{Client: env.cli, NodeID: "oci-net-test", SocketRoot: filepath.Join(env.socketRoot, "docker")})
	if err != nil {
		t.Fatal(err)
	}
	name := "sbo" + runtimetest.NewSandboxID()[3:13]
	n, err := drt.EnsureNetwork(t.Context(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testenv.RemoveNetwork(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return &oci.Network{Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway,
		Resolvers: netpolicy.HostResolvers(nil), LeaseDir: filepath.Join(t.TempDir(), "leases")}
}

func execIn(t *testing.T, rt *oci.Runtime, id, script string) string {
	t.Helper()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, "tok-"+id)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// TestNetwork_VethOnTheBridge: a sandbox with network has eth0 on the
// bridge, with an address of its own the host reaches; one without has
// loopback only; a restarted runtime hands out no leased address again;
// Destroy removes the veth, the namespace and the lease.
func TestNetwork_VethOnTheBridge(t *testing.T) {
	requireEnv(t)
	nw := testNetwork(t)
	node := "node-" + runtimetest.NewSandboxID()[3:]
	rt := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *oci.Options) { o.Network = nw })
	ctx := t.Context()

	idA, idB := runtimetest.NewSandboxID(), runtimetest.NewSandboxID()
	specA := spec(idA)
	specA.Network = true
	if _, err := rt.Create(ctx, specA); err != nil {
		t.Fatalf("Create with network: %v", err)
	}
	if _, err := rt.Create(ctx, spec(idB)); err != nil {
		t.Fatalf("Create without network: %v", err)
	}
	ipA, err := rt.SandboxIP(ctx, idA)
	if err != nil || !nw.Subnet.Contains(ipA) || ipA == nw.Gateway {
		t.Fatalf("SandboxIP(A) = %v, %v; want an address of %s", ipA, err, nw.Subnet)
	}
	if ip, _ := rt.SandboxIP(ctx, idB); ip.IsValid() {
		t.Errorf("SandboxIP of a sandbox without network = %v", ip)
	}
	if got := execIn(t, rt, idA, "ls /sys/class/net | sort | tr '\\n' ' '; grep -c nameserver /etc/resolv.conf"); !strings.HasPrefix(got, "eth0 lo ") || strings.HasSuffix(got, "0\n") {
		t.Errorf("in A: interfaces and nameservers = %q, want eth0 and lo, and a nameserver", got)
	}
	if got := execIn(t, rt, idB, "ls /sys/class/net | tr '\\n' ' '"); got != "lo " {
		t.Errorf("in B (no network): interfaces = %q, want lo only", got)
	}
	execIn(t, rt, idA, "mkdir -p /tmp/w && echo hi-from-a > /tmp/w/index.html && httpd -p 8080 -h /tmp/w")
	hc := &http.Client{Timeout: 30 * time.Second}
	if resp, err := hc.Get("http://" + netip.AddrPortFrom(ipA, 8080).String() + "/"); err != nil {
		t.Errorf("the host does not reach A at %s: %v", ipA, err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hi-from-a\n" {
			t.Errorf("A's server answered %q", b)
		}
	}

	// Usage: A's traffic and what it wrote.
	execIn(t, rt, idA, "dd if=/dev/zero of=/big bs=1M count=8 2>/dev/null; sync")
	u, err := rt.Usage(ctx, idA)
	if err != nil || u.NetRx == 0 || u.NetTx == 0 {
		t.Errorf("Usage(A) = %+v, %v; want bytes received and sent", u, err)
	}
	if lim, _ := rt.DiskLimits(ctx); lim.Enforced && (u.DiskUsed < 8<<20 || u.DiskUsed > 64<<20) {
		t.Errorf("Usage(A).DiskUsed = %d after writing 8 MiB", u.DiskUsed)
	}

	// A restarted daemon (a new runtime on the same directory) leases
	// another address.
	rt2 := newRuntime(t, runtimetest.Options{NodeID: node + "-b"}, func(o *oci.Options) { o.Network = nw })
	idC := runtimetest.NewSandboxID()
	specC := spec(idC)
	specC.Network = true
	if _, err := rt2.Create(ctx, specC); err != nil {
		t.Fatalf("Create C: %v", err)
	}
	if ipC, _ := rt2.SandboxIP(ctx, idC); ipC == ipA || !ipC.IsValid() {
		t.Errorf("C got %v, A holds %v: want different addresses", ipC, ipA)
	}

	nsBefore, _ := filepath.Glob("/run/netns/sbxo-*")
	if err := rt.Destroy(ctx, idA); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nw.LeaseDir, ipA.String())); err == nil {
		t.Errorf("A's lease is still there")
	}
	if b, _ := exec.Command("ip", "-o", "link", "show", "master", nw.Bridge).CombinedOutput(); strings.Count(string(b), "\n") != 1 {
		t.Errorf("ports of the bridge after A's destroy (want C's only):\n%s", b)
	}
	if nsAfter, _ := filepath.Glob("/run/netns/sbxo-*"); len(nsAfter) != len(nsBefore)-1 {
		t.Errorf("network namespaces: %d before A's destroy, %d after; want one fewer", len(nsBefore), len(nsAfter))
	}
}

// TestNetwork_NoIPv6: a networked sandbox has no IPv6 address at all (the
// IPv4 firewall does not see IPv6, so a link-local fe80:: address reached
// other sandboxes and the host's listeners on [::]); A finds no route to
// B's nor to the bridge's link-local address.
func TestNetwork_NoIPv6(t *testing.T) {
	requireEnv(t)
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		t.Skip("no IPv6 in this kernel")
	}
	nw := testNetwork(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Network = nw })
	ctx := t.Context()
	var ids []string
	for range 2 {
		id := runtimetest.NewSandboxID()
		s := spec(id)
		s.Network = true
		if _, err := rt.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		got := execIn(t, rt, id, "cat /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6 /proc/sys/net/ipv6/conf/eth0/disable_ipv6 | tr '\\n' ' '; cat /proc/net/if_inet6")
		if got != "1 1 1 " {
			t.Errorf("in %s: disable_ipv6 all, default, eth0 and the IPv6 addresses = %q, want \"1 1 1 \" and none", id, got)
		}
	}
	// The bridge's link-local address, as a host listener on [::] is on it.
	br, err := net.InterfaceByName(nw.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := br.Addrs()
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || !p.Addr().Is6() || !p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if got := execIn(t, rt, ids[0], "ping -6 -c 1 -W 2 "+p.Addr().String()+"%eth0 >/dev/null 2>&1 && echo REACHED"); strings.Contains(got, "REACHED") {
			t.Errorf("A reaches the bridge's link-local %s over IPv6", p.Addr())
		}
	}
}

// TestNetwork_StartAfterRebootWithTheAddressTaken: a stopped sandbox
// whose namespace is gone (a reboot) and whose address another sandbox
// leased meanwhile starts with a new address, which SandboxIP reports.
func TestNetwork_StartAfterRebootWithTheAddressTaken(t *testing.T) {
	requireEnv(t)
	nw := testNetwork(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Network = nw })
	ctx := t.Context()
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Network = true
	if _, err := rt.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	old, _ := rt.SandboxIP(ctx, id)
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The reboot: namespace, veth and leases gone; then another
	// sandbox (a directory that exists) leases the old address.
	ns, veth := oci.NetNames(filepath.Join(env.dir, "sandboxes", id))
	for _, c := range [][]string{{"link", "del", veth}, {"netns", "del", ns}} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(nw.LeaseDir, old.String()), []byte(t.TempDir()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start with the old address taken: %v", err)
	}
	ip, err := rt.SandboxIP(ctx, id)
	if err != nil || !ip.IsValid() || ip == old {
		t.Fatalf("SandboxIP after Start = %v, %v; want a new address (the old %v is taken)", ip, err, old)
	}
	if got := execIn(t, rt, id, "ip -4 -o addr show eth0"); !strings.Contains(got, " "+ip.String()+"/") {
		t.Errorf("eth0 in the sandbox: %q, want %v", got, ip)
	}
}
