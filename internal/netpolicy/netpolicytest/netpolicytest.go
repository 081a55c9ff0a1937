// Package netpolicytest gives a test a sandbox network of its own: a
// bridge (traffic between its containers off), the firewall on it and
// its name proxy, all removed when the test ends.
package netpolicytest

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// New makes the network name (an interface name: at most 15 bytes) on
// drt's engine, with its firewall and name proxy. Its name rules may reach
// the test's network namespaces (testenv.NetNSRange). Register it before
// the cleanup that removes the test's containers: cleanups run last
// first, and a network with containers is not removed.
func New(t *testing.T, drt *docker.Runtime, name string) netpolicy.Addressed {
	t.Helper()
	n, err := drt.EnsureNetwork(t.Context(), name, name)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	fw := netpolicy.New(netpolicy.Options{
		Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway, ProxyPort: ln.Addr().(*net.TCPAddr).Port,
		Resolvers:        netpolicy.HostResolvers(nil),
		PrivateReachable: []netip.Prefix{testenv.NetNSRange},
	})
	go netpolicy.NewProxy(fw, nil, nil).Serve(ln)
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := fw.Teardown(ctx); err != nil {
			t.Errorf("firewall teardown: %v", err)
		}
		if err := testenv.RemoveNetwork(ctx, name); err != nil {
			t.Error(err)
		}
	})
	if err := fw.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return netpolicy.Addressed{Firewall: fw, IPOf: drt.SandboxIP}
}
