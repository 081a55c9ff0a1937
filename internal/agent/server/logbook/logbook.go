// Package logbook is the agent's log of its sandbox: one bounded ring of
// the output lines of every process the agent runs (package
// server/process writes it), stamped by the agent, each with its source
// and stream, and the daemon's route to read it (GET [Path], see
// [Handler]).
//
// It lives in the agent, PID 1 of the sandbox, so its memory is the
// sandbox's (charged to the sandbox's cgroup, not the daemon's), and it
// outlives a restart of the daemon; a stop of the sandbox ends it with the
// agent.
//
// # Lines
//
// Output is cut into lines at '\n' (the newline is not kept). A line
// longer than [MaxLine] bytes is cut into pieces of MaxLine bytes. Output
// without its newline waits, per source and stream, until its newline
// comes, it reaches MaxLine, or its process ends ([Book.Flush]); at most
// [MaxPartials] such unfinished lines wait: one more ends them all as
// they are (processes whose output broke off mid-line cannot pile them
// up). Bytes are kept as they came; a reader that needs text (JSON)
// replaces invalid UTF-8.
//
// # Bounds
//
// The book holds at most [MaxBytes] of text and [MaxLines] lines, dropping
// its oldest lines first. Every line gets the next sequence number (its
// seq, from 0); a reader holds only a cursor (the seq it wants next) and
// copies lines out under the lock in pages, writing outside it, so a slow
// reader costs the writers nothing: when it has fallen behind the ring, it
// skips to the oldest line still kept.
package logbook

import (
	"bytes"
	"sync"
	"time"
)

// Bounds of a [Book] (the daemon kept the same for each sandbox before the
// agent kept them).
const (
	MaxBytes    = 1 << 20
	MaxLines    = 10000
	MaxLine     = 8 << 10
	MaxPartials = 64
	// MaxSource bounds a source name: longer ones are cut (the agent makes
	// them, "pid-N" or "start").
	MaxSource = 64
)

// Streams of a line.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	PTY    = "pty"
)

// Line is one line of the book.
type Line struct {
	// Seq numbers the lines of one book from 0, in the order they were
	// kept.
	Seq  uint64
	Time time.Time
	// Source names the process: "pid-42", or "start" for the sandbox's
	// start command.
	Source string
	// Stream is Stdout, Stderr or PTY.
	Stream string
	Text   []byte
}

type partialKey struct{ source, stream string }

// Book is the ring of lines. The zero value is not usable: call [New]. It
// is safe for concurrent use.
type Book struct {
	now func() time.Time

	mu sync.Mutex
	// buf holds n lines from start, oldest first, wrapping around; it
	// grows up to MaxLines.
	buf      []Line
	start, n int
	bytes    int
	next     uint64        // seq of the next line
	wake     chan struct{} // closed and replaced when lines were added
	partial  map[partialKey][]byte
}

// New returns an empty book stamped with now (time.Now when nil).
func New(now func() time.Time) *Book {
	if now == nil {
		now = time.Now
	}
	return &Book{now: now, wake: make(chan struct{}), partial: map[partialKey][]byte{}}
}

// at is the i-th line kept, oldest first.
func (b *Book) at(i int) *Line { return &b.buf[(b.start+i)%len(b.buf)] }

