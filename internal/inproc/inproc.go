// Package inproc is a net.Listener of in-memory connections, for a part
// of the daemon that calls the daemon's own HTTP API in process (the MCP
// server's and the dashboard's calls): they pass through the same handler
// (and, in a cluster, the same forwarding) as any client's, without a
// socket.
package inproc

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Listener hands one end of a net.Pipe to Accept for each Dial.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns an open Listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Dial returns the client end of a new connection once Accept took the
// server end; it fails once the listener is closed or ctx is done.
func (l *Listener) Dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("the daemon is stopping")}
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// Accept waits for a Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial fail from now on. It is idempotent.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder address.
func (l *Listener) Addr() net.Addr { return addr{} }

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "in-process" }
