// Package builds is the template builds of a daemon process, in memory:
// each build's place (running, or waiting for one of the bounded build
// slots) and its log, bounded in size and kept a while after the build
// ends. It does no I/O and knows nothing of templates beyond their ids;
// the service's templates part (internal/service/templatebuild.go) runs
// the builds.
package builds

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// MaxLogBytes bounds one build's log; past it the log ends with
// TruncatedNote.
const MaxLogBytes = 1 << 20

// TooManyError refuses a build of an owner with too many builds running
// or waiting (a quota: the service answers it as one).
type TooManyError struct{ Reason string }

func (e *TooManyError) Error() string { return e.Reason }

// Builds is the builds of this process: their places (running, or
// waiting for a slot) and their logs, each bounded. The zero value is
// ready to use.
type Builds struct {
	mu      sync.Mutex
	logs    map[string]*Log
	running map[string]int // builds running, per owner
	queued  map[string]int // builds waiting for a slot, per owner
	total   int
	opened  uint64        // logs opened
	freed   chan struct{} // closed and replaced when a slot is freed
}

// Bounds of the builds running at once: each is a sandbox that no
// tenant's quota counts, so they are bounded here. A build past them
// waits, its template building, for a slot; past the waiting bound too,
// it is refused.
const (
	MaxPerOwner       = 2
	MaxRunning        = 4
	MaxQueuedPerOwner = 8
)

// Place is a build's place: waiting for a slot, then holding it.
type Place struct {
	b       *Builds
	owner   string
	mu      sync.Mutex
	running bool
	done    bool
}

// Enqueue gives owner's build a place, or says the owner has too many.
func (b *Builds) Enqueue(owner string) (*Place, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == nil {
		b.running, b.queued = map[string]int{}, map[string]int{}
		b.freed = make(chan struct{})
	}
	if n := b.running[owner] + b.queued[owner]; n >= MaxPerOwner+MaxQueuedPerOwner {
		return nil, &TooManyError{Reason: fmt.Sprintf("%d builds of the owner's are running or waiting; at most %d", n, MaxPerOwner+MaxQueuedPerOwner)}
	}
	b.queued[owner]++
	return &Place{b: b, owner: owner}, nil
}

// Wait waits for a slot (the owner's and the host's), saying so in the
// build's log when it has to.
func (q *Place) Wait(ctx context.Context, log *Log) error {
	b := q.b
	said := false
	for {
		b.mu.Lock()
		if b.running[q.owner] < MaxPerOwner && b.total < MaxRunning {
			if b.queued[q.owner]--; b.queued[q.owner] == 0 {
				delete(b.queued, q.owner)
			}
			b.running[q.owner]++
			b.total++
			b.mu.Unlock()
			q.mu.Lock()
			q.running = true
			q.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		if !said {
			log.Printf("waiting for a build slot (at most %d builds of an owner's and %d of the host's run at once)\n", MaxPerOwner, MaxRunning)
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited for a build slot: %w", ctx.Err())
		case <-freed:
		}
	}
}

// Cancel gives the place up: the slot when it holds one, its wait
// otherwise. Once.
func (q *Place) Cancel() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return
	}
	q.done = true
	b := q.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if q.running {
		b.total--
		if b.running[q.owner]--; b.running[q.owner] == 0 {
			delete(b.running, q.owner)
		}
		close(b.freed)
		b.freed = make(chan struct{})
		return
	}
	if b.queued[q.owner]--; b.queued[q.owner] == 0 {
		delete(b.queued, q.owner)
	}
}

// TruncatedNote ends a build's output that reached MaxLogBytes.
const TruncatedNote = "\n[build output truncated: it passed 1 MiB]\n"

// Log is one build's output: appended to until finish.
type Log struct {
	mu        sync.Mutex
	buf       []byte
	truncated bool
	done      bool
	changed   chan struct{} // closed and replaced on every change
	seq       uint64        // its place among the logs opened
}

// MaxKeptLogs bounds the finished builds' logs kept (each at most
// MaxLogBytes): past it, a new build drops the oldest finished ones
// (their templates still say how they ended).
const MaxKeptLogs = 64

// Open starts the log of build id (replacing one of the same id), first
// dropping the oldest finished logs past MaxKeptLogs.
func (b *Builds) Open(id string) *Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.logs == nil {
		b.logs = map[string]*Log{}
	}
	b.opened++
	for len(b.logs) >= MaxKeptLogs {
		oldest, seq := "", uint64(0)
		for k, l := range b.logs {
			if l.Finished() && (oldest == "" || l.seq < seq) {
				oldest, seq = k, l.seq
			}
		}
		if oldest == "" {
			break // all running or waiting: bounded by the build slots
		}
		delete(b.logs, oldest)
	}
	l := &Log{changed: make(chan struct{}), seq: b.opened}
	b.logs[id] = l
	return l
}

// Finished reports whether Finish was called.
func (l *Log) Finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Drop forgets build id's log.
func (b *Builds) Drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.logs, id)
}

// Get is build id's log; nil when there is none (never built here, or
// dropped).
func (b *Builds) Get(id string) *Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logs[id]
}

// Write appends p, cut at MaxLogBytes (then TruncatedNote ends the log
// and nothing more is kept).
func (l *Log) Write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.truncated {
		return
	}
	if room := MaxLogBytes - len(TruncatedNote) - len(l.buf); room < len(p) {
		p, l.truncated = append(p[:room:room], TruncatedNote...), true
	}
	l.buf = append(l.buf, p...)
	close(l.changed)
	l.changed = make(chan struct{})
}

// Printf appends a formatted line.
func (l *Log) Printf(format string, args ...any) { l.Write(fmt.Appendf(nil, format, args...)) }

// Finish marks the build ended; followers see it.
func (l *Log) Finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// Since returns the output from offset on, whether the build ended, and a
// channel closed at the next change.
func (l *Log) Since(offset int) ([]byte, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.buf[min(offset, len(l.buf)):]), l.done, l.changed
}
