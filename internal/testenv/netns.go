package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NetNSRange holds every NetNS's addresses.
var NetNSRange = netip.MustParsePrefix("10.240.0.0/12")

// NetNS is a network namespace a test made, joined to the host by a veth
// pair on a /29 of 10.240.0.0/12 of its own: the test's own hosts, for
// servers a sandbox may or may not reach. Nothing in it routes off the
// machine. It and its veth are removed when the test ends.
type NetNS struct {
	Name string
	// Host is the host's address on the link; Addrs are the namespace's
	// (Host+1 and on).
	Host  netip.Addr
	Addrs []netip.Addr
}

// NewNetNS makes a namespace with n addresses (1 to 5). It needs root and
// iproute2; without them the test skips (fails in CI).
func NewNetNS(t *testing.T, n int) *NetNS {
	t.Helper()
	if n < 1 || n > 5 {
		t.Fatalf("NewNetNS: %d addresses, want 1 to 5", n)
	}
	if Short() {
		t.Skip("needs network namespaces (not under -short)")
	}
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if CI() {
			t.Fatalf("network namespaces need root and iproute2 (uid %d, ip: %v)", os.Geteuid(), err)
		}
		t.Skip("network namespaces need root and iproute2")
	}
	ns, remove, err := MakeNetNS(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return ns
}

// MakeNetNS is NewNetNS for a program that is not a test (a benchmark):
// the caller runs remove when done.
func MakeNetNS(n int) (_ *NetNS, remove func(), err error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	// A /29 picked at random in 10.240.0.0/12: callers running at once
	// almost never collide, and a collision fails loudly (ip addr add).
	base := netip.AddrFrom4([4]byte{10, 240 | b[0]&0x0f, b[1], b[2] &^ 7})
	ns := &NetNS{Name: "sbt-" + suffix, Host: base.Next()}
	for a, i := ns.Host.Next(), 0; i < n; a, i = a.Next(), i+1 {
		ns.Addrs = append(ns.Addrs, a)
	}
	hostIf, nsIf := "sbth"+suffix, "sbtn"+suffix
	remove = func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns.Name).Run()
	}
	defer func() {
		if err != nil {
			remove()
		}
	}()
	steps := [][]string{
		{"netns", "add", ns.Name},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", ns.Name},
		{"addr", "add", ns.Host.String() + "/29", "dev", hostIf},
		{"link", "set", hostIf, "up"},
	}
	for _, a := range ns.Addrs {
		steps = append(steps, []string{"-n", ns.Name, "addr", "add", a.String() + "/29", "dev", nsIf})
	}
	steps = append(steps,
		[]string{"-n", ns.Name, "link", "set", nsIf, "up"},
		[]string{"-n", ns.Name, "link", "set", "lo", "up"},
		[]string{"-n", ns.Name, "route", "add", "default", "via", ns.Host.String()})
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return ns, remove, nil
}

// Serve answers HTTP on addr:port inside the namespace until the test
// ends: every answer's body is "<addr> <Host header>\n".
func (ns *NetNS) Serve(t *testing.T, addr netip.Addr, port int) {
	t.Helper()
	closeFn, err := ns.ServeHTTP(addr, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
}

// ServeHTTP is Serve for a program that is not a test: the caller runs
// stop when done.
func (ns *NetNS) ServeHTTP(addr netip.Addr, port int) (stop func(), err error) {
	ln, err := ns.Listen(netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", ns.Name, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", addr, r.Host)
	})}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// Listen opens a TCP listener in the namespace: the socket is made there,
// from a thread that enters it and comes back.
func (ns *NetNS) Listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := InNetNS(ns.Name, func() (err error) {
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		return err
	})
	if err != nil && ln != nil {
		ln.Close()
		ln = nil
	}
	return ln, err
}

// DialIn dials addr (an IP literal and a port) from inside the network
// namespace named name (`ip netns add`): the connection's socket lives
// there, whichever thread later reads it.
func DialIn(ctx context.Context, name, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := InNetNS(name, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	if err != nil && c != nil {
		c.Close()
		c = nil
	}
	return c, err
}

// InNetNS runs fn on a thread that has entered the network namespace
// named name and comes back to its own afterwards. Sockets fn makes
// belong to that namespace; fn must not start goroutines that make any.
func InNetNS(name string, fn func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: it must never run
		// anything else. Leaving it locked makes the runtime end it.
		goruntime.LockOSThread()
		return fmt.Errorf("leave %s: %w", name, err)
	}
	return ferr
}
