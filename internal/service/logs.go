package service

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/store"
)

// A sandbox's logs are the output of the processes the daemon runs in it:
// every exec (run to completion, or streamed over the exec WebSocket) and
// the start command of the template it was made from. The daemon keeps
// them itself, line by line, in one bounded ring per sandbox (a logbook),
// stamped when the line reaches the daemon (the agent does not stamp its
// events). Processes the daemon does not see (an E2B SDK talking envd's
// protocol to the agent through the proxy, sessions) are not in them.
//
// Bounds: a logbook holds at most logBytes of text and logLines lines,
// dropping its oldest lines first; a line longer than maxLogLine is cut
// into pieces; at most maxPartials unfinished lines wait for their
// newline (processes whose stream broke before their end leave theirs:
// beyond the cap they are all ended as they are); at most maxLogbooks
// sandboxes have one (the one written to least recently is forgotten
// first), so the logs hold at most ~256 × 2 MiB (text and line headers)
// however many sandboxes print. A follower reads from the ring with a cursor and
// writes outside its lock, so a slow reader holds nothing but its place:
// when it falls behind the ring, it skips to the oldest line still kept.
// The logbook goes with the sandbox's destroy; a daemon restart empties
// them all.
const (
	logBytes    = 1 << 20
	logLines    = 10000
	maxLogLine  = 8 << 10
	maxLogbooks = 256
	maxPartials = 64
	// logFollowPoll is how often a follow checks that the sandbox still
	// runs while no line arrives.
	logFollowPoll = time.Second
)

// LogLine is one line of a sandbox's logs.
type LogLine struct {
	Time time.Time
	// Source names the process: "exec-3" (the third exec of the
	// sandbox since the daemon started), "pid-42" (a streamed process)
	// or "start" (the template's start command).
	Source string
	// Stream is "stdout", "stderr" or "pty".
	Stream string
	// Text is the line without its newline.
	Text string
}

// LogQuery selects lines of a sandbox's logs.
type LogQuery struct {
	// Since drops lines stamped before it (zero: all).
	Since time.Time
	// Tail keeps only the last Tail lines of what is kept (0: all).
	Tail int
	// Follow keeps the call open for new lines until the sandbox stops
	// or ctx ends.
	Follow bool
}

// logbook is one sandbox's ring of lines.
type logbook struct {
	mu sync.Mutex
	// buf holds n lines from start, oldest first, wrapping around; it
	// grows up to logLines.
	buf      []LogLine
	start, n int
	bytes    int
	next     uint64        // seq of the next line
	wake     chan struct{} // closed and replaced when lines were added
	partial  map[string][]byte
	execs    int
	touched  time.Time
}

// at is the i-th line kept, oldest first.
func (lb *logbook) at(i int) *LogLine { return &lb.buf[(lb.start+i)%len(lb.buf)] }

// logbooks maps sandbox ids to their logbooks.
type logbooks struct {
	mu sync.Mutex
	m  map[string]*logbook
}

// get returns id's logbook, making one when create is set.
func (b *logbooks) get(id string, create bool) *logbook {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lb, ok := b.m[id]; ok || !create {
		return lb
	}
	if b.m == nil {
		b.m = map[string]*logbook{}
	}
	if len(b.m) >= maxLogbooks {
		var oldest string
		var at time.Time
		for k, lb := range b.m {
			lb.mu.Lock()
			t := lb.touched
			lb.mu.Unlock()
			if oldest == "" || t.Before(at) {
				oldest, at = k, t
			}
		}
		delete(b.m, oldest)
	}
	lb := &logbook{wake: make(chan struct{}), partial: map[string][]byte{}, touched: time.Now()}
	b.m[id] = lb
	return lb
}

// drop forgets id's logbook (the sandbox is destroyed).
func (b *logbooks) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, id)
}

// nextExec names the next exec of the sandbox.
func (lb *logbook) nextExec() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.execs++
	return fmt.Sprintf("exec-%d", lb.execs)
}

// write appends output of source's stream: whole lines go in, the rest
// waits (at most maxLogLine) for its newline or for flush.
func (lb *logbook) write(source, stream string, data []byte) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	key := source + "\x00" + stream
	buf := append(lb.partial[key], data...)
	now := time.Now()
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 && len(buf) < maxLogLine {
			break
		}
		if i < 0 || i > maxLogLine {
			i = maxLogLine
			lb.appendLocked(LogLine{Time: now, Source: source, Stream: stream, Text: string(buf[:i])})
			buf = buf[i:]
			continue
		}
		lb.appendLocked(LogLine{Time: now, Source: source, Stream: stream, Text: string(buf[:i])})
		buf = buf[i+1:]
	}
	if len(buf) == 0 {
		delete(lb.partial, key)
	} else {
		if _, ok := lb.partial[key]; !ok && len(lb.partial) >= maxPartials {
			lb.endPartialsLocked(now)
		}
		lb.partial[key] = bytes.Clone(buf)
	}
	lb.notifyLocked()
}

// endPartialsLocked ends every unfinished line as it is.
func (lb *logbook) endPartialsLocked(now time.Time) {
	for key, buf := range lb.partial {
		source, stream, _ := strings.Cut(key, "\x00")
		lb.appendLocked(LogLine{Time: now, Source: source, Stream: stream, Text: string(buf)})
		delete(lb.partial, key)
	}
}

