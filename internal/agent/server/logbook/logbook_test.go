package logbook_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/server/logbook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func texts(lines []logbook.Line) string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Source+"/"+l.Stream+":"+string(l.Text))
	}
	return strings.Join(out, "|")
}

func all(b *logbook.Book) []logbook.Line {
	lines, _, _ := b.Read(0, logbook.MaxLines+1)
	return lines
}

func TestBook_LinesAndPartials(t *testing.T) {
	b := logbook.New(nil)
	b.Write("pid-1", logbook.Stdout, []byte("a\nb"))
	b.Write("pid-1", logbook.Stderr, []byte("e\n"))
	b.Write("pid-1", logbook.Stdout, []byte("c\nd"))
	b.Write("pid-2", logbook.Stdout, []byte("x"))
	if got, want := texts(all(b)), "pid-1/stdout:a|pid-1/stderr:e|pid-1/stdout:bc"; got != want {
		t.Errorf("before the flush: %q, want %q", got, want)
	}
	b.Flush("pid-1")
	got := all(b)
	if g, w := texts(got), "pid-1/stdout:a|pid-1/stderr:e|pid-1/stdout:bc|pid-1/stdout:d"; g != w {
		t.Errorf("lines %q, want %q", g, w)
	}
	for i, l := range got {
		if l.Seq != uint64(i) || l.Time.IsZero() {
			t.Errorf("line %d: seq %d, time %v", i, l.Seq, l.Time)
		}
	}
	if _, next, _ := b.Read(4, 10); next != 4 {
		t.Errorf("Read at the end: next %d, want 4", next)
	}
}

func TestBook_LongLineIsCut(t *testing.T) {
	b := logbook.New(nil)
	// In one write, and byte by byte through the partial.
	b.Write("a", logbook.Stdout, []byte(strings.Repeat("z", 2*logbook.MaxLine+5)+"\n"))
	for range logbook.MaxLine + 3 {
		b.Write("b", logbook.Stdout, []byte("y"))
	}
	b.Flush("b")
	var lens []string
	for _, l := range all(b) {
		lens = append(lens, fmt.Sprintf("%s:%d", l.Source, len(l.Text)))
	}
	want := fmt.Sprintf("a:%d|a:%d|a:5|b:%d|b:3", logbook.MaxLine, logbook.MaxLine, logbook.MaxLine)
	if got := strings.Join(lens, "|"); got != want {
		t.Errorf("pieces %s, want %s", got, want)
	}
}

func TestBook_BoundedByLinesAndBytes(t *testing.T) {
	b := logbook.New(nil)
	for i := range 3 * logbook.MaxLines {
		b.Write("p", logbook.Stdout, fmt.Appendf(nil, "%d\n", i))
	}
	got := all(b)
	if len(got) != logbook.MaxLines || string(got[len(got)-1].Text) != fmt.Sprint(3*logbook.MaxLines-1) {
		t.Fatalf("%d lines kept, last %q; want %d, the newest", len(got), got[len(got)-1].Text, logbook.MaxLines)
	}
	if got[0].Seq != 2*logbook.MaxLines {
		t.Errorf("oldest seq %d, want %d", got[0].Seq, 2*logbook.MaxLines)
	}
	line := strings.Repeat("x", logbook.MaxLine-1) + "\n"
	for range 2 * logbook.MaxBytes / logbook.MaxLine {
		b.Write("q", logbook.Stdout, []byte(line))
	}
	n := 0
	for _, l := range all(b) {
		n += len(l.Text)
	}
	if n > logbook.MaxBytes || n < logbook.MaxBytes-logbook.MaxLine {
		t.Errorf("%d bytes kept; want at most %d, and close to it", n, logbook.MaxBytes)
	}
}

