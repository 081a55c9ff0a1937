package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/service"
)

// openFirewall makes the sandboxes' network (a bridge of the daemon's own,
// traffic between its containers off) and installs the firewall's base
// rules on it: from here on a sandbox on it reaches nothing until its
// policy is applied.
//
// ipOf answers a sandbox's address on it (the runtime that runs them).
func openFirewall(ctx context.Context, drt *docker.Runtime, name string, denied []netip.Prefix, ipOf func(context.Context, string) (netip.Addr, error), log *slog.Logger) (service.Firewall, docker.Network, func() error, error) {
	n, err := drt.EnsureNetwork(ctx, name, name)
	if err != nil {
		return nil, n, nil, fmt.Errorf("sandbox network: %w", err)
	}
	if !n.Fenced {
		log.Warn("the sandbox network was made by an older daemon (unfenced), and is used as it is: the engine's containers may take addresses of the upper half, which the oci engine's sandboxes lease; remove it (with its sandboxes) to have the next start make it fenced", "network", n.Name, "subnet", n.Subnet)
	}
	// The name proxy answers on the host's address on the bridge only;
	// the firewall lets sandboxes reach that port and nothing else of the
	// host's.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.Gateway, 0).String())
	if err != nil {
		return nil, n, nil, fmt.Errorf("sandbox network %s: the name proxy: %w", name, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	resolvConf, _ := os.ReadFile("/etc/resolv.conf") // none: the engine's defaults
	fw := netpolicy.New(netpolicy.Options{
		Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway, ProxyPort: port, Logger: log,
		Resolvers: netpolicy.HostResolvers(resolvConf), Denied: denied,
	})
	if err := fw.Setup(ctx); err != nil {
		ln.Close()
		return nil, n, nil, fmt.Errorf("sandbox network %s: %w", name, err)
	}
	go func() {
		if err := netpolicy.NewProxy(fw, log, nil).Serve(ln); err != nil {
			log.Error("the sandboxes' name proxy stopped", "err", err)
		}
	}()
	log.Info("sandbox network ready", "network", n.Name, "subnet", n.Subnet, "gateway", n.Gateway, "name_proxy_port", port)
	return netpolicy.Addressed{Firewall: fw, IPOf: ipOf}, n, ln.Close, nil
}

// registryAddrs are the addresses of the cluster's template registry
// (--registry), which no sandbox may reach: it holds every tenant's
// templates. A name is resolved once, at start.
func registryAddrs(ctx context.Context, registry string) ([]netip.Prefix, error) {
	if registry == "" {
		return nil, nil
	}
	hostport, _, _ := strings.Cut(registry, "/")
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Prefix{netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("--registry %s: resolve it, to keep sandboxes from it: %w", host, err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
