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
// splices the rest: TLS ends inside the sandbox. Anything else is closed.
func (r *Router) serveSNI(c net.Conn) {
	defer r.wg.Done()
	defer r.sniConns.remove(c)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	name, hello, err := readClientHello(c)
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	t, v := r.resolve(name, TLS)
	if v != found {
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(r.lifetime, dialTimeout)
	up, err := r.dial(ctx, t.SandboxID, t.Port.Number)
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
	if _, err := up.Write(hello); err != nil {
		c.Close()
		up.Close()
		return
	}
	tunnel.Splice(c, up)
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