// flush ends source's unterminated lines (its process ended).
func (lb *logbook) flush(source string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, stream := range []string{"stdout", "stderr", "pty"} {
		key := source + "\x00" + stream
		if buf := lb.partial[key]; len(buf) > 0 {
			lb.appendLocked(LogLine{Time: time.Now(), Source: source, Stream: stream, Text: string(buf)})
		}
		delete(lb.partial, key)
	}
	lb.notifyLocked()
}

func (lb *logbook) appendLocked(l LogLine) {
	lb.next++
	if lb.n == len(lb.buf) && len(lb.buf) < logLines {
		grown := make([]LogLine, lb.n, min(max(2*lb.n, 64), logLines))
		for i := range lb.n {
			grown[i] = *lb.at(i)
		}
		lb.buf, lb.start = grown[:cap(grown)], 0
	}
	if lb.n == len(lb.buf) {
		lb.dropOldest()
	}
	*lb.at(lb.n) = l
	lb.n++
	lb.bytes += len(l.Text)
	for lb.bytes > logBytes && lb.n > 1 {
		lb.dropOldest()
	}
	lb.touched = l.Time
}

func (lb *logbook) dropOldest() {
	lb.bytes -= len(lb.at(0).Text)
	*lb.at(0) = LogLine{}
	lb.start = (lb.start + 1) % len(lb.buf)
	lb.n--
}

// notifyLocked wakes the followers.
func (lb *logbook) notifyLocked() {
	close(lb.wake)
	lb.wake = make(chan struct{})
}

// from returns copies of the lines with seq >= seq (at most max), the seq
// after them, and the channel closed by the next append.
func (lb *logbook) from(seq uint64, max int) ([]LogLine, uint64, <-chan struct{}) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	first := lb.next - uint64(lb.n) // seq of the oldest line kept
	seq = min(lb.next, seq)
	seq = maxU(seq, first) // fell behind: skip to the oldest kept
	var out []LogLine
	for i := int(seq - first); i < lb.n && len(out) < max; i++ {
		out = append(out, *lb.at(i))
	}
	return out, seq + uint64(len(out)), lb.wake
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// tailStart is the seq where the last n lines stamped at or after since
// begin.
func (lb *logbook) tailStart(since time.Time, n int) uint64 {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	i := lb.n
	for i > 0 && !lb.at(i-1).Time.Before(since) && (n <= 0 || lb.n-i < n) {
		i--
	}
	return lb.next - uint64(lb.n-i)
}

// logTee is what an exec writes its output through.
type logTee struct {
	lb     *logbook
	source string
}

func streamName(s agent.Stream) string {
	switch s {
	case agent.Stderr:
		return "stderr"
	case agent.PTY:
		return "pty"
	}
	return "stdout"
}

func (t logTee) output(o agent.Output) { t.lb.write(t.source, streamName(o.Stream), o.Data) }

// logExec records a finished exec's output.
func (s *Service) logExec(id string, res *ExecResult) {
	lb := s.logs.get(id, true)
	src := lb.nextExec()
	lb.write(src, "stdout", res.Stdout)
	lb.write(src, "stderr", res.Stderr)
	lb.flush(src)
}

// logProcess makes p copy its output to the sandbox's logs as it is read.
func (s *Service) logProcess(id string, p *agent.Process) {
	lb := s.logs.get(id, true)
	t := logTee{lb: lb, source: fmt.Sprintf("pid-%d", p.PID())}
	p.Tee(t.output, func() { lb.flush(t.source) })
}

// followStartCmd copies the template's start command's output into the
// sandbox's logs until it ends or the sandbox is destroyed (which ends
// the stream).
func (s *Service) followStartCmd(_ context.Context, id string, p *agent.Process) {
	lb := s.logs.get(id, true)
	t := logTee{lb: lb, source: "start"}
	p.Tee(t.output, func() { lb.flush(t.source) })
	go func() {
		defer p.Close()
		for {
			if _, err := p.Recv(); err != nil {
				return
			}
			if s.logs.get(id, false) != lb {
				return
			}
		}
	}()
}

// logPage bounds the lines a follower copies out of a logbook at once.
const logPage = 256

// Logs writes a sandbox's logs to emit, oldest first: the lines kept that
// q selects, then, with q.Follow, new lines as they come until the sandbox
// is no longer running or ctx ends. emit's error ends the call (the
// client left). ErrNotFound for a sandbox the caller may not see. A
// stopped sandbox's logs are readable until it is destroyed.
func (s *Service) Logs(ctx context.Context, c Caller, idOrName string, q LogQuery, emit func([]LogLine) error) error {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return err
	}
	if q.Tail < 0 {
		return invalid("tail", "must not be negative")
	}
	lb := s.logs.get(row.ID, q.Follow && row.State == store.StateRunning)
	if lb == nil {
		return nil
	}
	seq := lb.tailStart(q.Since, q.Tail)
	poll := time.NewTicker(logFollowPoll)
	defer poll.Stop()
	for {
		lines, next, wake := lb.from(seq, logPage)
		seq = next
		if len(lines) > 0 {
			if err := emit(lines); err != nil {
				return err
			}
			continue
		}
		if !q.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
			cur, err := s.Store.GetSandbox(ctx, row.ID)
			if err != nil || cur.State != store.StateRunning {
				lines, _, _ := lb.from(seq, logLines)
				if len(lines) > 0 {
					return emit(lines)
				}
				return nil
			}
		}
	}
}
