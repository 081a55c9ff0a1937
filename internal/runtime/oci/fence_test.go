package oci_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// oldNetwork makes a sandbox network as a daemon before the fence made
// it (no IP range), on a small subnet of its own (/28: the engine's half
// holds 6 containers), and removes it, with its containers, at the end.
func oldNetwork(t *testing.T) (name string, subnet netip.Prefix) {
	t.Helper()
	name = "sbf" + runtimetest.NewSandboxID()[3:13]
	for try := 0; ; try++ {
		subnet = netip.MustParsePrefix(fmt.Sprintf("10.231.%d.%d/28", rand.IntN(256), 16*rand.IntN(16)))
		out, err := exec.Command("docker", "network", "create", "--driver", "bridge", "--subnet", subnet.String(), "--gateway", subnet.Addr().Next().String(),
			"-o", "com.docker.network.bridge.name="+name, "-o", "com.docker.network.bridge.enable_icc=false", name).CombinedOutput()
		if err == nil {
			break
		}
		if try == 5 {
			t.Fatalf("docker network create: %v: %s", err, out)
		}
	}
	t.Cleanup(func() {
		ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "network="+name).Output()
		for _, id := range strings.Fields(string(ids)) {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testenv.RemoveNetwork(ctx, name); err != nil {
			t.Error(err)
		}
	})
	return name, subnet
}

// TestNetwork_EngineFencedFromLeases: a sandbox network EnsureNetwork
// creates is fenced on the subnet the engine picked; the engine then
// gives its containers lower-half addresses only, never one the oci
// runtime leases (upper half); the oci sandboxes keep theirs. (An older
// daemon's network is not fenced: TestNetwork_OldNetworkInUseKept and
// internal/runtime/docker's TestEnsureNetwork_*.)
func TestNetwork_EngineFencedFromLeases(t *testing.T) {
	requireEnv(t)
	name := "sbf" + runtimetest.NewSandboxID()[3:13]
	t.Cleanup(func() {
		ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "network="+name).Output()
		for _, id := range strings.Fields(string(ids)) {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testenv.RemoveNetwork(ctx, name); err != nil {
			t.Error(err)
		}
	})
	drt, err := docker.New(docker.Options{Client: env.cli, NodeID: "oci-fence-test", SocketRoot: filepath.Join(env.socketRoot, "docker")})
	if err != nil {
		t.Fatal(err)
	}
	n, err := drt.EnsureNetwork(t.Context(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	subnet := n.Subnet
	if !n.Fenced {
		t.Fatalf("EnsureNetwork of a new network = %+v, want it fenced", n)
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) {
		o.Network = &oci.Network{Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway,
			Resolvers: netpolicy.HostResolvers(nil), LeaseDir: filepath.Join(t.TempDir(), "leases")}
	})
	leased := map[netip.Addr]bool{}
	for range 3 {
		id := runtimetest.NewSandboxID()
		s := spec(id)
		s.Network = true
		if _, err := rt.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		ip, err := rt.SandboxIP(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		leased[ip] = true
	}
	upper := netip.PrefixFrom(subnet.Masked().Addr(), subnet.Bits()+1)
	upper = netip.PrefixFrom(lastOf(upper).Next(), upper.Bits())
	var engine []netip.Addr
	for i := range 4 {
		out, err := exec.Command("docker", "run", "-d", "--network", name, "--label", "sandboxd.test=fence", testImage, "sleep", "600").CombinedOutput()
		if err != nil {
			t.Fatalf("container %d on the fenced network: %v: %s", i, err, out)
		}
		id := strings.TrimSpace(string(out))
		ipOut, err := exec.Command("docker", "inspect", "-f", "{{(index .NetworkSettings.Networks \""+name+"\").IPAddress}}", id).Output()
		if err != nil {
			t.Fatal(err)
		}
		ip, err := netip.ParseAddr(strings.TrimSpace(string(ipOut)))
		if err != nil {
			t.Fatalf("container %d's address %q: %v", i, ipOut, err)
		}
		engine = append(engine, ip)
	}
	for _, ip := range engine {
		if upper.Contains(ip) || leased[ip] {
			t.Errorf("the engine gave a container %s, in the oci runtime's half %s (leased: %v)", ip, upper, leased)
		}
	}
	for ip := range leased {
		if !upper.Contains(ip) {
			t.Errorf("the oci runtime leased %s, outside its half %s", ip, upper)
		}
	}
}

// TestNetwork_OldNetworkInUseKept: a network of an older daemon that an
// engine container is on is used as it is, unfenced: the container keeps
// its network.
func TestNetwork_OldNetworkInUseKept(t *testing.T) {
	requireEnv(t)
	name, subnet := oldNetwork(t)
	out, err := exec.Command("docker", "run", "-d", "--network", name, "--label", "sandboxd.test=fence", testImage, "sleep", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	drt, err := docker.New(docker.Options{Client: env.cli, NodeID: "oci-fence-test", SocketRoot: filepath.Join(env.socketRoot, "docker")})
	if err != nil {
		t.Fatal(err)
	}
	n, err := drt.EnsureNetwork(t.Context(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Fenced || n.Subnet != subnet {
		t.Errorf("EnsureNetwork of a network in use = %+v, want it as it was (unfenced, %s)", n, subnet)
	}
	id := strings.TrimSpace(string(out))
	if got, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}} {{len .NetworkSettings.Networks}}", id).Output(); strings.TrimSpace(string(got)) != "true 1" {
		t.Errorf("the container on the old network: %q, want running on it", got)
	}
}

// lastOf is the last address of an IPv4 prefix.
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
