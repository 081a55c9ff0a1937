package sessions

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// fakeShell is a shell of m for sandboxID with no process behind it:
// tests feed its demuxers.
func fakeShell(m *Manager, sandboxID, id string) *shell {
	m.mu.Lock()
	b := m.boxes[sandboxID]
	if b == nil {
		b = &box{id: sandboxID, shells: map[string]*shell{}, loaded: true}
		m.boxes[sandboxID] = b
	}
	m.mu.Unlock()
	s := &shell{m: m, b: b, id: id, sandboxID: sandboxID, token: "tok", byID: map[string]*command{}}
	b.mu.Lock()
	b.shells[id] = s
	b.mu.Unlock()
	return s
}

// run feeds one command's output through s's stdout demuxer in chunks of
// size n, total bytes of 'x' then the tail, and ends it.
func run(s *shell, cmdID string, total, n int, tail string) *command {
	c := &command{id: cmdID, changed: make(chan struct{})}
	s.mu.Lock()
	s.cmds, s.byID[cmdID] = append(s.cmds, c), c
	s.mu.Unlock()
	d := &demuxer{s: s, open: s.marker()}
	d.feed([]byte("\x1etok:" + cmdID + ":B\x1e"))
	for sent := 0; sent < total; sent += n {
		d.feed([]byte(strings.Repeat("x", min(n, total-sent))))
	}
	d.feed([]byte(tail + "\x1etok:" + cmdID + ":E0\x1e"))
	return c
}

// TestShellLogs_Bounded: however much output commands print, each keeps
// its newest CommandBytes, a sandbox's sessions at most SandboxBytes and
// the daemon's at most TotalBytes — the heaviest sandbox paying for the
// daemon's limit — and logs mark what was dropped.
func TestShellLogs_Bounded(t *testing.T) {
	lim := LogLimits{CommandBytes: 4 << 10, SandboxBytes: 10 << 10, TotalBytes: 16 << 10}
	m := New(Options{Limits: lim})
	defer m.cancel() // not Close: the fake shells have no stream

	heavy := fakeShell(m, "sb-heavy", "s")
	var last *command
	for i := range 20 {
		last = run(heavy, fmt.Sprintf("c%d", i), 100<<10, 512, "END")
		if used, _ := m.logs.used("sb-heavy"); used > lim.SandboxBytes {
			t.Fatalf("after command %d the sandbox keeps %d bytes, limit %d", i, used, lim.SandboxBytes)
		}
	}
	logs := heavy.logs(last)
	if !strings.HasSuffix(logs.Stdout, "xEND") || !strings.HasPrefix(logs.Stdout, "[sandboxd: ") {
		t.Errorf("last command's stdout: %.60q … %q, want the dropped marker then the newest bytes", logs.Stdout, logs.Stdout[max(0, len(logs.Stdout)-8):])
	}
	if len(logs.Stdout) > lim.CommandBytes+100 {
		t.Errorf("a command keeps %d bytes, limit %d", len(logs.Stdout), lim.CommandBytes)
	}

	// Two more sandboxes: the daemon's limit takes from the heaviest.
	for _, sb := range []string{"sb-a", "sb-b"} {
		run(fakeShell(m, sb, "s"), "c", 3<<10, 1<<10, "")
	}
	heavyUsed, total := m.logs.used("sb-heavy")
	aUsed, _ := m.logs.used("sb-a")
	if total > lim.TotalBytes || aUsed < 3<<10 || heavyUsed > lim.TotalBytes-2*aUsed {
		t.Errorf("daemon keeps %d (limit %d); heavy %d, light %d: want the heavy sandbox to pay", total, lim.TotalBytes, heavyUsed, aUsed)
	}

	// A shell that goes gives its bytes back.
	heavy.b.forget(heavy)
	heavy.released = true
	heavy.mu.Lock()
	for _, c := range heavy.cmds {
		heavy.uncharge(c.log.dropOldest(c.log.cost))
	}
	heavy.mu.Unlock()
	if used, _ := m.logs.used("sb-heavy"); used != 0 {
		t.Errorf("a forgotten shell still counts %d bytes", used)
	}
}

