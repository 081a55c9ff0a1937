package process

import (
	"sync"

	"github.com/sandboxd/sandboxd/internal/agent/server/logbook"
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
// releases the readers at once. Output nobody subscribes to is dropped,
// except what a hub that keeps output holds (see [hub.subscribeReplay]).
type hub struct {
	mu   sync.Mutex
	subs map[*sub]struct{}
	end  *rpc.ProcessEvent // set by finish; later subscribers get only this

	// keep bounds the cost of the data events kept (0: none; an event
	// costs its output's bytes and keptOverhead); kept holds the newest
	// data events, oldest first, keptBytes their cost.
	keep      int
	kept      []*rpc.ProcessEvent
	keptBytes int

	// book, when set, gets every output as source's (the sandbox's log,
	// package logbook). Both are set before the first publish and never
	// change after.
	book   *logbook.Book
	source string
}

// sub is one subscriber. Events arrives on ch; ch is closed after the end
// event. replay, when set, is sent before anything from ch.
type sub struct {
	ch     chan *rpc.ProcessEvent
	gone   chan struct{}
	once   sync.Once
	replay []*rpc.ProcessEvent
}

// newHub returns a hub that keeps the newest keep bytes of output (none
// when keep is 0).
func newHub(keep int) *hub { return &hub{subs: make(map[*sub]struct{}), keep: keep} }

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

// subscribeReplay is subscribe preceded by the output the hub keeps: the
// subscriber gets every kept event, then every event published after, and
// none twice or lost between the two (both are decided under one lock
// with publish's record). On a finished hub it gets the kept events and
// the end.
func (h *hub) subscribeReplay() *sub {
	s := &sub{ch: make(chan *rpc.ProcessEvent, subBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.replay = append(make([]*rpc.ProcessEvent, 0, len(h.kept)), h.kept...) // non-nil: a replay, if empty
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
	if h.book != nil {
		if d := ev.GetData(); d != nil {
			switch {
			case d.GetStdout() != nil:
				h.book.Write(h.source, logbook.Stdout, d.GetStdout())
			case d.GetStderr() != nil:
				h.book.Write(h.source, logbook.Stderr, d.GetStderr())
			default:
				h.book.Write(h.source, logbook.PTY, d.GetPty())
			}
		}
	}
	h.mu.Lock()
	h.record(ev)
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

// record keeps ev's output, dropping the oldest kept events past the
// bound. Called with mu held.
func (h *hub) record(ev *rpc.ProcessEvent) {
	if h.keep <= 0 {
		return
	}
	n := keptCost(ev)
	if n > h.keep {
		if h.keep <= keptOverhead {
			return
		}
		ev = tail(ev, h.keep-keptOverhead)
		n = keptCost(ev)
	}
	h.kept = append(h.kept, ev)
	h.keptBytes += n
	drop := 0
	for h.keptBytes > h.keep {
		h.keptBytes -= keptCost(h.kept[drop])
		h.kept[drop] = nil
		drop++
	}
	if drop > 0 {
		h.kept = h.kept[drop:]
	}
}

// tail is a data event of the last n bytes of ev's output.
func tail(ev *rpc.ProcessEvent, n int) *rpc.ProcessEvent {
	d := ev.GetData()
	switch {
	case d.GetStdout() != nil:
		return dataEvent(streamStdout, d.GetStdout()[len(d.GetStdout())-n:])
	case d.GetStderr() != nil:
		return dataEvent(streamStderr, d.GetStderr()[len(d.GetStderr())-n:])
	default:
		return dataEvent(streamPTY, d.GetPty()[len(d.GetPty())-n:])
	}
}

// keptOverhead is what a kept event costs beyond its output: a process
// printing a byte at a time keeps as many events as its bound allows
// bytes over 65, not one per byte, so that its memory and its replay stay
// near the bound.
const keptOverhead = 64

// keptCost is what ev counts against the bound.
func keptCost(ev *rpc.ProcessEvent) int { return dataLen(ev) + keptOverhead }

// dataLen is the size of a data event's output (0 for other events).
func dataLen(ev *rpc.ProcessEvent) int {
	d := ev.GetData()
	return len(d.GetStdout()) + len(d.GetStderr()) + len(d.GetPty())
}

// finish delivers the end event to every subscriber and closes their
// channels. Call it once, after the last publish has returned.
func (h *hub) finish(end *rpc.ProcessEvent) {
	if h.book != nil {
		h.book.Flush(h.source)
	}
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
