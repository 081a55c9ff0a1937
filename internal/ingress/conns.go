package ingress

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// connSet tracks live connections so that they can be closed together.
// Once closed, it refuses new members.
type connSet struct {
	mu     sync.Mutex
	m      map[net.Conn]struct{}
	closed bool
}

// add tracks c and reports true, or reports false when the set is closed
// (the caller closes c).
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[net.Conn]struct{}{}
	}
	s.m[c] = struct{}{}
	return true
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	m := s.m
	s.m = nil
	s.mu.Unlock()
	for c := range m {
		c.Close()
	}
}

// upstreams indexes live connections to sandbox ports by sandbox, so that
// unexposing a port or removing a sandbox cuts its traffic, pooled idle
// HTTP connections and WebSockets included.
type upstreams struct {
	mu sync.Mutex
	m  map[string]map[*upstreamConn]struct{}
}

func (u *upstreams) init() { u.m = map[string]map[*upstreamConn]struct{}{} }

func (u *upstreams) add(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	set := u.m[c.sandboxID]
	if set == nil {
		set = map[*upstreamConn]struct{}{}
		u.m[c.sandboxID] = set
	}
	set[c] = struct{}{}
}

func (u *upstreams) remove(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if set := u.m[c.sandboxID]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(u.m, c.sandboxID)
		}
	}
}

// take removes and returns the matching connections of every sandbox.
func (u *upstreams) take(match func(*upstreamConn) bool) []*upstreamConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []*upstreamConn
	for id, set := range u.m {
		for c := range set {
			if match(c) {
				out = append(out, c)
				delete(set, c)
			}
		}
		if len(set) == 0 {
			delete(u.m, id)
		}
	}
	return out
}

func (u *upstreams) closePort(sandboxID string, port int) {
	u.closeSet(sandboxID, func(c *upstreamConn) bool { return c.port == port })
}

func (u *upstreams) closeSandbox(sandboxID string) {
	u.closeSet(sandboxID, func(*upstreamConn) bool { return true })
}

// closeSet closes the matching connections of one sandbox.
func (u *upstreams) closeSet(sandboxID string, match func(*upstreamConn) bool) {
	u.mu.Lock()
	set := u.m[sandboxID]
	var gone []*upstreamConn
	for c := range set {
		if match(c) {
			gone = append(gone, c)
			delete(set, c)
		}
	}
	if len(set) == 0 {
		delete(u.m, sandboxID)
	}
	u.mu.Unlock()
	for _, c := range gone {
		c.Conn.Close()
	}
}

func (u *upstreams) closeAll() {
	for _, c := range u.take(func(*upstreamConn) bool { return true }) {
		c.Conn.Close()
	}
}

// upstreamConn is a tracked connection to a sandbox port.
type upstreamConn struct {
	net.Conn
	sandboxID string
	port      int
	owner     *upstreams
	once      sync.Once
}

func (c *upstreamConn) Close() error {
	c.once.Do(func() { c.owner.remove(c) })
	return c.Conn.Close()
}

// CloseWrite half-closes when the underlying connection can, else closes.
func (c *upstreamConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// dial opens a tracked connection to an exposed sandbox port. The route
// is checked again once the connection is tracked, so a dial racing
// UnexposePort or Remove either is closed by it or sees the route gone.
func (r *Router) dial(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	raw, err := r.dialer.DialPort(ctx, sandboxID, port)
	if err != nil && r.wake != nil {
		// A paused sandbox with an auto-resume wakes for the request.
		switch ok, werr := r.wakeFor(ctx, sandboxID); {
		case werr != nil:
			err = werr
		case ok:
			raw, err = r.dialer.DialPort(ctx, sandboxID, port)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s port %d: %w", sandboxID, port, err)
	}
	c := &upstreamConn{Conn: raw, sandboxID: sandboxID, port: port, owner: &r.upstream}
	r.upstream.add(c)
	if _, ok := r.table.Lookup(sandboxID, port); !ok {
		c.Close()
		return nil, fmt.Errorf("dial %s port %d: %w", sandboxID, port, ErrNotExposed)
	}
	return c, nil
}

// wakeTimeout bounds how long a connection or request waits for its
// sandbox to wake (Options.Wake): a restore takes seconds; a client
// still there after this gets the wake's error and may retry.
const wakeTimeout = 45 * time.Second

// wakeFor is Options.Wake for a dial on ctx, bounded by wakeTimeout and
// by the request the dial is for (an HTTP dial's ctx outlives it: the
// transport detaches it): a caller that hung up stops waiting at once.
func (r *Router) wakeFor(ctx context.Context, sandboxID string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	if req, _ := ctx.Value(requestKey{}).(context.Context); req != nil {
		stop := context.AfterFunc(req, cancel)
		defer stop()
	}
	return r.wake(ctx, sandboxID)
}