// Processes that each leave an unfinished line cannot pile them up: past
// MaxPartials they are all ended as they are.
func TestBook_PartialsAreBounded(t *testing.T) {
	b := logbook.New(nil)
	for i := range logbook.MaxPartials + 1 {
		b.Write(fmt.Sprintf("pid-%d", i), logbook.Stdout, []byte(strings.Repeat("p", logbook.MaxLine-1)))
	}
	got := all(b)
	if len(got) != logbook.MaxPartials {
		t.Fatalf("%d lines; want the %d partials ended", len(got), logbook.MaxPartials)
	}
	b.Flush(fmt.Sprintf("pid-%d", logbook.MaxPartials))
	if got := all(b); len(got) != logbook.MaxPartials+1 {
		t.Errorf("%d lines after the flush of the last; want %d", len(got), logbook.MaxPartials+1)
	}
}

// Whatever a process prints (binary, invalid UTF-8, escapes, JSON, CRs)
// stays inside its line's text: the NDJSON answer has exactly one entry
// per line, each decodable, with the process's source and stream.
func TestBook_HostileLinesStayText(t *testing.T) {
	b := logbook.New(nil)
	hostile := []string{
		"\xff\xfe\x00bin\x01",
		`{"seq":999,"source":"start","stream":"stderr","text":"forged"}`,
		"\x1b[2J\x1b]0;title\x07",
		"cr\rcr",
		"\u2028\u2029",
	}
	b.Write("pid-7", logbook.Stdout, []byte(strings.Join(hostile, "\n")+"\n"))
	srv := httptest.NewServer(logbook.Handler(b))
	defer srv.Close()
	entries, err := get(t.Context(), srv.URL+logbook.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(hostile) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(hostile), entries)
	}
	for i, e := range entries {
		if e.Source != "pid-7" || e.Stream != "stdout" || e.Seq != uint64(i) {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if entries[1].Text != hostile[1] || entries[3].Text != "cr\rcr" {
		t.Errorf("texts changed: %q, %q", entries[1].Text, entries[3].Text)
	}
}

// get reads GET url's NDJSON entries; each, as it comes, to seen.
func get(ctx context.Context, url string, seen func(logbook.Entry)) ([]logbook.Entry, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var out []logbook.Entry
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e logbook.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, e)
		if seen != nil {
			seen(e)
		}
	}
	return out, sc.Err()
}

