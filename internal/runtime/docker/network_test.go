package docker_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// dockerCmd runs the docker CLI and returns its trimmed output.
func dockerCmd(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// removeNetworkAtEnd removes the network name, and every container on it,
// when the test ends, failed or not.
func removeNetworkAtEnd(t *testing.T, name string) {
	t.Cleanup(func() {
		ids, _ := dockerCmd("ps", "-aq", "--filter", "network="+name)
		for _, id := range strings.Fields(ids) {
			_, _ = dockerCmd("rm", "-f", id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testenv.RemoveNetwork(ctx, name); err != nil {
			t.Error(err)
		}
	})
}

// TestEnsureNetwork_StoppedContainerOnOldNetworkStarts: an older daemon's
// network, unfenced, whose only container is stopped (a stopped or
// hibernated sandbox) is used as it is by EnsureNetwork, not removed and
// made again: the container, tied to the network's id, starts again.
func TestEnsureNetwork_StoppedContainerOnOldNetworkStarts(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	name := "sbn" + runtimetest.NewSandboxID()[3:13]
	removeNetworkAtEnd(t, name)
	if out, err := dockerCmd("network", "create", "-o", "com.docker.network.bridge.name="+name,
		"-o", "com.docker.network.bridge.enable_icc=false", "--label", "sandboxd.managed=1", name); err != nil {
		t.Fatalf("docker network create: %v: %s", err, out)
	}
	c, err := dockerCmd("run", "-d", "--network", name, "--label", "sandboxd.test=fence", testImage, "sleep", "600")
	if err != nil {
		t.Fatalf("docker run: %v: %s", err, c)
	}
	if out, err := dockerCmd("stop", "-t0", c); err != nil {
		t.Fatalf("docker stop: %v: %s", err, out)
	}
	oldID, _ := dockerCmd("network", "inspect", "-f", "{{.ID}}", name)
	drt := newRuntime(t, runtimetest.Options{NodeID: "netfence-" + runtimetest.NewSandboxID()[3:]})
	n, err := drt.EnsureNetwork(t.Context(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Fenced {
		t.Errorf("EnsureNetwork of an older daemon's network = %+v, want it as it was (unfenced)", n)
	}
	if newID, _ := dockerCmd("network", "inspect", "-f", "{{.ID}}", name); newID != oldID {
		t.Errorf("EnsureNetwork made the network again: id %.12s -> %.12s", oldID, newID)
	}
	if out, err := dockerCmd("start", c); err != nil {
		t.Errorf("the stopped container of the old network does not start after EnsureNetwork: %v: %s", err, out)
	}
}

// TestEnsureNetwork_FreshIsFenced: a network EnsureNetwork creates is
// fenced (the engine's IP range is the lower half of its subnet), and
// daemons racing to make it end on the one network, fenced, on one
// subnet.
func TestEnsureNetwork_FreshIsFenced(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	name := "sbn" + runtimetest.NewSandboxID()[3:13]
	removeNetworkAtEnd(t, name)
	const daemons = 3
	var (
		wg   sync.WaitGroup
		got  [daemons]docker.Network
		errs [daemons]error
	)
	for i := range daemons {
		drt := newRuntime(t, runtimetest.Options{NodeID: "netfence-" + runtimetest.NewSandboxID()[3:]})
		wg.Go(func() { got[i], errs[i] = drt.EnsureNetwork(context.WithoutCancel(t.Context()), name, name) })
	}
	wg.Wait()
	for i := range daemons {
		if errs[i] != nil {
			t.Fatalf("EnsureNetwork %d: %v", i, errs[i])
		}
		if !got[i].Fenced || got[i].Subnet != got[0].Subnet {
			t.Errorf("EnsureNetwork %d = %+v, want it fenced on %s (as the first)", i, got[i], got[0].Subnet)
		}
	}
	out, err := dockerCmd("network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{.IPRange}}{{end}}", name)
	if err != nil {
		t.Fatalf("docker network inspect: %v: %s", err, out)
	}
	subnet, ipRange, _ := strings.Cut(out, " ")
	want := netip.PrefixFrom(got[0].Subnet.Masked().Addr(), got[0].Subnet.Bits()+1)
	if subnet != got[0].Subnet.String() || ipRange != want.String() {
		t.Errorf("the engine's network: subnet %q, ip range %q; want %s, %s", subnet, ipRange, got[0].Subnet, want)
	}
	if ids, _ := dockerCmd("network", "ls", "-q", "--filter", "name=^"+name+"$"); len(strings.Fields(ids)) != 1 {
		t.Errorf("networks named %s: %q, want one", name, ids)
	}
}
