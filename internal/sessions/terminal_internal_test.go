package sessions

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// A client that does not keep up is dropped once maxClientQueue bytes wait
// for it; what it held is freed, and nothing more is queued for it.
func TestTerminalClient_QueueIsBoundedAndDropsTheSlow(t *testing.T) {
	var budget atomic.Int64
	cl := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1)}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	pushed := 0
	for cl.push(chunk) {
		pushed += len(chunk)
		if pushed > 2*maxClientQueue {
			t.Fatalf("queued %d bytes, past the %d bound", pushed, maxClientQueue)
		}
	}
	if pushed > maxClientQueue {
		t.Errorf("queued %d bytes before the drop, want at most %d", pushed, maxClientQueue)
	}
	if !cl.slow || !cl.closed || cl.queued != 0 || cl.queue != nil {
		t.Errorf("after the drop: slow %v closed %v queued %d", cl.slow, cl.closed, cl.queued)
	}
	if cl.push([]byte("more")) {
		t.Error("a dropped client took more output")
	}
	if n := budget.Load(); n != 0 {
		t.Errorf("the daemon's budget holds %d bytes of a dropped client", n)
	}
}

// Past the daemon-wide bound the client whose push crosses it is dropped,
// even within its own bound; what the others queued stays counted until
// their writers take it.
func TestTerminalClient_DaemonBudget(t *testing.T) {
	var budget atomic.Int64
	budget.Store(maxQueuedTotal - 10 - chunkOverhead)
	a := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1)}
	if !a.push(make([]byte, 10)) {
		t.Fatal("a push within the budget was refused")
	}
	b := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1)}
	if b.push([]byte("x")) || !b.slow {
		t.Error("a push past the daemon's budget was taken")
	}
	if got := budget.Load(); got != maxQueuedTotal {
		t.Errorf("budget %d, want %d", got, maxQueuedTotal)
	}
	a.mu.Lock()
	batch := a.takeLocked()
	a.mu.Unlock()
	if len(batch) != 1 || budget.Load() != maxQueuedTotal-10-chunkOverhead {
		t.Errorf("after a's writer took its batch: %d chunks, budget %d", len(batch), budget.Load())
	}
}

// The broadcast never waits on a client: a full client is removed from the
// terminal, the others keep their output.
func TestTerminal_BroadcastDropsOnlyTheFull(t *testing.T) {
	s := &terminal{clients: map[*TerminalClient]struct{}{}}
	var budget atomic.Int64
	full := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1), queued: maxClientQueue}
	ok := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1)}
	s.clients[full], s.clients[ok] = struct{}{}, struct{}{}
	s.broadcast([]byte("hello"))
	if _, still := s.clients[full]; still {
		t.Error("the full client is still attached")
	}
	if _, still := s.clients[ok]; !still || ok.queued != 5+chunkOverhead {
		t.Errorf("the other client: attached %v, queued %d", still, ok.queued)
	}
}

// A chunk costs its slot as well as its bytes, and an empty one is never
// queued: a hostile agent's stream of empty or one-byte events cannot
// queue more slots than the bytes the bound allows.
func TestTerminal_TinyChunksAreBounded(t *testing.T) {
	s := &terminal{clients: map[*TerminalClient]struct{}{}}
	var budget atomic.Int64
	cl := &TerminalClient{budget: &budget, wake: make(chan struct{}, 1)}
	s.clients[cl] = struct{}{}
	for range 1 << 20 {
		s.broadcast(nil)
		s.broadcast([]byte{})
	}
	if len(cl.queue) != 0 || cl.queued != 0 {
		t.Fatalf("empty chunks queued: %d chunks, %d bytes", len(cl.queue), cl.queued)
	}
	for i := 0; i < maxClientQueue; i++ { // more one-byte chunks than the bound holds bytes
		s.broadcast([]byte{'x'})
		if _, still := s.clients[cl]; !still {
			break
		}
	}
	if _, still := s.clients[cl]; still || !cl.slow {
		t.Fatal("a client fed one-byte chunks was never dropped")
	}
	if max := maxClientQueue / (1 + chunkOverhead); len(cl.queue) > max {
		t.Fatalf("%d chunks queued, past %d", len(cl.queue), max)
	}
}

func TestExitOf(t *testing.T) {
	for _, tc := range []struct {
		st   agent.ExitStatus
		want TerminalExit
	}{
		{agent.ExitStatus{Code: 0, Exited: true, Status: "exit status 0"}, TerminalExit{0, ""}},
		{agent.ExitStatus{Code: 3, Exited: true, Status: "exit status 3"}, TerminalExit{3, "non-zero exit"}},
		{agent.ExitStatus{Code: -1, Status: "signal: killed"}, TerminalExit{137, "SIGKILL"}},
		{agent.ExitStatus{Code: -1, Status: "signal: terminated"}, TerminalExit{143, "SIGTERM"}},
		{agent.ExitStatus{Code: -1, Status: "signal: hangup"}, TerminalExit{129, "signal 1"}},
		{agent.ExitStatus{Code: -1, Status: "odd"}, TerminalExit{-1, "non-zero exit"}},
	} {
		if got := exitOf(tc.st); got != tc.want {
			t.Errorf("exitOf(%+v) = %+v, want %+v", tc.st, got, tc.want)
		}
	}
}
