package netpolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The sniffer reads the name a connection is for from what a real client
// sends: an HTTP request's Host, a TLS ClientHello's SNI.
func TestSniff(t *testing.T) {
	for _, tc := range []struct {
		name, send, want string
		http             bool
	}{
		{"http", "GET / HTTP/1.1\r\nHost: A.Test:80\r\n\r\n", "a.test", true},
		{"http without host", "GET / HTTP/1.0\r\n\r\n", "", true},
		{"garbage", "\x00\x01\x02 nonsense\r\n\r\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, isHTTP := sniff(&recorder{r: strings.NewReader(tc.send)})
			if name != tc.want || isHTTP != tc.http {
				t.Errorf("sniff = %q, %v; want %q, %v", name, isHTTP, tc.want, tc.http)
			}
		})
	}
	client, server := net.Pipe()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: "Secure.Example.com", InsecureSkipVerify: true}).Handshake()
		client.Close()
	}()
	rec := &recorder{r: server}
	if name, isHTTP := sniff(rec); name != "secure.example.com" || isHTTP {
		t.Errorf("TLS: sniff = %q, %v; want secure.example.com, false", name, isHTTP)
	}
	if rec.buf.Len() == 0 || rec.buf.Bytes()[0] != 0x16 {
		t.Error("the ClientHello was not recorded for the replay")
	}
	server.Close()
}

// What the proxy lets through: an allowed name or address, never a denied
// address, the host's own, a sandbox's, loopback or link-local.
func TestProxyRefuse(t *testing.T) {
	fw := New(Options{Subnet: netip.MustParsePrefix("172.30.0.0/16"), PrivateReachable: []netip.Prefix{netip.MustParsePrefix("10.240.0.0/12")},
		Denied: []netip.Prefix{netip.MustParsePrefix("10.240.0.9/32")}})
	p := NewProxy(fw, nil, func(a netip.Addr) bool { return a == netip.MustParseAddr("192.0.2.2") })
	pol, err := Policy{Mode: ModeRestricted, Allow: []string{"a.test", "198.51.100.0/24"}, Deny: []string{"203.0.113.9"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 443) }
	for _, tc := range []struct {
		dst, name string
		ok        bool
	}{
		{"203.0.113.1", "a.test", true},
		{"198.51.100.7", "", true},
		{"198.51.100.7", "other.test", true},
		{"203.0.113.1", "b.test", false},
		{"203.0.113.1", "", false},
		{"203.0.113.9", "a.test", false},
		{"192.0.2.2", "a.test", false},
		{"172.30.0.5", "a.test", false},
		{"127.0.0.1", "a.test", false},
		{"169.254.169.254", "a.test", false},
		{"10.1.2.3", "a.test", false},
		{"100.64.0.1", "a.test", false},
		{"10.240.0.2", "a.test", true},  // PrivateReachable
		{"10.240.0.9", "a.test", false}, // Denied (the cluster's registry), even so
	} {
		if why := p.refuse(pol, at(tc.dst), tc.name); (why == "") != tc.ok {
			t.Errorf("refuse(%s, %q) = %q, want allowed=%v", tc.dst, tc.name, why, tc.ok)
		}
	}
}

func TestPolicyNormalize(t *testing.T) {
	p, err := Policy{Mode: ModeRestricted, Allow: []string{"Example.COM.", "10.1.2.3", "10.0.0.0/8", "10.0.0.0/8", "*.cdn.test"}, Deny: []string{"10.1.0.0/16"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Allow, " "); got != "*.cdn.test 10.0.0.0/8 10.1.2.3/32 example.com" {
		t.Errorf("allow = %q", got)
	}
	if m, err := (Policy{Mode: ModeOpen, Deny: []string{"::ffff:10.0.0.0/104"}}).Normalize(); err != nil || m.Deny[0] != "10.0.0.0/8" {
		t.Errorf("an IPv4-mapped deny: %+v, %v; want 10.0.0.0/8", m, err)
	}
	if !p.AllowsHost("img.cdn.test") || p.AllowsHost("cdn.test") || !p.AllowsHost("EXAMPLE.com") || p.AllowsHost("example.com.evil") {
		t.Error("AllowsHost")
	}
	for _, bad := range []Policy{
		{Mode: "x"}, {Mode: ModeOpen, Allow: []string{"a.test"}}, {Mode: ModeNone, Deny: []string{"10.0.0.0/8"}},
		{Mode: ModeRestricted, Allow: []string{"-bad-.test"}}, {Mode: ModeRestricted, Deny: []string{"a.test"}},
		{Mode: ModeRestricted, Allow: []string{"fe80::1%eth0"}},
		{Mode: ModeRestricted, Deny: []string{"::ffff:10.0.0.0/72"}},
		{Mode: ModeRestricted, Deny: []string{"2001:db8::/32"}},
	} {
		if _, err := bad.Normalize(); err == nil {
			t.Errorf("Normalize(%+v): no error", bad)
		}
	}
}

func TestHostResolvers(t *testing.T) {
	got := HostResolvers([]byte("# x\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nnameserver ::1\nsearch example\n"))
	if len(got) != 1 || got[0] != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("HostResolvers = %v, want [10.0.0.2]", got)
	}
	if got := HostResolvers([]byte("nameserver 127.0.0.53\n")); len(got) != 2 {
		t.Errorf("loopback only: %v, want the engine's two defaults", got)
	}
}

