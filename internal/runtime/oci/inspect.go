package oci

import (
	"context"
	"sync"

	"github.com/moby/moby/client"
)

// Image inspects, shared. Every create asks the engine for its image's id
// (image.go), and a burst of creates asks it at once: 42 inspects queued
// at a busy engine took up to 280 ms each here. Creates of one reference
// share inspects instead, without reading anything older than their own
// call: a create that finds an inspect of its reference under way waits
// for the next one, which starts when that one ends and answers every
// create that came meanwhile. A burst then costs two inspects per
// reference, and a retag the engine finished before a create began is
// always seen by it.

// inspectTimeout bounds one shared inspect (its callers leave with their
// own contexts; the inspect is nobody's to cancel).
const inspectTimeout = cleanupTimeout

type imageInspects struct {
	mu   sync.Mutex
	refs map[string]*inspectRef
}

// inspectRef is a reference's inspect under way, and the one that starts
// after it for the callers that came meanwhile.
type inspectRef struct {
	running, next *inspectCall
}

type inspectCall struct {
	done chan struct{}
	res  client.ImageInspectResult
	err  error
}

// inspectImage is the engine's ImageInspect of ref, from an inspect that
// started after this call did.
func (r *Runtime) inspectImage(ctx context.Context, ref string) (client.ImageInspectResult, error) {
	g := &r.inspects
	g.mu.Lock()
	if g.refs == nil {
		g.refs = map[string]*inspectRef{}
	}
	st := g.refs[ref]
	if st == nil {
		st = &inspectRef{}
		g.refs[ref] = st
	}
	var c *inspectCall
	switch {
	case st.running == nil:
		c = &inspectCall{done: make(chan struct{})}
		st.running = c
		go r.runInspects(ref, st)
	case st.next == nil:
		c = &inspectCall{done: make(chan struct{})}
		st.next = c
	default:
		c = st.next
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return client.ImageInspectResult{}, ctx.Err()
	}
}

// runInspects runs st's inspects one after the other until none is
// waiting, then forgets ref.
func (r *Runtime) runInspects(ref string, st *inspectRef) {
	g := &r.inspects
	g.mu.Lock()
	c := st.running
	g.mu.Unlock()
	for c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
		c.res, c.err = r.cli.ImageInspect(ctx, ref)
		cancel()
		close(c.done)
		g.mu.Lock()
		c, st.next = st.next, nil
		st.running = c
		if c == nil {
			delete(g.refs, ref)
		}
		g.mu.Unlock()
	}
}
