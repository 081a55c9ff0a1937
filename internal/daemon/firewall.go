package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/service"
)

// openFirewall makes the sandboxes' network (a bridge of the daemon's own,
// traffic between its containers off) and installs the firewall's base
// rules on it: from here on a sandbox on it reaches nothing until its
// policy is applied.
func openFirewall(ctx context.Context, drt *docker.Runtime, name string, log *slog.Logger) (service.Firewall, func() error, error) {
	n, err := drt.EnsureNetwork(ctx, name, name)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox network: %w", err)
	}
	// The name proxy answers on the host's address on the bridge only;
	// the firewall lets sandboxes reach that port and nothing else of the
	// host's.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway, 0).String())
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox network %s: the name proxy: %w", name, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	resolvConf, _ := os.ReadFile("/etc/resolv.conf") // none: the engine's defaults
	fw := netpolicy.New(netpolicy.Options{
		Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway, ProxyPort: port, Logger: log,
		Resolvers: netpolicy.HostResolvers(resolvConf),
	})
	if err := fw.Setup(ctx); err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("sandbox network %s: %w", name, err)
	}
	go func() {
		if err := netpolicy.NewProxy(fw, log, nil).Serve(ln); err != nil {
			log.Error("the sandboxes' name proxy stopped", "err", err)
		}
	}()
	log.Info("sandbox network ready", "network", n.Name, "subnet", n.Subnet, "gateway", n.Gateway, "name_proxy_port", port)
	return netpolicy.Addressed{Firewall: fw, IPOf: drt.SandboxIP}, ln.Close, nil
}