// The firewall's chain of every sandbox rejects the denied addresses
// (the cluster's registry) before any policy rule lets it through.
func TestBatchRejectsDenied(t *testing.T) {
	fw := New(Options{Bridge: "br-x", Subnet: netip.MustParsePrefix("172.30.0.0/16"), Denied: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32")}})
	for _, mode := range []Mode{ModeOpen, ModeRestricted} {
		pol := Policy{Mode: mode}
		if mode == ModeRestricted {
			pol.Allow = []string{"10.0.0.0/8"}
		}
		pol, err := pol.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := fw.batch("sb-0123456789abcdef", netip.MustParseAddr("172.30.0.2"), pol, 0x10000, nil, nil)
		reject := strings.Index(b, "-d 10.0.0.5/32 -j REJECT")
		if reject < 0 {
			t.Fatalf("%s: no reject of the denied address in\n%s", mode, b)
		}
		if allow := strings.Index(b, "-d 10.0.0.0/8 -j"); allow >= 0 && allow < reject {
			t.Errorf("%s: the policy's allow comes before the denied address's reject:\n%s", mode, b)
		}
	}
}

// A restricted chain lets established traffic the sandbox sends through
// only on connections carrying its mark, which the allow rules set: no
// rule returns an established packet of the sandbox's own connections
// without it (an unmarked one is judged like a new one), and a packet
// returns without the mark only by an allow rule that has just marked its
// connection (so one conntrack does not track still passes where the
// policy allows it).
func TestBatchEstablishedOnlyWithTheMark(t *testing.T) {
	fw := New(Options{Bridge: "br-x", Resolvers: []netip.Addr{netip.MustParseAddr("10.0.0.2")}})
	pol, err := Policy{Mode: ModeRestricted, Allow: []string{"10.1.0.0/16"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	const mark = 0x2a0000
	b, _ := fw.batch("sb-0123456789abcdef", netip.MustParseAddr("172.30.0.2"), pol, mark, nil, nil)
	marked := "-m connmark --mark 0x2a0000/0xfff0000"
	setMark := "-j CONNMARK --set-xmark 0x2a0000/0xfff0000"
	prev := ""
	for line := range strings.Lines(b) {
		est := strings.Contains(line, "ESTABLISHED")
		switch {
		case est && strings.Contains(line, "--ctdir REPLY"):
		case est && !strings.Contains(line, marked):
			t.Errorf("established traffic passes without the mark: %s", line)
		case strings.Contains(line, "-j RETURN") && !est && prev != strings.Replace(line, "-j RETURN", setMark, 1):
			t.Errorf("a rule returns a packet without marking its connection first: %s", line)
		}
		prev = line
	}
	for _, match := range []string{"-d 10.1.0.0/16", "-d 10.0.0.2/32 -p udp -m udp --dport 53", "-d 10.0.0.2/32 -p tcp -m tcp --dport 53"} {
		if !strings.Contains(b, match+" "+setMark+"\n") || !strings.Contains(b, match+" -j RETURN\n") {
			t.Errorf("%q does not mark and return in\n%s", match, b)
		}
	}
	if !strings.Contains(b, "-A SBX-") || !strings.Contains(b, marked+" -j RETURN") {
		t.Errorf("no marked RETURN in\n%s", b)
	}
	for range 20000 {
		if m := newMark(mark); m == 0 || m == mark || m&^connMarkMask != 0 || m&0xff0000 == 0x40000 || m&0xff0000 == 0x80000 {
			t.Fatalf("newMark(%#x) = %#x", mark, m)
		}
	}
}

// A restarted daemon's first change of a restricted sandbox's policy
// draws a mark other than the one its chain holds (read from iptables,
// once for all chains), so the connections the old policy allowed are
// judged again; a fresh sandbox's apply reads nothing.
func TestApplyChangesTheMarkAChainHolds(t *testing.T) {
	const id, fresh = "sb-0123456789abcdef", "sb-fedcba9876543210"
	chain := chainOf(id)
	var reads, batches []string
	fw := New(Options{Bridge: "br-x", Run: func(_ context.Context, stdin, name string, args ...string) (string, error) {
		switch {
		case name == "iptables-restore":
			batches = append(batches, stdin)
		case slices.Equal(args, []string{"-w", "-t", "filter", "-S", "SBXD-F-br-x"}):
			return "-A SBXD-F-br-x -s 172.30.0.2/32 -m comment --comment sandbox:" + id + " -g " + chain + "\n", nil
		case slices.Equal(args, []string{"-w", "-t", "filter", "-S"}):
			reads = append(reads, "all")
			return "-N " + chain + "\n-A " + chain + " -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x2a0000/0xfff0000 -j RETURN\n", nil
		}
		return "", nil
	}})
	pol, err := Policy{Mode: ModeRestricted, Allow: []string{"10.1.0.0/16"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Apply(t.Context(), fresh, netip.MustParseAddr("172.30.0.3"), pol); err != nil {
		t.Fatal(err)
	}
	if len(reads) != 0 {
		t.Errorf("a fresh sandbox's apply read the chains: %v", reads)
	}
	for range 50 {
		if err := fw.Apply(t.Context(), id, netip.MustParseAddr("172.30.0.2"), pol); err != nil {
			t.Fatal(err)
		}
		if b := batches[len(batches)-1]; strings.Contains(b, "0x2a0000/") || !strings.Contains(b, "--set-xmark") {
			t.Fatalf("the new batch keeps the chain's old mark (or sets none):\n%s", b)
		}
		fw.marks[chain] = 0x2a0000 // as if the chain held it still
	}
	if len(reads) != 1 {
		t.Errorf("the chains were read %d times, want once", len(reads))
	}
}

// A sandbox's policy going open and back to restricted draws a mark other
// than the last restricted one: connections that policy allowed may still
// carry it. And a failed read of the chains' marks is tried again.
func TestApplyOpenKeepsTheLastMark(t *testing.T) {
	const id = "sb-0123456789abcdef"
	var last string
	failRead := true
	reads := 0
	fw := New(Options{Bridge: "br-x", Run: func(_ context.Context, stdin, name string, args ...string) (string, error) {
		switch {
		case name == "iptables-restore":
			last = stdin
		case slices.Equal(args, []string{"-w", "-t", "filter", "-S"}):
			reads++
			if failRead {
				failRead = false
				return "", errors.New("iptables: resource temporarily unavailable")
			}
		}
		return "", nil
	}})
	restricted, err := Policy{Mode: ModeRestricted, Allow: []string{"10.1.0.0/16"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	open, err := Policy{Mode: ModeOpen}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("172.30.0.2")
	markIn := func(b string) string {
		m := regexp.MustCompile(`--set-xmark (0x[0-9a-f]+)/`).FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("no mark in\n%s", b)
		}
		return m[1]
	}
	if err := fw.Apply(t.Context(), id, ip, restricted); err != nil {
		t.Fatal(err)
	}
	prev := markIn(last)
	for range 20000 {
		if err := fw.Apply(t.Context(), id, ip, open); err != nil {
			t.Fatal(err)
		}
		if err := fw.Apply(t.Context(), id, ip, restricted); err != nil {
			t.Fatal(err)
		}
		m := markIn(last)
		if m == prev {
			t.Fatalf("restricted again after open drew the last restricted mark %s", m)
		}
		prev = m
	}
	if reads != 2 {
		t.Errorf("the chains' marks were read %d times, want 2 (a failed read, then one that worked)", reads)
	}
}
