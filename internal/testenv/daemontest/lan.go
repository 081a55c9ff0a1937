package daemontest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Fixed ports of a daemon on a LAN: each host is a network namespace of
// its own, so nothing else listens there.
const (
	lanAPIPort     = 7070
	lanHTTPSPort   = 7444
	lanTLSPort     = 7443
	lanEtcdClient  = 2379
	lanEtcdPeer    = 2380
	lanHostsSuffix = ".sandboxd.test" // a reserved TLD: never resolved off the machine
)

// LAN is hosts on a network of their own, as separate machines would be:
// each host is a network namespace with one address on a bridge, and the
// bridge lives in a namespace of its own (the switch), which also holds
// the address the test dials from (DialContext). Hosts reach each other
// by name: `ip netns exec` binds /etc/netns/<namespace>/hosts, which
// names every host of the LAN, over /etc/hosts. Each host has a TLS
// certificate for its name from the process's LAN CA (LANRootCAs), which
// the daemons trust through SSL_CERT_FILE, so their API is served, and
// their calls to each other made, over TLS. Nothing of it is in the
// host's network namespace; Close removes every namespace (their veths go
// with them), hosts file and certificate.
type LAN struct {
	// Switch is the namespace that holds the bridge and the test's
	// address (.254).
	Switch string
	Prefix netip.Prefix
	Hosts  []LANHost
	// Dir holds the CA's certificate (ca.pem) and each host's
	// certificate and key.
	Dir string
}

// LANHost is one host of a LAN.
type LANHost struct {
	// NS is its network namespace; Name the host name the others (and
	// the test) reach it by; Addr its only address besides loopback.
	NS, Name string
	Addr     netip.Addr
	// Cert and Key are the files of its certificate for Name; CA the LAN
	// CA's certificate (an SSL_CERT_FILE).
	Cert, Key, CA string
}

// lanSeq numbers this process's LANs: each gets 10.229.<seq>.0/24, so the
// test's dialer tells them apart by address too. (Different processes'
// LANs may share a prefix: their addresses live only in their own
// namespaces.)
var lanSeq atomic.Uint32

// lans are the LANs open in this process, which DialContext routes to.
var lans struct {
	sync.Mutex
	m map[*LAN]struct{}
}

// NewLAN makes a LAN with one host per name; a host's name is
// name+".sandboxd.test". It needs root and iproute2. On error nothing is
// left.
func NewLAN(names []string) (_ *LAN, err error) {
	if len(names) == 0 || len(names) > 250 {
		return nil, fmt.Errorf("NewLAN: %d hosts, want 1 to 250", len(names))
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	seq := lanSeq.Add(1) % 256
	l := &LAN{
		Switch: "sbl-" + suffix,
		Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 229, byte(seq), 0}), 24),
	}
	for i, n := range names {
		l.Hosts = append(l.Hosts, LANHost{
			NS:   fmt.Sprintf("sbl-%s-%d", suffix, i+1),
			Name: n + lanHostsSuffix,
			Addr: netip.AddrFrom4([4]byte{10, 229, byte(seq), byte(i + 1)}),
		})
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	if l.Dir, err = os.MkdirTemp("", "sbxlan-"); err != nil {
		return nil, err
	}
	ca, err := lanCA()
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(l.Dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	for i := range l.Hosts {
		h := &l.Hosts[i]
		h.CA, h.Cert, h.Key = caFile, filepath.Join(l.Dir, h.NS+".crt"), filepath.Join(l.Dir, h.NS+".key")
		if err := ca.issue(h.Name, h.Cert, h.Key); err != nil {
			return nil, err
		}
	}
	sw := []string{"-n", l.Switch}
	steps := [][]string{
		{"netns", "add", l.Switch},
		append(sw, "link", "add", "br0", "type", "bridge"),
		append(sw, "addr", "add", l.gateway().String()+"/24", "dev", "br0"),
		append(sw, "link", "set", "br0", "up"),
		append(sw, "link", "set", "lo", "up"),
	}
	for i, h := range l.Hosts {
		port := fmt.Sprintf("p%d", i+1)
		steps = append(steps,
			[]string{"netns", "add", h.NS},
			append(sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS),
			append(sw, "link", "set", port, "master", "br0", "up"),
			[]string{"-n", h.NS, "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
			[]string{"-n", h.NS, "link", "set", "eth0", "up"},
			[]string{"-n", h.NS, "link", "set", "lo", "up"},
		)
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
	for _, h := range l.Hosts {
		fmt.Fprintf(&hosts, "%s\t%s\n", h.Addr, h.Name)
	}
	for _, h := range l.Hosts {
		dir := filepath.Join("/etc/netns", h.NS)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
			return nil, err
		}
	}
	lans.Lock()
	if lans.m == nil {
		lans.m = map[*LAN]struct{}{}
	}
	lans.m[l] = struct{}{}
	lans.Unlock()
	return l, nil
}

// gateway is the switch's own address, the one the test dials from.
func (l *LAN) gateway() netip.Addr {
	a := l.Prefix.Addr().As4()
	a[3] = 254
	return netip.AddrFrom4(a)
}

// Close removes the namespaces and the hosts files. It is safe to call
// more than once.
func (l *LAN) Close() error {
	lans.Lock()
	delete(lans.m, l)
	lans.Unlock()
	var errs []error
	for _, ns := range append(l.namespaces(), l.Switch) {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err != nil {
			continue // never made, or removed already
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, out))
		}
	}
	for _, h := range l.Hosts {
		if err := os.RemoveAll(filepath.Join("/etc/netns", h.NS)); err != nil {
			errs = append(errs, err)
		}
	}
	if l.Dir != "" {
		if err := os.RemoveAll(l.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *LAN) namespaces() []string {
	var out []string
	for _, h := range l.Hosts {
		out = append(out, h.NS)
	}
	return out
}

// lookup is the switch namespace and address of host (a LAN host's name
// or address) on an open LAN.
func lookup(host string) (sw string, addr netip.Addr, ok bool) {
	ip, ipErr := netip.ParseAddr(host)
	lans.Lock()
	defer lans.Unlock()
	for l := range lans.m {
		for _, h := range l.Hosts {
			if h.Name == host || ipErr == nil && h.Addr == ip {
				return l.Switch, h.Addr, true
			}
		}
	}
	return "", netip.Addr{}, false
}

// DialContext dials addr as net.Dialer does, except that a host of an
// open LAN (by name or address) is dialed from the LAN's switch, as a
// client on that network would. Use it as an http.Transport's
// DialContext to reach daemons on a LAN.
func DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if sw, ip, ok := lookup(host); ok {
		return testenv.DialIn(ctx, sw, network, net.JoinHostPort(ip.String(), port))
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// CanMakeLAN says why a LAN cannot be made here ("" when it can): it
// needs root and iproute2.
func CanMakeLAN() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "network namespaces need iproute2 (ip)"
	}
	return ""
}
