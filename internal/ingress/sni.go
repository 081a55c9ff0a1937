package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
)

// helloTimeout bounds how long a client may take to send its ClientHello.
const helloTimeout = 10 * time.Second

// startL4 is the default L4 bootstrap: bind the SNI passthrough listener
// (when TLSAddr is set) and start its accept loop. Host-port listeners
// need no shared state beyond the router's maps.
func (r *Router) startL4(ctx context.Context) error {
	if r.tlsAddr == "" {
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", r.tlsAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", r.tlsAddr, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		ln.Close()
		return ErrClosed
	}
	r.tlsLn = ln
	r.wg.Add(1)
	go r.acceptSNI(ln)
	return nil
}

// TLSAddr is the bound address of the SNI listener, or nil before the
// L4 machinery started.
func (r *Router) TLSAddr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tlsLn == nil {
		return nil
	}
	return r.tlsLn.Addr()
}

// ListenTLS starts the L4 machinery now, as the first TCP or TLS exposure
// would, and returns the SNI listener's bound address. A cluster node
// calls it at start, since other nodes forward TLS connections to it
// before it exposes anything. Without a TLS address configured, or when
// the bind fails, it is ErrL4Unavailable and the next call (or exposure)
// tries again.
func (r *Router) ListenTLS(ctx context.Context) (net.Addr, error) {
	if r.tlsAddr == "" {
		return nil, fmt.Errorf("listen tls: %w: no TLS listener address configured", ErrL4Unavailable)
	}
	if err := r.ensureL4(ctx); err != nil {
		return nil, fmt.Errorf("listen tls: %w", err)
	}
	if a := r.TLSAddr(); a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("listen tls: %w", ErrClosed)
}

func (r *Router) acceptSNI(ln net.Listener) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.log.Warn("ingress: accept", "addr", r.tlsAddr, "err", err)
			}
			return
		}
		if !r.sniConns.add(c) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go r.serveSNI(c)
	}
}

// serveSNI reads the ClientHello without answering it, routes its server
// name to an exposed tls port, replays the bytes it read to that port and
// splices the rest: TLS ends inside the sandbox. A name this node does not
// route goes to the node Remote names (cluster mode), behind a preamble;
// a connection that came with a valid preamble was forwarded here and is
// served here or closed, never forwarded again. Anything else is closed.
func (r *Router) serveSNI(c net.Conn) {
	defer r.wg.Done()
	defer r.sniConns.remove(c)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	forwarded, name, hello, err := r.readHello(c)
	if err != nil {
		if forwarded {
			// Debug: anyone can send a first line that is no preamble.
			r.log.Debug("ingress: tls", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	t, v := r.resolve(name, TLS)
	if v == found {
		r.spliceSNI(c, name, hello, func(ctx context.Context) (net.Conn, error) {
			return r.dial(ctx, t.SandboxID, t.Port.Number)
		})
		return
	}
	if forwarded || r.remote == nil {
		c.Close()
		return
	}
	addr, ok := r.remote(name)
	if !ok {
		c.Close()
		return
	}
	preamble := r.peers.SignTLS(name)
	r.spliceSNI(c, name, append(preamble, hello...), func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		up, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dial the owner's tls listener %s: %w", addr, err)
		}
		return up, nil
	})
}

// spliceSNI dials the upstream of a connection whose ClientHello was read
// (within dialTimeout), writes first (the hello, behind a preamble when
// forwarding) and splices the two. Both connections count in sniConns,
// so Close cuts them; on any failure both are closed.
func (r *Router) spliceSNI(c net.Conn, name string, first []byte, dial func(context.Context) (net.Conn, error)) {
	ctx, cancel := context.WithTimeout(r.lifetime, dialTimeout)
	up, err := dial(ctx)
	cancel()
	if err != nil {
		r.log.Warn("ingress: tls", "server_name", name, "err", err)
		c.Close()
		return
	}
	if !r.sniConns.add(up) {
		c.Close()
		up.Close()
		return
	}
	defer r.sniConns.remove(up)
	if _, err := up.Write(first); err != nil {
		r.log.Warn("ingress: tls", "server_name", name, "err", fmt.Errorf("replay the client hello: %w", err))
		c.Close()
		up.Close()
		return
	}
	tunnel.Splice(c, up)
}

// errPreamble is a first line that is no valid peer preamble.
var errPreamble = errors.New("invalid peer preamble")

// readHello reads what a client sends before it is answered: a ClientHello
// (a TLS handshake record, first byte 0x16), or, from a node forwarding a
// connection, a preamble line and then the ClientHello. forwarded is true
// once a preamble was seen, valid or not; err is set unless the preamble
// verified (Peers) for the hello's server name. hello is every byte of the
// ClientHello, the preamble's excluded.
func (r *Router) readHello(c net.Conn) (forwarded bool, name string, hello []byte, err error) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, "", nil, fmt.Errorf("read client hello: %w", err)
	}
	if b[0] == recordTypeHandshake {
		name, hello, err = readClientHello(&prefixConn{Conn: c, prefix: b[:]})
		return false, name, hello, err
	}
	if r.peers == nil {
		return false, "", nil, fmt.Errorf("read client hello: first byte %#x is no handshake record", b[0])
	}
	line, err := readLine(c, b[0], MaxPreambleLen)
	if err != nil {
		return true, "", nil, fmt.Errorf("%w: %w", errPreamble, err)
	}
	if name, hello, err = readClientHello(c); err != nil {
		return true, "", nil, err
	}
	if _, ok := r.peers.VerifyTLS(line, name); !ok {
		return true, "", nil, fmt.Errorf("%w for %q", errPreamble, name)
	}
	return true, name, hello, nil
}

// recordTypeHandshake is the first byte of a TLS handshake record, which
// a ClientHello is.
const recordTypeHandshake = 0x16

// readLine reads from c, one byte at a time so nothing past the line is
// consumed, a line that starts with first (already read) and ends with
// '\n', at most max bytes in all.
func readLine(c net.Conn, first byte, max int) ([]byte, error) {
	line := make([]byte, 1, 64)
	line[0] = first
	var b [1]byte
	for line[len(line)-1] != '\n' {
		if len(line) >= max {
			return nil, fmt.Errorf("no newline in %d bytes", max)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return nil, fmt.Errorf("read the preamble: %w", err)
		}
		line = append(line, b[0])
	}
	return line, nil
}

// prefixConn reads prefix, then the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// errHelloRead stops the handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from c without writing to it and
// returns its server name (SNI) and every byte read, to be replayed to the
// real server. crypto/tls does the parsing (fragmented records included):
// the handshake runs on a read-only, recording view of c and stops in
// GetConfigForClient.
func readClientHello(c net.Conn) (serverName string, read []byte, err error) {
	rec := &recordingConn{Conn: c}
	err = tls.Server(rec, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			serverName = h.ServerName
			return nil, errHelloRead
		},
	}).Handshake()
	if !errors.Is(err, errHelloRead) {
		return "", nil, fmt.Errorf("read client hello: %w", err)
	}
	return serverName, rec.buf.Bytes(), nil
}

// recordingConn keeps what is read and refuses writes, so the peek never
// answers the client.
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
