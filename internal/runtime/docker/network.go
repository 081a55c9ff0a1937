package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
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
	// Fenced: the engine hands out addresses of the lower half of the
	// subnet only (EnsureNetwork).
	Fenced bool

	id string // the engine's id of the network
}

// Engine options of a bridge network.
const (
	optBridgeName = "com.docker.network.bridge.name"
	optICC        = "com.docker.network.bridge.enable_icc"
)

// EnsureNetwork creates the bridge network name, with its bridge
// interface named bridge and traffic between its containers off, unless
// it exists; an existing one must have those settings (one made by hand
// with traffic between containers on is refused, not used).
//
// A network this call creates is fenced: the engine hands its containers
// addresses from the lower half of the subnet only (its IPAM's IP range),
// and the oci runtime's sandboxes on the same bridge lease theirs from
// the upper half (internal/runtime/oci/network.go). The engine picks the
// subnet (it avoids the host's routes), so the new network is created,
// inspected, removed and made again on the same subnet with the range.
// Only a network this very call made is removed: an existing one, fenced
// or not, is used as it is (an older daemon's is unfenced, Fenced false),
// since its containers, stopped ones included, are tied to its id and
// would not start again on a new one.
//
// It is safe to call from several daemons sharing the engine: the whole
// of it runs under a host-wide lock on the name (lockNetwork), so one
// creates and fences, and the others find its network.
func (r *Runtime) EnsureNetwork(ctx context.Context, name, bridge string) (_ Network, err error) {
	defer func() { err = engineErr(err) }()
	unlock, err := lockNetwork(ctx, name)
	if err != nil {
		return Network{}, err
	}
	defer unlock()
	// Rounds: make it and fence it, and once more when the fenced
	// re-create lost the subnet.
	for range 3 {
		n, _, err := r.inspectNetwork(ctx, name)
		if !errors.Is(err, runtime.ErrNotFound) {
			return n, err // there: used as it is
		}
		id, err := r.createNetwork(ctx, name, bridge, nil)
		if err != nil {
			return Network{}, err
		}
		n, busy, err := r.inspectNetwork(ctx, name)
		if err != nil || id == "" || n.id != id || n.Fenced {
			// Not ours (another's create won, outside the lock): as it is.
			return n, err
		}
		fence, ok := lowerHalf(n.Subnet)
		if !ok || busy || bridgePorts(n.Bridge) != 0 {
			return n, nil
		}
		if _, err := r.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); err != nil {
			if cerrdefs.IsNotFound(err) {
				continue
			}
			return n, nil // something joined it since: unfenced, as it is
		}
		gw := n.Gateway
		if !gw.IsValid() {
			// A subnet given without a gateway: the engine took the
			// first address, and now says it.
			gw = n.Subnet.Masked().Addr().Next()
		}
		ipam := &network.IPAM{Config: []network.IPAMConfig{{Subnet: n.Subnet, Gateway: gw, IPRange: fence}}}
		if _, err := r.createNetwork(ctx, name, n.Bridge, ipam); err != nil {
			// Another network took the subnet in the moment it was
			// free (the engine refuses overlaps): the next round makes
			// the network again where the engine says.
			r.log.Warn("sandbox network: fencing it on its subnet failed; making it again", "network", name, "subnet", n.Subnet, "err", err)
			continue
		}
		// What is there now, whoever made it.
		n, _, err = r.inspectNetwork(ctx, name)
		return n, err
	}
	n, _, err := r.inspectNetwork(ctx, name)
	if errors.Is(err, runtime.ErrNotFound) {
		// Unfenced rather than none.
		if _, err := r.createNetwork(ctx, name, bridge, nil); err != nil {
			return Network{}, err
		}
		n, _, err = r.inspectNetwork(ctx, name)
	}
	return n, err
}

// networkLockDir holds the host-wide locks of EnsureNetwork (a variable
// for tests).
var networkLockDir = "/run"

// lockNetwork takes the host-wide lock on the network name: an flock on
// networkLockDir/sandboxd-network-<name>.lock, which every daemon and
// test process of the host shares and the kernel lets go of when the
// process dies. It waits for another holder until ctx ends.
func lockNetwork(ctx context.Context, name string) (unlock func(), err error) {
	safe := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			return c
		}
		return '_'
	}, name)
	path := filepath.Join(networkLockDir, "sandboxd-network-"+safe+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("network %s: lock: %w", name, err)
	}
	wait := 5 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("network %s: lock %s: %w", name, path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("network %s: waiting for the lock %s: %w", name, path, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
	return func() { f.Close() }, nil // closing the file lets go of the lock
}

// createNetwork creates the bridge network and says its id; another's
// create of it first is success, with no id.
func (r *Runtime) createNetwork(ctx context.Context, name, bridge string, ipam *network.IPAM) (id string, _ error) {
	res, err := r.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver:  "bridge",
		Options: map[string]string{optBridgeName: bridge, optICC: "false"},
		Labels:  map[string]string{runtime.LabelManaged: "1"},
		IPAM:    ipam,
	})
	if cerrdefs.IsConflict(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("create network %s: %w", name, err)
	}
	return res.ID, nil
}

// lowerHalf is the lower half of an IPv4 subnet, the engine's range on a
// fenced network; false when the subnet is too small to halve usefully.
func lowerHalf(subnet netip.Prefix) (netip.Prefix, bool) {
	if !subnet.Addr().Is4() || subnet.Bits() > 29 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(subnet.Masked().Addr(), subnet.Bits()+1), true
}

// bridgePorts counts the interfaces plugged into a bridge (-1 when it
// cannot be read).
func bridgePorts(bridge string) int {
	entries, err := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		return -1
	}
	return len(entries)
}

// inspectNetwork reads the network; busy says whether containers are on
// it.
func (r *Runtime) inspectNetwork(ctx context.Context, name string) (_ Network, busy bool, _ error) {
	res, err := r.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return Network{}, false, fmt.Errorf("network %s: %w", name, runtime.ErrNotFound)
	}
	if err != nil {
		return Network{}, false, fmt.Errorf("inspect network %s: %w", name, err)
	}
	nw := res.Network
	if nw.Driver != "bridge" || nw.Options[optICC] != "false" || nw.Options[optBridgeName] == "" {
		return Network{}, false, fmt.Errorf("network %s exists but is not a bridge with its own interface and traffic between containers off (driver %q, options %v): remove it or choose another --sandbox-network-name", name, nw.Driver, nw.Options)
	}
	out := Network{Name: name, Bridge: nw.Options[optBridgeName], id: nw.ID}
	var ipRange netip.Prefix
	for _, c := range nw.IPAM.Config {
		if c.Subnet.Addr().Is4() {
			out.Subnet, out.Gateway, ipRange = c.Subnet, c.Gateway, c.IPRange
		}
	}
	if !out.Subnet.IsValid() {
		return Network{}, false, fmt.Errorf("network %s has no IPv4 subnet", name)
	}
	if fence, ok := lowerHalf(out.Subnet); ok && ipRange == fence {
		out.Fenced = true
	}
	return out, len(nw.Containers) > 0, nil
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