// TestDemuxer_UnclosedMarkerIsOutput: output that opens a marker and never
// closes it is kept as output (bounded), not buffered without end.
func TestDemuxer_UnclosedMarkerIsOutput(t *testing.T) {
	m := New(Options{})
	defer m.cancel()
	s := fakeShell(m, "sb-1", "s")
	c := &command{id: "a", changed: make(chan struct{})}
	s.cmds, s.byID["a"] = []*command{c}, c
	d := &demuxer{s: s, open: s.marker()}
	d.feed([]byte("\x1etok:a:B\x1e\x1etok:"))
	for range 1000 {
		d.feed([]byte(strings.Repeat("y", 1024)))
	}
	if len(d.buf) > 2*maxMarkerLen {
		t.Errorf("the demuxer buffers %d bytes of an unclosed marker", len(d.buf))
	}
	if got := s.logs(c).Stdout; !strings.HasSuffix(got, "yyyy") {
		t.Errorf("stdout ends %q", got[max(0, len(got)-10):])
	}
}

// TestDemuxer_SplitMarkers feeds a stream one byte at a time: markers
// split across chunks, output without a trailing newline, and bytes
// outside any command (dropped).
func TestDemuxer_SplitMarkers(t *testing.T) {
	s := fakeShell(New(Options{}), "sb-1", "s")
	a := &command{id: "a", changed: make(chan struct{})}
	b := &command{id: "b", changed: make(chan struct{})}
	s.byID["a"], s.byID["b"] = a, b
	out := &demuxer{s: s, open: s.marker()}
	errs := &demuxer{s: s, open: s.marker(), stderr: true}
	stream := "stray\x1etok:a:B\x1eone\x1e\x1etok:a:E0\x1ejunk\x1etok:b:B\x1etwo\x1etok:b:E7\x1e"
	for i := range len(stream) {
		out.feed([]byte{stream[i]})
	}
	errs.feed([]byte("\x1etok:a:B\x1e\x1etok:a:E0\x1e\x1etok:b:B\x1eerr\x1etok:b:E7\x1e"))
	if got := s.logs(a); got.Stdout != "one\x1e" || got.Stderr != "" {
		t.Errorf("a: %+v", got)
	}
	if got := s.logs(b); got.Stdout != "two" || got.Stderr != "err" || got.Output != "twoerr" {
		t.Errorf("b: %+v", got)
	}
	if a.exitCode == nil || *a.exitCode != 0 || b.exitCode == nil || *b.exitCode != 7 {
		t.Errorf("exit codes %v %v", a.exitCode, b.exitCode)
	}
}

// A command's log at its bound drops one chunk per chunk it adds, at the
// cost of that chunk: a shell printing a byte at a time never makes each
// byte copy the whole log (it once cost ~0.7 ms and ~0.5 MB a byte).
func TestCmdLog_DropCostsWhatItDrops(t *testing.T) {
	var l cmdLog
	const bound = 1 << 20
	for l.cost < bound {
		l.add(false, []byte{'x'})
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20000 {
		l.add(false, []byte{'x'})
		l.dropOldest(l.cost - bound)
	}
	runtime.ReadMemStats(&after)
	if l.cost > bound {
		t.Fatalf("log costs %d, past %d", l.cost, bound)
	}
	// Each add allocates its byte; append moves the kept chunks now and
	// then. Copying the log on every drop allocated gigabytes here.
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Fatalf("20000 adds at the bound allocated %d MiB", n>>20)
	}
}

// A shell keeps at most maxMarkerText of a command's text, and at most
// maxShellText of texts in all: the oldest commands go first.
func TestShell_CommandTextsAreBounded(t *testing.T) {
	m := New(Options{})
	defer m.cancel()
	s := fakeShell(m, "sb-text", "s")
	big := strings.Repeat("é", 1<<20) // cut inside a rune, too
	s.mu.Lock()
	for i := range 500 {
		s.addLocked(&command{id: fmt.Sprint(i), command: keptText(big), changed: make(chan struct{})})
	}
	total := 0
	for _, c := range s.cmds {
		if len(c.command) > maxMarkerText || !utf8.ValidString(c.command) {
			t.Fatalf("a kept text of %d bytes (valid UTF-8: %v)", len(c.command), utf8.ValidString(c.command))
		}
		total += len(c.command)
	}
	last := s.cmds[len(s.cmds)-1].id
	s.mu.Unlock()
	if total > maxShellText || total != s.text {
		t.Fatalf("texts kept: %d bytes (counted %d), bound %d", total, s.text, maxShellText)
	}
	if last != "499" {
		t.Fatalf("the newest command is %s, want 499", last)
	}
}
