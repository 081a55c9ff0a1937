package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// tcpListener is one host port tunnelled to one sandbox port.
type tcpListener struct {
	hostPort  int
	sandboxID string
	port      int
	ln        net.Listener
	conns     connSet       // client and upstream sides of live connections
	done      chan struct{} // closed when the accept loop returns
}

// close stops accepting, closes live connections and waits for the
// accept loop, so the host port is free when it returns.
func (l *tcpListener) close() {
	l.ln.Close()
	l.conns.closeAll()
	<-l.done
}

// ListenTCP binds BindAddr:hostPort and tunnels every connection it
// accepts to port inside sandboxID, which must be exposed with protocol
// tcp (ErrNotExposed otherwise). The listener lives until CloseTCP,
// UnexposePort, Remove or Close; ctx bounds only the bind.
//
// It is safe to retry: a host port this router already listens on for
// the same sandbox port is a no-op; for another one it is
// ErrHostPortConflict. A host port held by another process fails with an
// error that is both ErrHostPortInUse and syscall.EADDRINUSE: release
// that candidate and try the next. The first call starts the L4
// machinery (ErrL4Unavailable when that fails; the next call retries).
func (r *Router) ListenTCP(ctx context.Context, hostPort int, sandboxID string, port int) error {
	if !naming.ValidPort(hostPort) {
		return fmt.Errorf("%w: host port %d", ErrInvalidRoute, hostPort)
	}
	if err := r.ensureL4(ctx); err != nil {
		return fmt.Errorf("listen host port %d: %w", hostPort, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if l := r.tcp[hostPort]; l != nil {
		if l.sandboxID == sandboxID && l.port == port {
			return nil
		}
		return fmt.Errorf("listen host port %d for %s port %d (routes to %s port %d): %w",
			hostPort, sandboxID, port, l.sandboxID, l.port, ErrHostPortConflict)
	}
	// Checked under r.mu: UnexposePort and Remove change the table first
	// and then close listeners under r.mu, so a listener never outlives
	// its route.
	if p, ok := r.table.Lookup(sandboxID, port); !ok || p.Protocol != TCP {
		return fmt.Errorf("listen host port %d for %s port %d: %w", hostPort, sandboxID, port, ErrNotExposed)
	}
	addr := net.JoinHostPort(r.bindAddr, strconv.Itoa(hostPort))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen %s: %w: %w", addr, ErrHostPortInUse, err)
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	l := &tcpListener{hostPort: hostPort, sandboxID: sandboxID, port: port, ln: ln, done: make(chan struct{})}
	r.tcp[hostPort] = l
	if r.tcpBySbx[sandboxID] == nil {
		r.tcpBySbx[sandboxID] = map[int]*tcpListener{}
	}
	r.tcpBySbx[sandboxID][hostPort] = l
	r.wg.Add(1)
	go r.acceptTCP(l)
	return nil
}

// CloseTCP closes the listener on hostPort and its live connections. It
// is idempotent; when it returns, the host port is free.
func (r *Router) CloseTCP(hostPort int) error {
	r.mu.Lock()
	l := r.tcp[hostPort]
	if l != nil {
		delete(r.tcp, hostPort)
		delete(r.tcpBySbx[l.sandboxID], hostPort)
		if len(r.tcpBySbx[l.sandboxID]) == 0 {
			delete(r.tcpBySbx, l.sandboxID)
		}
	}
	r.mu.Unlock()
	if l != nil {
		l.close()
	}
	return nil
}

func (r *Router) acceptTCP(l *tcpListener) {
	defer r.wg.Done()
	defer close(l.done)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.log.Warn("ingress: accept", "host_port", l.hostPort, "err", err)
			}
			return
		}
		if !l.conns.add(c) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go r.serveTCP(l, c)
	}
}

func (r *Router) serveTCP(l *tcpListener, c net.Conn) {
	defer r.wg.Done()
	defer l.conns.remove(c)
	ctx, cancel := context.WithTimeout(r.lifetime, dialTimeout)
	up, err := r.dial(ctx, l.sandboxID, l.port)
	cancel()
	if err != nil {
		r.log.Warn("ingress: tcp", "host_port", l.hostPort, "err", err)
		c.Close()
		return
	}
	if !l.conns.add(up) {
		c.Close()
		up.Close()
		return
	}
	defer l.conns.remove(up)
	tunnel.Splice(c, up)
}
