package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// A sandbox with Spec.Network gets a network namespace of its own
// (/run/netns/sbxo-<hash>, made with iproute2) and a veth pair: eth0
// inside, the other end a port of the daemon's sandbox bridge, the one the
// Docker runtime's sandboxes join (its EnsureNetwork makes it: traffic
// between its ports off), so the same firewall holds for both: the
// netpolicy chains match the bridge and the sandbox's address, and
// package service applies a sandbox's policy with the address SandboxIP
// reports. A sandbox without Spec.Network gets a fresh namespace from the
// OCI runtime, with loopback only. The namespace has IPv6 disabled
// (disable_ipv6 on all, default and eth0; no address, not even
// link-local), as the Docker runtime's containers: the firewall is IPv4
// only.
//
// Addresses come from the upper half of the bridge's subnet; the engine
// hands out the lower half only (the network's IP range, which the Docker
// runtime's EnsureNetwork sets: the fence). An address
// is leased by a file in a host-wide directory (default
// /run/sandboxd-oci/<bridge>), made with O_EXCL and holding the lessee's
// sandbox directory: daemons sharing the bridge, and a daemon restarted,
// never hand out one address twice; a lease whose sandbox directory is
// gone (a crash between the two) is taken over. The directory is on
// tmpfs: after a reboot, no namespace is left either.

// Network is the bridge sandboxes with Spec.Network join.
type Network struct {
	// Bridge is the host's bridge interface; Subnet its IPv4 subnet and
	// Gateway the host's address on it.
	Bridge  string
	Subnet  netip.Prefix
	Gateway netip.Addr
	// Resolvers are the DNS servers a sandbox's resolv.conf names (the
	// firewall lets sandboxes reach them: netpolicy.HostResolvers).
	Resolvers []netip.Addr
	// LeaseDir holds the address leases (default /run/sandboxd-oci/<bridge>).
	LeaseDir string
}

func (n *Network) leaseDir() string {
	if n.LeaseDir != "" {
		return n.LeaseDir
	}
	return filepath.Join(defaultLeaseRoot, n.Bridge)
}

// names are a sandbox's namespace and host-side veth names, from a hash
// of its directory (unique per daemon directory and sandbox id; an
// interface name has at most 15 bytes).
func netNames(dir string) (ns, veth string) {
	sum := sha256.Sum256([]byte(dir))
	h := hex.EncodeToString(sum[:])
	return "sbxo-" + h[:16], "vo" + h[:12]
}

// attach makes the sandbox's namespace and veth and gives it an address;
// it returns the address and the namespace's path for config.json. On
// failure it undoes what it made.
func (n *Network) attach(ctx context.Context, id, dir string) (_ netip.Addr, _ string, err error) {
	ip, err := n.lease(id, dir, netip.Addr{})
	if err != nil {
		return netip.Addr{}, "", err
	}
	defer func() {
		if err != nil {
			_ = n.detach(context.WithoutCancel(ctx), id, dir, ip.String())
		}
	}()
	path, err := n.plumb(ctx, dir, ip)
	return ip, path, err
}

// plumb makes the namespace and the veth pair and configures eth0.
func (n *Network) plumb(ctx context.Context, dir string, ip netip.Addr) (string, error) {
	ns, veth := netNames(dir)
	host := strings.Join([]string{
		"netns add " + ns,
		"link add " + veth + " type veth peer name eth0 netns " + ns,
		"link set " + veth + " master " + n.Bridge + " up",
	}, "\n")
	if err := ipBatch(ctx, "", host); err != nil {
		return "", err
	}
	// No IPv6 in the namespace (as the Docker runtime's containers):
	// nothing filters IPv6 on the bridge, and a link-local address would
	// reach the other sandboxes and the host's listeners on [::] past the
	// IPv4 firewall. "all" applies to eth0 and lo too; eth0 is still down
	// and makes no link-local address (addrgenmode none).
	if err := disableIPv6(filepath.Join("/run/netns", ns)); err != nil {
		return "", err
	}
	inside := strings.Join([]string{
		"link set eth0 addrgenmode none",
		"link set lo up",
		fmt.Sprintf("addr add %s/%d dev eth0", ip, n.Subnet.Bits()),
		"link set eth0 up",
		"route add default via " + n.Gateway.String(),
	}, "\n")
	if err := ipBatch(ctx, ns, inside); err != nil {
		return "", err
	}
	return filepath.Join("/run/netns", ns), nil
}

