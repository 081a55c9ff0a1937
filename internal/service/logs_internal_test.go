package service

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func newLogbook() *logbook {
	return (&logbooks{}).get("sb-1", true)
}

func TestLogbook_LinesAndPartials(t *testing.T) {
	lb := newLogbook()
	lb.write("exec-1", "stdout", []byte("a\nb"))
	lb.write("exec-1", "stderr", []byte("e\n"))
	lb.write("exec-1", "stdout", []byte("c\nd"))
	lb.flush("exec-1")
	got, next, _ := lb.from(0, 100)
	var texts []string
	for _, l := range got {
		texts = append(texts, l.Stream+":"+l.Text)
	}
	if g, w := strings.Join(texts, "|"), "stdout:a|stderr:e|stdout:bc|stdout:d"; g != w {
		t.Errorf("lines %q, want %q", g, w)
	}
	if next != 4 {
		t.Errorf("next %d, want 4", next)
	}
	if got, _, _ := lb.from(next, 100); len(got) != 0 {
		t.Errorf("from the end: %v", got)
	}
}

func TestLogbook_LongLineIsCut(t *testing.T) {
	lb := newLogbook()
	lb.write("x", "stdout", []byte(strings.Repeat("z", 2*maxLogLine+5)))
	got, _, _ := lb.from(0, 100)
	if len(got) != 2 || len(got[0].Text) != maxLogLine {
		t.Fatalf("got %d lines; want 2 of %d bytes and a partial", len(got), maxLogLine)
	}
	lb.flush("x")
	if got, _, _ := lb.from(0, 100); len(got) != 3 || len(got[2].Text) != 5 {
		t.Errorf("after flush: %d lines", len(got))
	}
}

// TestLogbook_Bounded writes far more than the bounds and checks that the
// ring keeps the newest lines within them, and that a reader behind the
// ring skips to the oldest line kept.
func TestLogbook_Bounded(t *testing.T) {
	lb := newLogbook()
	for i := range 50000 {
		lb.write("x", "stdout", fmt.Appendf(nil, "line %d\n", i))
	}
	if lb.n != logLines || len(lb.buf) != logLines {
		t.Errorf("kept %d lines in a buffer of %d; want %d", lb.n, len(lb.buf), logLines)
	}
	got, _, _ := lb.from(0, logLines)
	if len(got) != logLines || got[0].Text != "line 40000" || got[len(got)-1].Text != "line 49999" {
		t.Errorf("from 0: %d lines, %q … %q", len(got), got[0].Text, got[len(got)-1].Text)
	}
	big := strings.Repeat("y", 4000) + "\n"
	for range 1000 {
		lb.write("x", "stdout", []byte(big))
	}
	if lb.bytes > logBytes {
		t.Errorf("%d bytes kept, over %d", lb.bytes, logBytes)
	}
	if start := lb.tailStart(time.Time{}, 3); lb.next-start != 3 {
		t.Errorf("tail 3 starts %d before the end", lb.next-start)
	}
	if start := lb.tailStart(time.Now().Add(time.Hour), 0); start != lb.next {
		t.Errorf("since the future: start %d, want the end %d", start, lb.next)
	}
}

// TestLogbook_PartialsBounded: processes that leave unfinished lines
// (their stream broke before their end) hold at most maxPartials of them.
func TestLogbook_PartialsBounded(t *testing.T) {
	lb := newLogbook()
	for i := range 1000 {
		lb.write(fmt.Sprintf("pid-%d", i), "stdout", []byte(strings.Repeat("p", maxLogLine-1)))
	}
	if len(lb.partial) > maxPartials {
		t.Errorf("%d unfinished lines kept; want at most %d", len(lb.partial), maxPartials)
	}
	if lb.bytes > logBytes {
		t.Errorf("%d bytes kept", lb.bytes)
	}
}

func TestLogbooks_Bounded(t *testing.T) {
	var b logbooks
	for i := range maxLogbooks + 10 {
		b.get(fmt.Sprintf("sb-%d", i), true)
	}
	if len(b.m) != maxLogbooks {
		t.Errorf("%d logbooks; want %d", len(b.m), maxLogbooks)
	}
}
