package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Proxy honours host name rules: a restricted sandbox's TCP connections
// to ports 80 and 443 are redirected to it (the firewall's DNAT), it reads
// the name the connection is for — the Host header of an HTTP request, the
// server name (SNI) of a TLS ClientHello — and, when the sandbox's policy
// allows that name (or the address, or neither is denied), connects to the
// address the sandbox asked for and relays both ways. It never connects
// to the host itself, a loopback, link-local or private-to-the-host
// address, nor to a denied address, whatever name is presented.
//
// What a name rule promises: every HTTP or TLS connection let through by
// a name carried that name. What it does not: that the address the
// sandbox connected to is that name's (a sandbox may present an allowed
// name to another address; CIDR rules bound addresses), nor anything of
// traffic that is neither (refused).
type Proxy struct {
	fw  *Firewall
	log *slog.Logger
	// dial connects upstream (net.Dialer's by default).
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu    sync.Mutex
	conns map[netip.Addr]int // open relays per sandbox address
	local func(netip.Addr) bool
}

// Bounds of the proxy.
const (
	proxyHeaderTimeout = 10 * time.Second
	proxyDialTimeout   = 10 * time.Second
	maxPeekBytes       = 16 << 10
	maxConnsPerSandbox = 256
)

// NewProxy returns the proxy of fw's sandboxes. local reports the host's
// own addresses (never dialled); nil reads them from the interfaces.
func NewProxy(fw *Firewall, log *slog.Logger, local func(netip.Addr) bool) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if local == nil {
		local = hostAddress
	}
	d := &net.Dialer{Timeout: proxyDialTimeout}
	return &Proxy{fw: fw, log: log, local: local, conns: map[netip.Addr]int{},
		dial: func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }}
}

// hostAddress reports whether a is one of the host's interface addresses.
func hostAddress(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // unknown: refuse
	}
	for _, x := range addrs {
		if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

// Serve accepts on ln until it is closed.
func (p *Proxy) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go p.handle(c.(*net.TCPConn))
	}
}

func (p *Proxy) handle(c *net.TCPConn) {
	defer c.Close()
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	policy, ok := p.fw.policyAt(peer)
	if !ok {
		return // not a sandbox with name rules: nobody else is served
	}
	if !p.take(peer) {
		return
	}
	defer p.release(peer)
	dst, err := originalDst(c)
	if err != nil {
		p.log.Debug("proxy: original destination", "sandbox_ip", peer, "err", err)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(proxyHeaderTimeout))
	rec := &recorder{r: c}
	name, isHTTP := sniff(rec)
	_ = c.SetReadDeadline(time.Time{})
	if why := p.refuse(policy, dst, name); why != "" {
		p.log.Debug("proxy: refused", "sandbox_ip", peer, "dst", dst, "name", name, "why", why)
		if isHTTP {
			fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(why)+1, why)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), proxyDialTimeout)
	up, err := p.dial(ctx, dst.String())
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	if _, err := up.Write(rec.buf.Bytes()); err != nil {
		return
	}
	relay(c, up)
}

// refuse says why a connection to dst presenting name is refused, or "".
func (p *Proxy) refuse(policy Policy, dst netip.AddrPort, name string) string {
	a := dst.Addr().Unmap()
	allow, deny := policy.CIDRs()
	if !a.IsGlobalUnicast() || p.local(a) || p.fw.opts.Subnet.Contains(a) ||
		slices.ContainsFunc(p.fw.opts.Denied, func(d netip.Prefix) bool { return d.Contains(a) }) {
		return "no sandbox reaches this address (the host, a sandbox, loopback, link-local or the cluster's registry)"
	}
	for _, d := range deny {
		if d.Contains(a) {
			return "the address is denied by the sandbox's network policy"
		}
	}
	for _, al := range allow {
		if al.Contains(a) {
			return ""
		}
	}
	// By name, public addresses only: the proxy connects from the host,
	// so a name must not open the host's private networks.
	if name != "" && policy.AllowsHost(name) {
		if private(a) && !slices.ContainsFunc(p.fw.opts.PrivateReachable, func(r netip.Prefix) bool { return r.Contains(a) }) {
			return "a name rule reaches public addresses only; allow this private address by CIDR"
		}
		return ""
	}
	if name == "" {
		return "no host name (HTTP Host or TLS SNI) in the connection, and its address is not allowed"
	}
	return fmt.Sprintf("%q is not allowed by the sandbox's network policy", name)
}

// private reports addresses of private networks: RFC 1918, shared
// address space (RFC 6598), and the reserved 0/8, 192.0.0/24, 198.18/15
// and 240/4.
func private(a netip.Addr) bool {
	if a.IsPrivate() {
		return true
	}
	for _, r := range privateRanges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("240.0.0.0/4"),
}

func (p *Proxy) take(a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[a] >= maxConnsPerSandbox {
		return false
	}
	p.conns[a]++
	return true
}

func (p *Proxy) release(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[a]--; p.conns[a] <= 0 {
		delete(p.conns, a)
	}
}

// relay copies both ways until both sides end.
func relay(down *net.TCPConn, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); _ = down.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// recorder keeps what was read from r, at most maxPeekBytes, so that it
// can be replayed upstream.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	if room := maxPeekBytes - r.buf.Len(); room <= 0 {
		return 0, errors.New("proxy: the connection's first bytes name no host within 16 KiB")
	} else if len(p) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// sniff reads the name a connection is for: a TLS ClientHello's SNI (a
// first byte 0x16), else an HTTP request's Host header. isHTTP is set
// when the connection spoke HTTP (a refusal can answer 403).
func sniff(rec *recorder) (name string, isHTTP bool) {
	br := bufio.NewReaderSize(rec, 512)
	first, err := br.Peek(1)
	if err != nil {
		return "", false
	}
	if first[0] == 0x16 {
		return sniffTLS(br), false
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", true
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(host), true
}

// sniffTLS runs a TLS server handshake far enough to read the
// ClientHello's server name, then abandons it.
func sniffTLS(r io.Reader) string {
	var name string
	errSeen := errors.New("seen")
	conn := tls.Server(readOnlyConn{r}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errSeen
	}})
	_ = conn.Handshake()
	return strings.ToLower(name)
}

// readOnlyConn is a net.Conn that reads r and writes nowhere (the sniffing
// handshake never answers the client).
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// originalDst is where a DNAT-redirected connection was going
// (SO_ORIGINAL_DST).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var (
		sa   syscall.RawSockaddrInet4
		serr error
	)
	const soOriginalDst = 80
	err = raw.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(sa))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_IP, soOriginalDst,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	port := uint16(sa.Port>>8 | sa.Port<<8) // network byte order
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