// ensure makes the sandbox's namespace again if it is gone (Start after a
// reboot), with its recorded address, or a new one (in meta.IP) when
// another sandbox took that.
func (n *Network) ensure(ctx context.Context, id, dir string, meta *sandboxMeta) error {
	ns, veth := netNames(dir)
	_, errNS := os.Stat(filepath.Join("/run/netns", ns))
	_, errLink := os.Stat(filepath.Join("/sys/class/net", veth))
	if errNS == nil && errLink == nil {
		return nil
	}
	want, err := netip.ParseAddr(meta.IP)
	if err != nil {
		return fmt.Errorf("the sandbox's recorded address %q: %w", meta.IP, err)
	}
	_ = n.unplumb(ctx, dir)
	if !n.take(want, dir) {
		// Another sandbox holds the old address now (the lease
		// directory is on tmpfs: gone with a reboot): a new one; the
		// caller records meta.IP, and the firewall is applied with the
		// address SandboxIP reports after Start.
		if want, err = n.lease(id, dir, netip.Addr{}); err != nil {
			return err
		}
		meta.IP = want.String()
	}
	_, err = n.plumb(ctx, dir, want)
	return err
}

// detach removes the sandbox's veth, namespace and lease (ip; "" when
// unknown: every lease of dir); what is gone already is success. A
// Network without a bridge (the runtime has none now) looks for the
// lease in every bridge's lease directory.
func (n *Network) detach(ctx context.Context, id, dir, ip string) error {
	if err := n.unplumb(ctx, dir); err != nil {
		return err
	}
	dirs := []string{n.leaseDir()}
	if n.Bridge == "" && n.LeaseDir == "" {
		dirs, _ = filepath.Glob(filepath.Join(defaultLeaseRoot, "*"))
	}
	for _, ld := range dirs {
		if ip != "" {
			release(ld, dir, ip)
			continue
		}
		entries, _ := os.ReadDir(ld)
		for _, e := range entries {
			release(ld, dir, e.Name())
		}
	}
	return nil
}

func (n *Network) unplumb(ctx context.Context, dir string) error {
	ns, veth := netNames(dir)
	if _, err := os.Stat(filepath.Join("/sys/class/net", veth)); err == nil {
		if err := ipBatch(ctx, "", "link del "+veth); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
		if err := ipBatch(ctx, "", "netns del "+ns); err != nil {
			return err
		}
	}
	return nil
}

// release removes the lease of ip in the lease directory ld if dir holds
// it.
func release(ld, dir, ip string) {
	p := filepath.Join(ld, ip)
	if b, err := os.ReadFile(p); err == nil && string(b) == dir {
		_ = os.Remove(p)
	}
}

