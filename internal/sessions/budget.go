package sessions

import (
	"fmt"
	"slices"
	"sync"
)

// LogLimits bound the output that shell commands keep in the daemon's
// memory, for their logs: each command keeps its last CommandBytes, all
// the sessions of one sandbox at most SandboxBytes, and all the sessions
// of the daemon at most TotalBytes. Past a limit the oldest output goes
// first — of the sandbox's own sessions, or, past the daemon's, of the
// sandbox holding the most — and logs show a marker where it was.
type LogLimits struct {
	CommandBytes int
	SandboxBytes int
	TotalBytes   int
}

// DefaultLogLimits keep a command's recent output (what a caller reading
// its logs wants) without letting any tenant, or all of them, hold much of
// the daemon's memory.
var DefaultLogLimits = LogLimits{
	CommandBytes: 1 << 20,
	SandboxBytes: 8 << 20,
	TotalBytes:   128 << 20,
}

func (l LogLimits) orDefaults() LogLimits {
	d := DefaultLogLimits
	if l.CommandBytes > 0 {
		d.CommandBytes = l.CommandBytes
	}
	if l.SandboxBytes > 0 {
		d.SandboxBytes = l.SandboxBytes
	}
	if l.TotalBytes > 0 {
		d.TotalBytes = l.TotalBytes
	}
	return d
}

// chunkOverhead is what one kept chunk costs beyond its bytes (its slice
// header and place in the list), charged so that a command printing one
// byte at a time cannot keep a million chunks under a byte budget.
const chunkOverhead = 64

// Chunk is one piece of a command's output.
type Chunk struct {
	Stderr bool
	Data   []byte
}

func (c Chunk) cost() int { return len(c.Data) + chunkOverhead }

// cmdLog is the output one command keeps: the newest chunks, in arrival
// order. Kept chunks are never changed in place: a follower may be
// sending them without the lock.
type cmdLog struct {
	chunks []Chunk
	// first is the number of chunks dropped before chunks[0]: a follower
	// counts chunks from the command's start.
	first   int
	cost    int      // the sum of the chunks' costs
	dropped [2]int64 // bytes dropped, per stream (stdout, stderr)
}

// add appends b (copied).
func (l *cmdLog) add(stderr bool, b []byte) int {
	c := Chunk{Stderr: stderr, Data: slices.Clone(b)}
	l.chunks = append(l.chunks, c)
	l.cost += c.cost()
	return c.cost()
}

// dropOldest drops whole chunks from the front until at least need is
// freed or nothing is left, and returns what it freed.
func (l *cmdLog) dropOldest(need int) int {
	freed, n := 0, 0
	for n < len(l.chunks) && freed < need {
		c := l.chunks[n]
		freed += c.cost()
		l.dropped[boolIndex(c.Stderr)] += int64(len(c.Data))
		n++
	}
	if n > 0 {
		// Followers copy what they send (Follow), so the dropped slots
		// are cleared in place and the array re-sliced: a drop costs what
		// it drops, never a copy of what is kept (a shell printing a byte
		// at a time drops one chunk per chunk it adds). append moves the
		// kept ones to a fresh array once the front's slots are used up.
		clear(l.chunks[:n])
		l.chunks = l.chunks[n:]
		l.first += n
		l.cost -= freed
	}
	return freed
}

// droppedMarker is what logs show in place of dropped output.
func droppedMarker(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("[sandboxd: %d bytes of earlier output dropped]\n", n)
}

// logBudget counts what every session of the daemon keeps, per sandbox
// and in total. Lock order: a shell's mu, then the budget's.
type logBudget struct {
	limits LogLimits

	mu        sync.Mutex
	total     int
	bySandbox map[string]int
}

func newLogBudget(l LogLimits) *logBudget {
	return &logBudget{limits: l.orDefaults(), bySandbox: map[string]int{}}
}

// charge adds delta (negative: frees) to sandbox's count.
func (b *logBudget) charge(sandbox string, delta int) {
	if delta == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += delta
	if n := b.bySandbox[sandbox] + delta; n > 0 {
		b.bySandbox[sandbox] = n
	} else {
		delete(b.bySandbox, sandbox)
	}
}

// excess returns the sandbox whose sessions must drop output and how
// much: sandbox itself when it is over its own limit, else, when the
// daemon is over, the sandbox that holds the most. need <= 0: none.
func (b *logBudget) excess(sandbox string) (victim string, need int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if over := b.bySandbox[sandbox] - b.limits.SandboxBytes; over > 0 {
		return sandbox, over
	}
	over := b.total - b.limits.TotalBytes
	if over <= 0 {
		return "", 0
	}
	for id, n := range b.bySandbox {
		if n > b.bySandbox[victim] {
			victim = id
		}
	}
	return victim, over
}

// used returns what the sessions of sandbox keep, and the daemon's total.
func (b *logBudget) used(sandbox string) (int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bySandbox[sandbox], b.total
}

// enforce drops the oldest output until sandboxID and the daemon are
// within their limits. It takes no shell lock while holding another:
// each eviction locks one shell.
func (m *Manager) enforce(sandboxID string) {
	for {
		victim, need := m.logs.excess(sandboxID)
		if need <= 0 {
			return
		}
		s := m.heaviestShell(victim)
		if s == nil || s.evict(need) == 0 {
			return // nothing left to drop: the counts catch up as shells go
		}
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
