package filesystem

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// CreateWatcher starts a polling watcher and returns its id. The watch is in
// place when the call returns. Errors as for WatchDir, plus
// resource_exhausted when MaxWatchers watchers exist.
func (s *Service) CreateWatcher(_ context.Context, req *connect.Request[rpc.CreateWatcherRequest]) (*connect.Response[rpc.CreateWatcherResponse], error) {
	_, root, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	d, err := openWatch(watchSpec{
		root:          root,
		recursive:     req.Msg.GetRecursive(),
		includeEntry:  req.Msg.GetIncludeEntry(),
		networkMounts: req.Msg.GetAllowNetworkMounts(),
	}, s.users.Names())
	if err != nil {
		return nil, toConnect(err)
	}
	p, err := s.pollers.add(s.ctx)
	if err != nil {
		d.Close()
		return nil, toConnect(err)
	}
	s.wg.Go(func() {
		defer d.Close()
		err := d.run(p.ctx, 0, sink{event: func(e *rpc.FilesystemEvent) error { p.push(e); return nil }})
		if err != nil {
			s.log.Warn("filesystem watcher failed", "id", p.id, "path", root, "err", err)
		}
		p.finish(err)
	})
	return connect.NewResponse(&rpc.CreateWatcherResponse{WatcherId: p.id}), nil
}

// GetWatcherEvents returns and forgets the events buffered since the last
// call, oldest first. Once a failed watcher's events are drained, the call
// returns its error and the watcher is gone. An unknown id is not_found.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[rpc.GetWatcherEventsRequest]) (*connect.Response[rpc.GetWatcherEventsResponse], error) {
	events, dropped, err := s.pollers.drain(req.Msg.GetWatcherId())
	if err != nil {
		return nil, toConnect(err)
	}
	if dropped > 0 { // the wire has no field for it; the client sees a gap
		s.log.Warn("filesystem watcher buffer overflowed", "id", req.Msg.GetWatcherId(), "dropped", dropped)
	}
	return connect.NewResponse(&rpc.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a polling watcher. An unknown id is not_found.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[rpc.RemoveWatcherRequest]) (*connect.Response[rpc.RemoveWatcherResponse], error) {
	if err := s.pollers.remove(req.Msg.GetWatcherId()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.RemoveWatcherResponse{}), nil
}

// pollers is the set of polling watchers.
type pollers struct {
	max       int
	idle      time.Duration
	maxEvents int

	mu     sync.Mutex
	m      map[string]*poller
	closed bool
}

func newPollers(max int, idle time.Duration, maxEvents int) *pollers {
	return &pollers{max: max, idle: idle, maxEvents: maxEvents, m: make(map[string]*poller)}
}

// poller buffers one watcher's events between polls.
type poller struct {
	id        string
	maxEvents int
	ctx       context.Context // ends the watch goroutine
	cancel    context.CancelFunc
	idle      *time.Timer // removes the poller when nobody polls

	mu      sync.Mutex
	events  []*rpc.FilesystemEvent
	dropped int
	err     error // why the watch ended, once it has
}

// add registers a new poller whose context is a child of parent.
func (ps *pollers) add(parent context.Context) (*poller, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, ErrClosed
	}
	if len(ps.m) >= ps.max {
		return nil, fmt.Errorf("%w: %d polling watchers exist", ErrTooManyWatchers, len(ps.m))
	}
	ctx, cancel := context.WithCancel(parent)
	p := &poller{id: "w" + rand.Text(), maxEvents: ps.maxEvents, ctx: ctx, cancel: cancel}
	p.idle = time.AfterFunc(ps.idle, func() { ps.remove(p.id) })
	ps.m[p.id] = p
	return p, nil
}

// drain returns p's buffered events and how many were dropped since the
// last drain, and rearms its idle timer; a failed watcher with nothing
// buffered returns its error and is removed.
func (ps *pollers) drain(id string) ([]*rpc.FilesystemEvent, int, error) {
	ps.mu.Lock()
	p, ok := ps.m[id]
	if ok {
		p.idle.Reset(ps.idle)
	}
	ps.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownWatcher, id)
	}
	p.mu.Lock()
	events, err, dropped := p.events, p.err, p.dropped
	p.events, p.dropped = nil, 0
	p.mu.Unlock()
	if len(events) == 0 && err != nil {
		ps.remove(id)
		return nil, 0, err
	}
	return events, dropped, nil
}

// remove stops and forgets a poller.
func (ps *pollers) remove(id string) error {
	ps.mu.Lock()
	p, ok := ps.m[id]
	delete(ps.m, id)
	ps.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownWatcher, id)
	}
	p.stop()
	return nil
}

// closeAll stops every poller; later adds fail with ErrClosed.
func (ps *pollers) closeAll() {
	ps.mu.Lock()
	ps.closed = true
	all := ps.m
	ps.m = make(map[string]*poller)
	ps.mu.Unlock()
	for _, p := range all {
		p.stop()
	}
}

func (p *poller) stop() {
	p.idle.Stop()
	p.cancel()
}

// push buffers e. When the buffer is full the oldest tenth is dropped, so
// a flood costs amortised O(1) per event.
func (p *poller) push(e *rpc.FilesystemEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) >= p.maxEvents {
		n := min(p.maxEvents/10+1, len(p.events))
		p.events = append(p.events[:0], p.events[n:]...)
		p.dropped += n
	}
	p.events = append(p.events, e)
}

// finish records why the watch ended (ErrClosed if it ended without error
// and without being stopped).
func (p *poller) finish(err error) {
	if err == nil && p.ctx.Err() == nil {
		err = ErrClosed
	}
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}