// lease leases an address of the upper half of the subnet to dir: want
// if valid (held by dir already, or free), else the first free one from a
// point the id picks (creates of many sandboxes do not all start at the
// same address).
func (n *Network) lease(id, dir string, want netip.Addr) (netip.Addr, error) {
	if err := os.MkdirAll(n.leaseDir(), 0o700); err != nil {
		return netip.Addr{}, err
	}
	first, size := n.pool()
	if size <= 0 {
		return netip.Addr{}, fmt.Errorf("subnet %s too small for sandboxes' addresses", n.Subnet)
	}
	if want.IsValid() {
		if n.take(want, dir) {
			return want, nil
		}
		return netip.Addr{}, fmt.Errorf("address %s is leased to another sandbox", want)
	}
	sum := sha256.Sum256([]byte(id))
	start := new(big.Int).SetBytes(sum[:8])
	off := new(big.Int).Mod(start, big.NewInt(size)).Int64()
	for i := range size {
		ip := addrAdd(first, (off+i)%size)
		if n.take(ip, dir) {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address left on %s", runtime.ErrNoSpace, n.Bridge)
}

// take leases ip to dir: a new lease, one dir holds already, or one
// whose holder's directory is gone.
func (n *Network) take(ip netip.Addr, dir string) bool {
	p := filepath.Join(n.leaseDir(), ip.String())
	for range 2 {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, werr := f.WriteString(dir)
			f.Close()
			return werr == nil
		}
		if !errors.Is(err, os.ErrExist) {
			return false
		}
		holder, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		if string(holder) == dir {
			return true
		}
		if len(holder) == 0 {
			// Being written, or its writer was killed between the
			// create and the write (a daemon SIGKILLed mid-create),
			// which would hold the address until a reboot: one older
			// than emptyLeaseAge is taken over.
			if fi, err := os.Stat(p); err != nil || time.Since(fi.ModTime()) < emptyLeaseAge {
				return false
			}
		} else if _, err := os.Stat(string(holder)); err == nil {
			return false // held
		}
		_ = os.Remove(p) // its sandbox is gone: take it over (O_EXCL decides a race)
	}
	return false
}

// emptyLeaseAge is how old an empty lease must be to be taken over: its
// writer writes it at once after creating it, so one this old is a dead
// writer's.
const emptyLeaseAge = time.Minute

// pool is the range addresses are leased from: the upper half of the
// subnet, less its broadcast address and the gateway.
func (n *Network) pool() (first netip.Addr, size int64) {
	bits := n.Subnet.Addr().BitLen() - n.Subnet.Bits()
	if bits < 3 || bits > 30 {
		return netip.Addr{}, 0
	}
	half := int64(1) << (bits - 1)
	first = addrAdd(n.Subnet.Masked().Addr(), half)
	size = half - 1 // not the broadcast address
	if n.Gateway.Compare(first) >= 0 && n.Gateway.Compare(addrAdd(first, size-1)) <= 0 {
		// A gateway in the upper half (unusual): start after it.
		skip := int64(0)
		for a := first; a != n.Gateway; a = a.Next() {
			skip++
		}
		first, size = n.Gateway.Next(), size-skip-1
	}
	return first, size
}

func addrAdd(a netip.Addr, k int64) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(k)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// resolvConf is a networked sandbox's /etc/resolv.conf.
func (n *Network) resolvConf() string {
	var b strings.Builder
	for _, r := range n.Resolvers {
		fmt.Fprintf(&b, "nameserver %s\n", r)
	}
	return b.String()
}

// ipBatch runs iproute2's commands, one a line, in the host's namespace
// or (ns set) in ns.
// disableIPv6 sets net.ipv6.conf.{all,default}.disable_ipv6=1 in the
// network namespace at path, from a thread of this process that joins it
// for the writes (a sysctl under /proc/sys/net is the opener's
// namespace's). A kernel without IPv6 has nothing to disable.
func disableIPv6(path string) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("disable IPv6: %w", err)
	}
	defer target.Close()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("disable IPv6: %w", err)
	}
	defer self.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("disable IPv6: join %s: %w", path, err)
			return
		}
		var werr error
		for _, k := range []string{"all", "default"} {
			f := "/proc/sys/net/ipv6/conf/" + k + "/disable_ipv6"
			if err := os.WriteFile(f, []byte("1\n"), 0); err != nil && werr == nil {
				werr = fmt.Errorf("disable IPv6 in %s: %w", path, err)
			}
		}
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err == nil {
			goruntime.UnlockOSThread()
		} // else the thread stays locked and exits with this goroutine
		errc <- werr
	}()
	return <-errc
}

func ipBatch(ctx context.Context, ns, cmds string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(cmds + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// SandboxIP is a sandbox's IPv4 address on the bridge; invalid when it
// has no network. ErrNotFound when there is no such sandbox.
func (r *Runtime) SandboxIP(_ context.Context, sandboxID string) (netip.Addr, error) {
	if err := checkID(sandboxID); err != nil {
		return netip.Addr{}, err
	}
	meta, err := r.readMeta(sandboxID)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("address of sandbox %s: %w", sandboxID, err)
	}
	if meta.IP == "" {
		return netip.Addr{}, nil
	}
	return netip.ParseAddr(meta.IP)
}
