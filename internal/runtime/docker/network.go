package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Network is the engine network sandboxes with network join.
type Network struct {
	Name string
	// Bridge is the host's bridge interface of the network.
	Bridge string
	// Subnet and Gateway are its IPv4 subnet and the host's address on it.
	Subnet  netip.Prefix
	Gateway netip.Addr
}

// Engine options of a bridge network.
const (
	optBridgeName = "com.docker.network.bridge.name"
	optICC        = "com.docker.network.bridge.enable_icc"
)

// EnsureNetwork creates the bridge network name, with its bridge
// interface named bridge and traffic between its containers off, unless
// it exists; an existing one must have those settings (one made by hand
// with traffic between containers on is refused, not used). It is safe to
// call from several daemons sharing the engine: a racing create's
// conflict is settled by the inspect after it.
func (r *Runtime) EnsureNetwork(ctx context.Context, name, bridge string) (_ Network, err error) {
	defer func() { err = engineErr(err) }()
	n, err := r.inspectNetwork(ctx, name)
	if errors.Is(err, runtime.ErrNotFound) {
		_, err = r.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver:  "bridge",
			Options: map[string]string{optBridgeName: bridge, optICC: "false"},
			Labels:  map[string]string{runtime.LabelManaged: "1"},
		})
		if err != nil && !cerrdefs.IsConflict(err) {
			return Network{}, fmt.Errorf("create network %s: %w", name, err)
		}
		n, err = r.inspectNetwork(ctx, name)
	}
	return n, err
}

func (r *Runtime) inspectNetwork(ctx context.Context, name string) (Network, error) {
	res, err := r.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return Network{}, fmt.Errorf("network %s: %w", name, runtime.ErrNotFound)
	}
	if err != nil {
		return Network{}, fmt.Errorf("inspect network %s: %w", name, err)
	}
	nw := res.Network
	if nw.Driver != "bridge" || nw.Options[optICC] != "false" || nw.Options[optBridgeName] == "" {
		return Network{}, fmt.Errorf("network %s exists but is not a bridge with its own interface and traffic between containers off (driver %q, options %v): remove it or choose another --sandbox-network-name", name, nw.Driver, nw.Options)
	}
	out := Network{Name: name, Bridge: nw.Options[optBridgeName]}
	for _, c := range nw.IPAM.Config {
		if c.Subnet.Addr().Is4() {
			out.Subnet, out.Gateway = c.Subnet, c.Gateway
		}
	}
	if !out.Subnet.IsValid() {
		return Network{}, fmt.Errorf("network %s has no IPv4 subnet", name)
	}
	return out, nil
}

// SandboxIP is a running sandbox's IPv4 address on the sandboxes' network
// (Options.Network); invalid when the sandbox has no network. ErrNotFound
// when it has no container.
func (r *Runtime) SandboxIP(ctx context.Context, sandboxID string) (_ netip.Addr, err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return netip.Addr{}, err
	}
	res, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("address of sandbox %s: %w", sandboxID, notFound(err))
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep := ns.Networks[r.opts.Network]; ep != nil {
			return ep.IPAddress, nil
		}
	}
	return netip.Addr{}, nil
}
