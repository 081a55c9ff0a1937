package daytona

import (
	"fmt"
	"strings"
	"testing"
)

// fakeSession is a session of f for sandboxID with no shell behind it:
// tests feed its demuxers.
func fakeSession(f *Facade, sandboxID, id string) *session {
	s := &session{id: id, sandboxID: sandboxID, budget: f.logs, token: "tok", byID: map[string]*command{}}
	s.enforce = func() { f.enforceLogLimits(sandboxID) }
	f.mu.Lock()
	if f.sessions[sandboxID] == nil {
		f.sessions[sandboxID] = map[string]*session{}
	}
	f.sessions[sandboxID][id] = s
	f.mu.Unlock()
	return s
}

// run feeds one command's output through s's stdout demuxer in chunks of
// size n, total bytes of 'x' then the tail, and ends it.
func run(s *session, cmdID string, total, n int, tail string) *command {
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

// TestSessionLogs_Bounded: however much output commands print, each keeps
// its newest CommandBytes, a sandbox's sessions at most SandboxBytes and
// the daemon's at most TotalBytes — the heaviest sandbox paying for the
// daemon's limit — and logs mark what was dropped.
func TestSessionLogs_Bounded(t *testing.T) {
	lim := SessionLogLimits{CommandBytes: 4 << 10, SandboxBytes: 10 << 10, TotalBytes: 16 << 10}
	f := New(Options{SessionLogs: lim})
	defer f.cancel() // not Close: the fake sessions have no shell to kill

	heavy := fakeSession(f, "sb-heavy", "s")
	var last *command
	for i := range 20 {
		last = run(heavy, fmt.Sprintf("c%d", i), 100<<10, 512, "END")
		if used, _ := f.logs.used("sb-heavy"); used > lim.SandboxBytes {
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
		run(fakeSession(f, sb, "s"), "c", 3<<10, 1<<10, "")
	}
	heavyUsed, total := f.logs.used("sb-heavy")
	aUsed, _ := f.logs.used("sb-a")
	if total > lim.TotalBytes || aUsed < 3<<10 || heavyUsed > lim.TotalBytes-2*aUsed {
		t.Errorf("daemon keeps %d (limit %d); heavy %d, light %d: want the heavy sandbox to pay", total, lim.TotalBytes, heavyUsed, aUsed)
	}

	// A session that goes gives its bytes back.
	f.forgetSession("sb-heavy", heavy)
	if used, _ := f.logs.used("sb-heavy"); used != 0 {
		t.Errorf("a forgotten session still counts %d bytes", used)
	}
}

// TestDemuxer_UnclosedMarkerIsOutput: output that opens a marker and never
// closes it is kept as output (bounded), not buffered without end.
func TestDemuxer_UnclosedMarkerIsOutput(t *testing.T) {
	f := New(Options{})
	defer f.cancel() // not Close: the fake sessions have no shell to kill
	s := fakeSession(f, "sb-1", "s")
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
