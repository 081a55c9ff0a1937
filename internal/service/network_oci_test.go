package service_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// newOCIRuntime is the harness's runtime with harnessOptions.oci: an
// oci.Runtime of the node on the test's bridge (when it has one), whose
// addresses the firewall asks for. Its sandboxes go when the test ends. Its checkpoint images are sealed by sealer (the harness's keyring).
func newOCIRuntime(t *testing.T, nodeID, sockRoot string, drt *docker.Runtime, netName string, firewall *service.Firewall, sealer oci.ImageSealer) *oci.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the oci runtime needs root")
	}
	if _, err := exec.LookPath("crun"); err != nil {
		if _, err := exec.LookPath("runc"); err != nil {
			t.Skip("SKIP: the oci runtime needs crun or runc (scripts/setup-oci.sh)")
		}
	}
	dir := t.TempDir()
	opts := oci.Options{NodeID: nodeID, Dir: filepath.Join(dir, "oci"), SocketRoot: sockRoot + "o", ImageSealer: sealer}
	if netName != "" {
		n, err := drt.EnsureNetwork(t.Context(), netName, netName)
		if err != nil {
			t.Fatal(err)
		}
		opts.Network = &oci.Network{Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway,
			Resolvers: netpolicy.HostResolvers(nil), LeaseDir: filepath.Join(dir, "leases")}
	}
	ort, err := oci.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := (*firewall).(netpolicy.Addressed); ok {
		a.IPOf = ort.SandboxIP
		*firewall = a
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ins, _ := ort.ListOurs(ctx)
		for _, in := range ins {
			if err := ort.Destroy(ctx, in.SandboxID); err != nil {
				t.Errorf("cleanup: destroy %s: %v", in.SandboxID, err)
			}
		}
		ort.Close()
		os.RemoveAll(opts.SocketRoot)
	})
	return ort
}

// ociImages are the engine's images, with commits of the oci runtime's
// sandboxes (the daemon's, internal/daemon).
type ociImages struct {
	*docker.Runtime
	oci *oci.Runtime
}

// Commit implements runtime.Images.
func (i ociImages) Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (runtime.Image, error) {
	return i.oci.Commit(ctx, sandboxID, ref, cfg)
}

// TestNetwork_OCIEngineUnderTheSameFirewall: sandboxes the oci runtime
// runs on the bridge are held by the same firewall as the engine's: a
// restricted one reaches its allow list only, none reaches another
// sandbox or the host, and an open one reaches out.
func TestNetwork_OCIEngineUnderTheSameFirewall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true, oci: true})
	ns := testenv.NewNetNS(t, 2)
	a, b := ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, a, serverPort)
	ns.Serve(t, b, serverPort)
	alice := service.Caller{Owner: "alice"}

	open := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeOpen})
	if !reaches(t, h, alice, open.ID, a, serverPort) || !reaches(t, h, alice, open.ID, b, serverPort) {
		t.Fatal("an open sandbox does not reach the test's servers")
	}
	s := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{a.String()}})
	if !reaches(t, h, alice, s.ID, a, serverPort) {
		t.Error("restricted to A: A does not answer")
	}
	if reaches(t, h, alice, s.ID, b, serverPort) {
		t.Error("restricted to A: B answers")
	}

	// No traffic between sandboxes: a server in the open one.
	p, err := h.svc.StartProcess(t.Context(), alice, open.ID, service.ProcessRequest{Command: "while true; do printf 'HTTP/1.0 200 OK\\r\\n\\r\\nhi' | nc -l -p 9000; done"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	res, err := h.svc.Exec(t.Context(), alice, open.ID, service.ExecRequest{Command: "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"})
	if err != nil {
		t.Fatal(err)
	}
	addrOpen, err := netip.ParseAddr(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("the open sandbox's address %q: %v", res.Stdout, err)
	}
	eventually(t, "the open sandbox serves on its loopback", func() bool {
		return reaches(t, h, alice, open.ID, netip.MustParseAddr("127.0.0.1"), 9000)
	})
	other := createWith(t, h, "bob", netpolicy.Policy{Mode: netpolicy.ModeOpen})
	bob := service.Caller{Owner: "bob"}
	if reaches(t, h, bob, other.ID, addrOpen, 9000) {
		t.Error("bob's sandbox reaches alice's")
	}

	// Nor the host, on the bridge's address.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\nhost")
			c.Close()
		}
	}()
	res, err = h.svc.Exec(t.Context(), bob, other.ID, service.ExecRequest{Command: "ip route | awk '/default/ {print $3}'"})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := netip.ParseAddr(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("the sandbox's gateway %q: %v", res.Stdout, err)
	}
	if reaches(t, h, bob, other.ID, gw, ln.Addr().(*net.TCPAddr).Port) {
		t.Error("a sandbox reaches a server on the host")
	}
}

// TestNetwork_OCIPolicyCutsTheConnectionsItNoLongerAllows is
// TestNetwork_PolicyCutsTheConnectionsItNoLongerAllows on the oci runtime.
func TestNetwork_OCIPolicyCutsTheConnectionsItNoLongerAllows(t *testing.T) {
	t.Parallel()
	testConnectionsCut(t, newHarness(t, harnessOptions{network: true, oci: true}))
}
