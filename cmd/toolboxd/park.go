package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Parking, for a checkpoint under gVisor. gVisor cannot save a socket
// bound to a host path (runsc: "Cannot save endpoint with bound host
// socket"), and the agent's socket is one (--host-uds=create), as are
// the connections accepted on it. So before `runsc checkpoint` the
// daemon sends the agent SIGUSR1 (runsc kill): the agent closes its
// listener and every connection, hijacked ones included, removes its
// socket, writes parkedName beside it and waits; the daemon
// sees that file and checkpoints.
// After `runsc restore` (or a failed checkpoint) the daemon sends
// SIGUSR2 and the agent listens again at the same path. The processes
// the agent started run on throughout: only the daemon's connections end.
// What the daemon handed the agent (PUT config: its token, its env) stays
// too: the servers before and after a park serve one handler (run.go).
//
// Any process in the sandbox may send these signals too; the worst it
// does is cut its own sandbox off from the daemon until the next SIGUSR2
// (root in the sandbox can stop its agent anyway), and a listener it
// reopens makes the daemon's checkpoint fail, leaving the sandbox running.

// Parking signals, and the file a parked agent writes beside its socket
// (runtime.AgentParkedName).
const (
	sigPark    = unix.SIGUSR1
	sigUnpark  = unix.SIGUSR2
	parkedName = "parked"
)

// parker receives the parking signals.
type parker struct {
	parkCh, unparkCh chan os.Signal
}

func newParker() *parker {
	p := &parker{parkCh: make(chan os.Signal, 1), unparkCh: make(chan os.Signal, 1)}
	signal.Notify(p.parkCh, sigPark)
	signal.Notify(p.unparkCh, sigUnpark)
	return p
}

func (p *parker) stop() { signal.Stop(p.parkCh); signal.Stop(p.unparkCh) }

// parkRequests delivers a value on each SIGUSR1.
func (p *parker) parkRequests() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		if _, ok := <-p.parkCh; ok {
			close(ch)
		}
	}()
	return ch
}

// park closes srv (its listener and connections) and hijacked, removes
// the socket, and waits for SIGUSR2 to listen again at socket. A nil
// listener with a nil error: ctx ended while parked.
func (p *parker) park(ctx context.Context, srv *http.Server, hijacked *connSet, socket string, log *slog.Logger) (net.Listener, error) {
	// A SIGUSR2 from before the park (the sandbox's own) wakes nothing:
	// until the daemon removes the socket's file the listen below fails
	// and the agent waits on. The daemon's own is never dropped.
	_ = srv.Close()
	hijacked.closeAll()
	_ = os.Remove(socket)
	marker := filepath.Join(filepath.Dir(socket), parkedName)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		log.Warn("say the agent parked", "err", err)
	}
	log.Info("toolboxd parked: its socket is closed until SIGUSR2")
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case <-p.unparkCh:
		}
		ln, err := listen(socket)
		if err == nil {
			_ = os.Remove(marker)
			return ln, nil
		}
		// The daemon removes the socket's file before it wakes the
		// agent (gVisor's file proxy refuses the agent that); a wake-up
		// from elsewhere finds it there: wait for the daemon's.
		log.Warn("listen again after parking", "err", err)
	}
}

// connSet is the connections an http.Server's handlers hijacked (file
// transfers, tunnels), which its Close does not close.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// trackHijacked has srv record the connections its handlers hijack.
func trackHijacked(srv *http.Server) *connSet {
	s := &connSet{conns: map[net.Conn]struct{}{}}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.conns[c] = struct{}{}
		case http.StateClosed:
			delete(s.conns, c)
		case http.StateHijacked:
			// The server says no more of it: the set forgets the
			// hijacked connections that have been closed since.
			for c := range s.conns {
				if closed(c) {
					delete(s.conns, c)
				}
			}
		}
	}
	return s
}

// closed reports whether c has been closed (its descriptor is gone).
func closed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	return rc.Control(func(uintptr) {}) != nil
}

// closeAll closes every connection the server accepted that is still
// open (a hijacked one stays in the set until closed).
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	clear(s.conns)
}