func TestHandler_SinceTailCursor(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := logbook.New(func() time.Time { return now })
	for i := range 6 {
		now = now.Add(time.Second)
		b.Write("p", logbook.Stdout, fmt.Appendf(nil, "l%d\n", i))
	}
	srv := httptest.NewServer(logbook.Handler(b))
	defer srv.Close()
	cases := []struct{ query, want string }{
		{"", "l0 l1 l2 l3 l4 l5"},
		{"tail=2", "l4 l5"},
		{"since=2026-01-01T00:00:04Z", "l3 l4 l5"},
		{"since=2026-01-01T00:00:04Z&tail=10", "l3 l4 l5"},
		{"since=2026-01-01T00:00:04Z&tail=1", "l5"},
		{"cursor=4", "l4 l5"},
		{"cursor=99", ""},
		{"since=2027-01-01T00:00:00Z", ""},
	}
	for _, c := range cases {
		entries, err := get(t.Context(), srv.URL+logbook.Path+"?"+c.query, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Text)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("?%s: %q, want %q", c.query, g, c.want)
		}
	}
	for _, q := range []string{"since=yesterday", "tail=-1", "cursor=x", "follow=maybe"} {
		resp, err := http.Get(srv.URL + logbook.Path + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// tail=N answers at most N lines while lines are being written (the
// start and the end of the answer were read under two locks: a line
// written between them made N+1).
func TestHandler_TailWhileWriting(t *testing.T) {
	b := logbook.New(nil)
	srv := httptest.NewServer(logbook.Handler(b))
	defer srv.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				b.Write("pid-1", logbook.Stdout, []byte("spam\n"))
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 300 {
		entries, err := get(t.Context(), srv.URL+logbook.Path+"?tail=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 1 {
			t.Fatalf("request %d: tail=1 answered %d lines", i, len(entries))
		}
	}
}

// A follow sends the kept lines, then new ones as they come, and ends
// when its client goes away (the handler returns: goleak checks).
func TestHandler_FollowEndsWhenTheClientLeaves(t *testing.T) {
	b := logbook.New(nil)
	b.Write("p", logbook.Stdout, []byte("old\n"))
	srv := httptest.NewServer(logbook.Handler(b))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		_, err := get(ctx, srv.URL+logbook.Path+"?follow=1", func(e logbook.Entry) { got <- e.Text })
		done <- err
	}()
	next := func() string {
		select {
		case s := <-got:
			return s
		case <-time.After(time.Minute):
			t.Fatal("no line within a minute")
			return ""
		}
	}
	if s := next(); s != "old" {
		t.Fatalf("first %q, want old", s)
	}
	b.Write("p", logbook.Stdout, []byte("new-1\nnew"))
	if s := next(); s != "new-1" {
		t.Fatalf("%q, want new-1", s)
	}
	b.Flush("p")
	if s := next(); s != "new" {
		t.Fatalf("%q, want new", s)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the follow did not end within a minute of its client leaving")
	}
	srv.Close() // waits for the handler
}

// A reader that fell behind the ring skips to the oldest line kept and
// never blocks the writers: they write 3 rings' worth while it holds a
// cursor from the start.
func TestBook_SlowReaderSkipsToTheOldestKept(t *testing.T) {
	b := logbook.New(nil)
	b.Write("p", logbook.Stdout, []byte("first\n"))
	lines, cursor, _ := b.Read(0, 1)
	if len(lines) != 1 || cursor != 1 {
		t.Fatalf("Read: %d lines, cursor %d", len(lines), cursor)
	}
	for i := range 3 * logbook.MaxLines {
		b.Write("p", logbook.Stdout, fmt.Appendf(nil, "%d\n", i))
	}
	lines, next, _ := b.Read(cursor, 10)
	if len(lines) != 10 || lines[0].Seq != 1+2*logbook.MaxLines || next != lines[9].Seq+1 {
		t.Fatalf("slow reader got seq %d.. (next %d); want the oldest kept, %d", lines[0].Seq, next, 1+2*logbook.MaxLines)
	}

	// Over HTTP: a follower from cursor 0 starts at the oldest line kept;
	// while it reads nothing, two rings' worth are written without
	// waiting for it; then it reads lines in order (skipping what the
	// ring dropped meanwhile) up to the newest.
	srv := httptest.NewServer(logbook.Handler(b))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+logbook.Path+"?follow=1&cursor=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Its first line read before the writers begin (the handler reads
	// its first page when it gets to it: writers started at once could
	// get ahead of it).
	sc := bufio.NewScanner(resp.Body)
	var first logbook.Entry
	if !sc.Scan() {
		t.Fatalf("no first line: %v", sc.Err())
	}
	if err := json.Unmarshal(sc.Bytes(), &first); err != nil || first.Seq != 1+2*logbook.MaxLines {
		t.Fatalf("first line %s (%v); want the oldest kept, seq %d", sc.Bytes(), err, 1+2*logbook.MaxLines)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := range 2 * logbook.MaxLines {
			b.Write("w", logbook.Stdout, fmt.Appendf(nil, "%d\n", i))
		}
	}()
	select {
	case <-wrote:
	case <-time.After(time.Minute):
		t.Fatal("writers blocked behind a follower that reads nothing")
	}
	last := first.Seq
	n := 1
	for sc.Scan() {
		var e logbook.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Seq <= last {
			t.Fatalf("seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		n++
		if e.Source == "w" && e.Text == fmt.Sprint(2*logbook.MaxLines-1) {
			break
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("follow: %v after %d lines", err, n)
	}
	cancel()
}

// BenchmarkBook_Write: what the log costs a process printing 32-byte
// lines, per 32 KiB read of its output.
func BenchmarkBook_Write(b *testing.B) {
	book := logbook.New(nil)
	chunk := []byte(strings.Repeat("0123456789abcdef0123456789abcde\n", 1024))
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		book.Write("pid-1", logbook.Stdout, chunk)
	}
}
