package process

import (
	"sync"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// subBuffer is how many events a subscriber may fall behind before the
// process's output readers wait for it. 64 chunks of at most 32 KiB bound a
// subscriber's queue at 2 MiB.
const subBuffer = 64

// hub fans the events of one process out to its subscribers (the Start
// stream and any number of Connect streams). Delivery is lossless and in
// order per output stream for as long as a subscriber stays: a slow
// subscriber slows the readers down (and, once the pipe fills, the
// process), like a slow reader of a pipe would. A subscriber that leaves
// releases the readers at once. Output nobody subscribes to is dropped.
type hub struct {
	mu   sync.Mutex
	subs map[*sub]struct{}
	end  *rpc.ProcessEvent // set by finish; later subscribers get only this
}

// sub is one subscriber. Events arrives on ch; ch is closed after the end
// event.
type sub struct {
	ch   chan *rpc.ProcessEvent
	gone chan struct{}
	once sync.Once
}

func newHub() *hub { return &hub{subs: make(map[*sub]struct{})} }

// subscribe adds a subscriber that sees every event published from now on.
// On a finished hub it gets the end event alone.
func (h *hub) subscribe() *sub {
	s := &sub{ch: make(chan *rpc.ProcessEvent, subBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end != nil {
		s.ch <- h.end
		close(s.ch)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// unsubscribe removes s; pending and future sends to it are abandoned. It
// is idempotent.
func (h *hub) unsubscribe(s *sub) {
	s.once.Do(func() { close(s.gone) })
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// publish delivers ev to every current subscriber, waiting for each to take
// it or leave. Safe for concurrent use by the output readers; it must not
// be called after finish.
func (h *hub) publish(ev *rpc.ProcessEvent) {
	h.mu.Lock()
	subs := make([]*sub, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// finish delivers the end event to every subscriber and closes their
// channels. Call it once, after the last publish has returned.
func (h *hub) finish(end *rpc.ProcessEvent) {
	h.mu.Lock()
	h.end = end
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	for s := range subs {
		select {
		case s.ch <- end:
		case <-s.gone:
		}
		close(s.ch)
	}
}
