// Package httplimit bounds what HTTP clients can hold of the daemon: the
// connections open at once (Limiter), and the time a request that is not a
// stream may take (Deadline, Bound).
//
// The daemon's server has no ReadTimeout or WriteTimeout: exec streams,
// file transfers, E2B Connect streams, WebSockets and preview proxying last
// as long as their clients keep them. Instead each edge bounds its routes
// that are not streams with Deadline (a connection deadline, through
// http.ResponseController), and the daemon's outermost handler is Fresh,
// so that a bound never outlives its request on a kept-alive connection.
package httplimit

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Deadline gives the request behind w until now+d to be read and answered:
// a client that trickles its body or does not read the answer loses the
// connection then, and the request's context is cancelled. d <= 0 sets
// none. A writer that reaches no connection (a test recorder) is left
// alone.
func Deadline(w http.ResponseWriter, d time.Duration) {
	if d <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	at := time.Now().Add(d)
	_ = rc.SetReadDeadline(at)
	_ = rc.SetWriteDeadline(at)
}

// Bound returns h with Deadline(w, d) set before it runs.
func Bound(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Deadline(w, d)
		h.ServeHTTP(w, r)
	})
}

// logEvery spaces the limiter's "cap reached" warnings.
const logEvery = time.Minute

// Limiter caps the connections open at once across every listener it
// wraps, so that clients cannot take all of the process's file
// descriptors (the store, the engine's socket and the agents' sockets need
// theirs): past the cap a listener accepts one connection and waits for a
// slot before serving it, and the rest wait in the kernel's backlog, using
// no descriptor, until an open connection closes (idle ones are closed by
// the server's IdleTimeout). Connections a handler hijacks (WebSockets)
// hold their slot until they are closed.
type Limiter struct {
	slots   chan struct{}
	waits   atomic.Uint64
	log     *slog.Logger
	lastLog atomic.Int64 // unix nanoseconds of the last warning
}

// NewLimiter returns a limiter of n connections (at least 1); log gets a
// warning, at most once a minute, when a connection has to wait.
func NewLimiter(n int, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{slots: make(chan struct{}, max(n, 1)), log: log}
}

// Max is the cap.
func (l *Limiter) Max() int { return cap(l.slots) }

// Open is the number of connections being served.
func (l *Limiter) Open() int { return len(l.slots) }

// Waits counts the connections that found every slot taken and waited.
func (l *Limiter) Waits() uint64 { return l.waits.Load() }

// Wrap returns ln with its connections counted against the cap. Closing
// the returned listener ends an Accept waiting for a slot.
func (l *Limiter) Wrap(ln net.Listener) net.Listener {
	return &listener{Listener: ln, lim: l, done: make(chan struct{})}
}

// acquire takes a slot, waiting while all are taken, unless done closes.
func (l *Limiter) acquire(done <-chan struct{}) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.waits.Add(1)
	if now, last := time.Now().UnixNano(), l.lastLog.Load(); now-last > int64(logEvery) && l.lastLog.CompareAndSwap(last, now) {
		l.log.Warn("connection cap reached: new connections wait until one closes", "max_conns", l.Max())
	}
	select {
	case l.slots <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

func (l *Limiter) release() { <-l.slots }

type listener struct {
	net.Listener
	lim       *Limiter
	done      chan struct{}
	closeOnce sync.Once
}

// Accept accepts a connection and then takes a slot for it, so the count
// is of connections, and at most one per listener waits beyond the cap
// holding a descriptor.
func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !ln.lim.acquire(ln.done) {
		c.Close()
		return nil, net.ErrClosed
	}
	return &conn{Conn: c, release: ln.lim.release}, nil
}

func (ln *listener) Close() error {
	ln.closeOnce.Do(func() { close(ln.done) })
	return ln.Listener.Close()
}

// conn gives its slot back when it is first closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// ReadFrom lets the server's file answers keep the kernel's zero-copy path
// (sendfile, splice) of the connection underneath.
func (c *conn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }
