package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/service"
)

// openFirewall makes the sandboxes' network (a bridge of the daemon's own,
// traffic between its containers off) and installs the firewall's base
// rules on it: from here on a sandbox on it reaches nothing until its
// policy is applied.
func openFirewall(ctx context.Context, drt *docker.Runtime, name string, log *slog.Logger) (service.Firewall, error) {
	n, err := drt.EnsureNetwork(ctx, name, name)
	if err != nil {
		return nil, fmt.Errorf("sandbox network: %w", err)
	}
	fw := netpolicy.New(netpolicy.Options{Bridge: n.Bridge, Gateway: n.Gateway, Logger: log})
	if err := fw.Setup(ctx); err != nil {
		return nil, fmt.Errorf("sandbox network %s: %w", name, err)
	}
	log.Info("sandbox network ready", "network", n.Name, "subnet", n.Subnet, "gateway", n.Gateway)
	return netpolicy.Addressed{Firewall: fw, IPOf: drt.SandboxIP}, nil
}
