package mcp

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// capture keeps the first and the last half of limit bytes of a stream,
// and counts what it drops between them.
type capture struct {
	limit   int
	head    []byte
	tail    []byte // a window of the last limit/2 bytes past the head
	total   int64
	dropped int64
}

func newCapture(limit int) *capture { return &capture{limit: limit} }

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	half := c.limit / 2
	if room := half - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - (c.limit - half); over > 0 {
		c.dropped += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return n, nil
}

// String is the stream as text: whole when it fit, else its head, a note
// of how many bytes were left out, and its tail. Invalid UTF-8 (binary
// output, or a character cut at the edge) reads as U+FFFD.
func (c *capture) String() string {
	if c.dropped == 0 {
		return strings.ToValidUTF8(string(c.head)+string(c.tail), "\uFFFD")
	}
	return strings.ToValidUTF8(string(c.head), "\uFFFD") +
		fmt.Sprintf("\n[… %d bytes of output left out: only the first and last %d bytes are returned …]\n", c.dropped, c.limit/2) +
		strings.ToValidUTF8(string(c.tail), "\uFFFD")
}

// Truncated reports whether bytes were left out.
func (c *capture) Truncated() bool { return c.dropped > 0 }

// streamer forwards a process's output as it arrives to send, up to
// limit bytes in all; past it, send is told once that the rest is not
// streamed (the result still carries the capture). A character cut
// between two chunks is held back until it is whole.
type streamer struct {
	send    func(text string) error // the stream's prefix already added
	limit   int64
	sent    *int64 // shared by stdout and stderr
	pending []byte
	stopped bool
}

func (s *streamer) Write(p []byte) (int, error) {
	n := len(p)
	if s.stopped {
		return n, nil
	}
	buf := append(s.pending, p...)
	cut := validPrefix(buf)
	s.pending = append([]byte(nil), buf[cut:]...)
	if cut == 0 {
		return n, nil
	}
	text := buf[:cut]
	if *s.sent+int64(len(text)) > s.limit {
		s.stopped = true
		_ = s.send(fmt.Sprintf("[streamed output stops here (%d bytes); the result carries the rest, bounded]", s.limit))
		return n, nil
	}
	*s.sent += int64(len(text))
	// A client that went away is the tool context's to notice; the
	// process's output is still captured for the result.
	_ = s.send(strings.ToValidUTF8(string(text), "\uFFFD"))
	return n, nil
}

// validPrefix returns the length of b without a trailing incomplete UTF-8
// sequence (at most 3 bytes held back; anything else invalid passes).
func validPrefix(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		r := b[len(b)-i]
		if r < 0x80 {
			return len(b) // ASCII: nothing pending
		}
		if utf8.RuneStart(r) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return len(b) - i
			}
			return len(b)
		}
	}
	return len(b)
}