// Write adds output of source's stream: whole lines go in, the rest waits
// (at most MaxLine bytes) for its newline, for more, or for Flush.
func (b *Book) Write(source, stream string, data []byte) {
	if len(source) > MaxSource {
		source = source[:MaxSource]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := partialKey{source, stream}
	now := b.now()
	added := false
	rest := data
	if p := b.partial[key]; len(p) > 0 {
		// Complete the waiting line first, without copying all of data.
		i := bytes.IndexByte(rest, '\n')
		need := MaxLine - len(p)
		switch {
		case i >= 0 && i <= need:
			b.appendLocked(Line{Time: now, Source: source, Stream: stream, Text: concat(p, rest[:i])})
			rest = rest[i+1:]
		case len(rest) >= need:
			b.appendLocked(Line{Time: now, Source: source, Stream: stream, Text: concat(p, rest[:need])})
			rest = rest[need:]
		default:
			b.partial[key] = append(p, rest...)
			return
		}
		delete(b.partial, key)
		added = true
	}
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 && len(rest) < MaxLine {
			break
		}
		if i < 0 || i > MaxLine {
			b.appendLocked(Line{Time: now, Source: source, Stream: stream, Text: bytes.Clone(rest[:MaxLine])})
			rest = rest[MaxLine:]
		} else {
			b.appendLocked(Line{Time: now, Source: source, Stream: stream, Text: bytes.Clone(rest[:i])})
			rest = rest[i+1:]
		}
		added = true
	}
	if len(rest) > 0 {
		if len(b.partial) >= MaxPartials {
			b.endPartialsLocked(now)
			added = true
		}
		b.partial[key] = append(make([]byte, 0, min(2*len(rest), MaxLine)), rest...)
	}
	if added {
		b.notifyLocked()
	}
}

func concat(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// endPartialsLocked ends every unfinished line as it is.
func (b *Book) endPartialsLocked(now time.Time) {
	for key, p := range b.partial {
		b.appendLocked(Line{Time: now, Source: key.source, Stream: key.stream, Text: p})
		delete(b.partial, key)
	}
}

// Flush ends source's unfinished lines (its process ended).
func (b *Book) Flush(source string) {
	if len(source) > MaxSource {
		source = source[:MaxSource]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	added := false
	for _, stream := range []string{Stdout, Stderr, PTY} {
		key := partialKey{source, stream}
		if p := b.partial[key]; len(p) > 0 {
			b.appendLocked(Line{Time: b.now(), Source: source, Stream: stream, Text: p})
			added = true
		}
		delete(b.partial, key)
	}
	if added {
		b.notifyLocked()
	}
}

func (b *Book) appendLocked(l Line) {
	l.Seq = b.next
	b.next++
	if b.n == len(b.buf) && len(b.buf) < MaxLines {
		grown := make([]Line, min(max(2*b.n, 64), MaxLines))
		for i := range b.n {
			grown[i] = *b.at(i)
		}
		b.buf, b.start = grown, 0
	}
	if b.n == len(b.buf) {
		b.dropOldest()
	}
	*b.at(b.n) = l
	b.n++
	b.bytes += len(l.Text)
	for b.bytes > MaxBytes && b.n > 1 {
		b.dropOldest()
	}
}

func (b *Book) dropOldest() {
	b.bytes -= len(b.at(0).Text)
	*b.at(0) = Line{}
	b.start = (b.start + 1) % len(b.buf)
	b.n--
}

// notifyLocked wakes the followers.
func (b *Book) notifyLocked() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// Read returns the lines from seq cursor on (at most max; from the oldest
// kept when cursor is older), the cursor after them, and a channel closed
// by the next line added. The lines' Text is shared with the book and
// never changed: do not modify it.
func (b *Book) Read(cursor uint64, max int) ([]Line, uint64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.next - uint64(b.n) // seq of the oldest line kept
	cursor = min(b.next, cursor)
	if cursor < first {
		cursor = first // fell behind: skip to the oldest kept
	}
	var out []Line
	for i := int(cursor - first); i < b.n && len(out) < max; i++ {
		out = append(out, *b.at(i))
	}
	return out, cursor + uint64(len(out)), b.wake
}

// Window is where a read of the last n lines (0: all) stamped at or after
// since begins, and the seq the next line will get (where a read without
// follow ends), both under one lock: lines written meanwhile cannot slip
// in between (tail=n would answer more than n).
func (b *Book) Window(since time.Time, n int) (start, end uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.n
	for i > 0 && !b.at(i-1).Time.Before(since) && (n <= 0 || b.n-i < n) {
		i--
	}
	return b.next - uint64(b.n-i), b.next
}

// Next is the seq the next line will get.
func (b *Book) Next() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next
}
