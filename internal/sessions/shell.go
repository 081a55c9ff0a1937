package sessions

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Limits of shell sessions.
const (
	// MaxCommandsPerShell: older commands are forgotten.
	MaxCommandsPerShell = 1000
	// ShellKeepOutput is what a shell's agent process keeps of its recent
	// output, for a daemon that reattaches (the agent caps it at 4 MiB).
	ShellKeepOutput = 2 << 20
	// maxMarkerText bounds the command text a begin marker carries (the
	// rebuilt view of a longer command shows its first maxMarkerText
	// bytes).
	maxMarkerText = 3 << 10
	// maxMarkerLen bounds a marker's text after its opening bytes (a
	// command id, a kind, an exit code or the command's text in base64):
	// output that opens a marker and never closes it is output, not a
	// reason to buffer without end.
	maxMarkerLen = 64 + (maxMarkerText+2)/3*4
	// maxShellText bounds the command texts one shell keeps (each cut to
	// maxMarkerText): past it the oldest commands are forgotten, so that
	// texts, which no log budget counts, stay within 64 × 256 KiB a
	// sandbox.
	maxShellText = 256 << 10
)

// shellTagPrefix starts the agent tag of a shell session:
// sandboxd.session/<id>/<token>.
const shellTagPrefix = "sandboxd.session/"

// IDPattern bounds session ids: they are part of an agent process tag.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

var (
	tokenPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)
	cmdIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

func shellTag(id, token string) string { return shellTagPrefix + id + "/" + token }

// parseShellTag reads a tag the agent reported, which is hostile input.
func parseShellTag(tag string) (id, token string, ok bool) {
	rest, ok := strings.CutPrefix(tag, shellTagPrefix)
	if !ok {
		return "", "", false
	}
	id, token, ok = strings.Cut(rest, "/")
	if !ok || !IDPattern.MatchString(id) || !tokenPattern.MatchString(token) {
		return "", "", false
	}
	return id, token, true
}

// ShellInfo is a shell session and its commands, oldest first.
type ShellInfo struct {
	ID       string
	Commands []CommandInfo
}

// CommandInfo is one command of a shell; ExitCode is nil while it runs.
type CommandInfo struct {
	ID       string
	Command  string
	ExitCode *int
}

// Logs is what a command kept, each stream behind a marker of what it
// dropped; Output is both streams in arrival order.
type Logs struct {
	Output, Stdout, Stderr string
}

// shell is one long-lived bash, started through the agent with stdin
// open, that runs a session's commands one after another, so shell state
// (cd, export, functions) carries over. See the package documentation
// for the framing.
type shell struct {
	m         *Manager
	b         *box
	id        string
	sandboxID string
	proc      *agent.Process
	cancel    context.CancelFunc // ends proc's stream
	token     string             // the random part of this session's markers

	writeMu sync.Mutex // orders command texts on the shell's stdin

	mu       sync.Mutex
	text     int // the bytes of the commands' texts
	cmds     []*command
	byID     map[string]*command
	released bool // the session is gone from the cache: output is not kept
	ended    bool
	endCode  int
	current  [2]*command // per stream: the command whose output is flowing
	stopOnce sync.Once

	// kept is the cost of all the commands' logs (written under mu, read
	// without it to choose whom to evict).
	kept atomic.Int64

	// settled is closed once the stream ended; a reattached shell's view
	// is also whole once its proc's Replayed is (see waitSettled).
	settled    chan struct{}
	settleOnce sync.Once
}

// replayWait bounds how long a load waits for the shells' replays.
const replayWait = 5 * time.Second

// command is one command of a shell and what it printed.
type command struct {
	id      string
	command string

	// Guarded by the shell's mu.
	exitCode *int
	ends     int           // end markers seen (one per stream; done at 2)
	log      cmdLog        // the newest output, in arrival order
	changed  chan struct{} // closed (and replaced) on every change
}

func (m *Manager) newShell(b *box, id, token string, proc *agent.Process, cancel context.CancelFunc) *shell {
	return &shell{m: m, b: b, id: id, sandboxID: b.id, proc: proc, cancel: cancel, token: token, byID: map[string]*command{}, settled: make(chan struct{})}
}

func (s *shell) markSettled() { s.settleOnce.Do(func() { close(s.settled) }) }

// waitSettled waits until s read its replay, or ctx is done.
func (s *shell) waitSettled(ctx context.Context) {
	select {
	case <-s.settled:
	// Recv marks the replay's end from read's goroutine, in its next call
	// after the last replayed output was fed: the view is whole.
	case <-s.proc.Replayed():
	case <-ctx.Done():
	}
}

// CreateShell starts a shell session named id in t's sandbox. An id in
// use is Exists.
func (m *Manager) CreateShell(ctx context.Context, t Target, id string) error {
	if !IDPattern.MatchString(id) {
		return errorf(Invalid, "a session id must be 1-128 letters, digits, '.', '_' or '-'")
	}
	b, ac, err := m.open(ctx, t)
	if err != nil {
		return err
	}
	// Reserve the id first, so concurrent creates start one shell.
	b.mu.Lock()
	if b.dropped {
		b.mu.Unlock()
		return errorf(Ended, "sandbox %s stopped while session %s started", t.SandboxID, id)
	}
	if _, dup := b.shells[id]; dup {
		b.mu.Unlock()
		return errorf(Exists, "session %s already exists", id)
	}
	if len(b.shells) >= MaxShellsPerSandbox {
		b.mu.Unlock()
		return errorf(TooMany, "at most %d sessions per sandbox", MaxShellsPerSandbox)
	}
	b.shells[id] = nil
	b.mu.Unlock()

	var tok [8]byte
	_, _ = rand.Read(tok[:]) // never fails
	token := hex.EncodeToString(tok[:])
	sctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	proc, stop, err := m.stream(sctx, func(s context.Context) (*agent.Process, error) {
		return ac.StartProcess(s, agent.StartRequest{
			Cmd: []string{"/bin/bash"}, User: t.User, Cwd: t.Cwd,
			Tag: shellTag(id, token), Stdin: true, KeepOutput: ShellKeepOutput,
		})
	})
	if err != nil {
		b.unreserve(id)
		return agentError(err)
	}
	s := m.newShell(b, id, token, proc, stop)
	if !b.store(id, s) { // the sandbox stopped or was deleted meanwhile
		s.kill()
		return errorf(Ended, "sandbox %s stopped while session %s started", t.SandboxID, id)
	}
	go s.read()
	return nil
}

// lookup returns a cached shell, or NotFound.
func (m *Manager) lookup(ctx context.Context, t Target, id string) (*shell, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	s := b.shells[id]
	b.mu.Unlock()
	if s == nil {
		return nil, errorf(NotFound, "session %s not found", id)
	}
	return s, nil
}

func (m *Manager) lookupCommand(ctx context.Context, t Target, sid, cid string) (*shell, *command, error) {
	s, err := m.lookup(ctx, t, sid)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	c := s.byID[cid]
	s.mu.Unlock()
	if c == nil {
		return nil, nil, errorf(NotFound, "command %s not found in session %s", cid, sid)
	}
	return s, c, nil
}

// Shells lists t's sandbox's shell sessions.
func (m *Manager) Shells(ctx context.Context, t Target) ([]ShellInfo, error) {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return nil, err
	}
	all := b.list()
	out := make([]ShellInfo, 0, len(all))
	for _, s := range all {
		out = append(out, s.info())
	}
	return out, nil
}

// Shell is one shell session.
func (m *Manager) Shell(ctx context.Context, t Target, id string) (ShellInfo, error) {
	s, err := m.lookup(ctx, t, id)
	if err != nil {
		return ShellInfo{}, err
	}
	return s.info(), nil
}

// DeleteShell kills a shell session's process group and forgets it.
func (m *Manager) DeleteShell(ctx context.Context, t Target, id string) error {
	b, _, err := m.open(ctx, t)
	if err != nil {
		return err
	}
	b.mu.Lock()
	s := b.shells[id]
	if s != nil {
		delete(b.shells, id)
	}
	b.mu.Unlock()
	if s == nil {
		return errorf(NotFound, "session %s not found", id)
	}
	s.kill()
	return nil
}

// Exec writes a command to a shell session, after those before it, and
// returns its id at once.
func (m *Manager) Exec(ctx context.Context, t Target, sid, text string) (string, error) {
	if text == "" {
		return "", errorf(Invalid, "command is required")
	}
	s, err := m.lookup(ctx, t, sid)
	if err != nil {
		return "", err
	}
	c, err := s.exec(ctx, text)
	if err != nil {
		return "", err
	}
	return c.id, nil
}

// Command is one command of a shell session.
func (m *Manager) Command(ctx context.Context, t Target, sid, cid string) (CommandInfo, error) {
	s, c, err := m.lookupCommand(ctx, t, sid, cid)
	if err != nil {
		return CommandInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return CommandInfo{ID: c.id, Command: c.command, ExitCode: c.exitCode}, nil
}

// Wait waits until a command has ended (or ctx is done) and returns its
// exit code and logs.
func (m *Manager) Wait(ctx context.Context, t Target, sid, cid string) (int, Logs, error) {
	s, c, err := m.lookupCommand(ctx, t, sid, cid)
	if err != nil {
		return 0, Logs{}, err
	}
	for {
		s.mu.Lock()
		code, changed, released := c.exitCode, c.changed, s.released
		s.mu.Unlock()
		if code != nil {
			return *code, s.logs(c), nil
		}
		if released {
			return 0, Logs{}, errDropped
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, Logs{}, ctx.Err()
		}
	}
}

// CommandLogs is what a command kept so far.
func (m *Manager) CommandLogs(ctx context.Context, t Target, sid, cid string) (Logs, error) {
	s, c, err := m.lookupCommand(ctx, t, sid, cid)
	if err != nil {
		return Logs{}, err
	}
	return s.logs(c), nil
}

// errDropped ends a wait on a command whose shell the cache dropped
// meanwhile (its stream to the agent broke, the sandbox stopped, or the
// daemon is stopping): no more news of it comes this way.
var errDropped = fmt.Errorf("%w: the session was dropped while waiting (its sandbox stopped, or the stream to its agent broke); ask again to see the command's state", service.ErrUnavailable)

// droppedNotice is sent to a follower where output was dropped before it
// was sent (the limits).
const droppedNotice = "[sandboxd: output dropped]\n"

// Follow sends a command's kept output, then its live output, until the
// command ends (nil), ctx is done or send fails. Output dropped before it
// was sent is a stdout chunk saying so.
func (m *Manager) Follow(ctx context.Context, t Target, sid, cid string, send func(Chunk) error) error {
	s, c, err := m.lookupCommand(ctx, t, sid, cid)
	if err != nil {
		return err
	}
	for next := 0; ; { // the index, from the command's start, of the next chunk
		s.mu.Lock()
		skipped := c.log.first > next
		next = max(next, c.log.first)
		// A copy: dropOldest clears the slots it drops in place.
		pending, done, changed := slices.Clone(c.log.chunks[next-c.log.first:]), c.exitCode != nil, c.changed
		released := s.released
		s.mu.Unlock()
		if skipped {
			if err := send(Chunk{Data: []byte(droppedNotice)}); err != nil {
				return err
			}
		}
		for _, ch := range pending {
			if err := send(ch); err != nil {
				return err
			}
		}
		next += len(pending)
		if done {
			return nil
		}
		if released {
			return errDropped
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Input writes data to the shell's stdin, which the running command
// reads. Ended once the command has ended.
func (m *Manager) Input(ctx context.Context, t Target, sid, cid string, data []byte) error {
	s, c, err := m.lookupCommand(ctx, t, sid, cid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	done := c.exitCode != nil
	s.mu.Unlock()
	if done {
		return errorf(Ended, "command %s has ended", cid)
	}
	s.writeMu.Lock()
	err = s.proc.SendInput(ctx, data)
	s.writeMu.Unlock()
	return agentError(err)
}

// exec registers a command and writes it, framed, to the shell. The text
// is one compound command, so bash reads all of it before running any:
// whatever the command reads from stdin is what is sent afterwards.
//
//	{ printf '<B>'; printf '<B>' >&2; { <command>
//	}; __sandboxd_ec=$?; printf '<E>' "$__sandboxd_ec" >&2; printf '<E>' "$__sandboxd_ec"; }
//
// The begin marker carries the command's text (its first maxMarkerText
// bytes, base64), so that a daemon that reattaches rebuilds the command
// from the output the agent kept.
func (s *shell) exec(ctx context.Context, text string) (*command, error) {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails
	c := &command{id: hex.EncodeToString(id[:]), command: keptText(text), changed: make(chan struct{})}

	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, errorf(Ended, "session %s has ended (its shell exited with %d)", s.id, s.endCode)
	}
	s.addLocked(c)
	s.mu.Unlock()

	begin := fmt.Sprintf(`printf '\036%s:%s:B%s\036'`, s.token, c.id, base64.StdEncoding.EncodeToString([]byte(c.command)))
	end := fmt.Sprintf(`printf '\036%s:%s:E%%d\036' "$__sandboxd_ec"`, s.token, c.id)
	script := "{ " + begin + "; " + begin + " >&2; { " + text + "\n}; __sandboxd_ec=$?; " + end + " >&2; " + end + "; }\n"

	s.writeMu.Lock()
	err := s.proc.SendInput(ctx, []byte(script))
	s.writeMu.Unlock()
	if err != nil {
		return nil, agentError(err)
	}
	return c, nil
}

// keptText is what a shell keeps of a command's text: what its begin
// marker carries, so the view is the same before and after a restart.
func keptText(text string) string {
	if len(text) <= maxMarkerText {
		return text
	}
	return strings.ToValidUTF8(text[:maxMarkerText], "")
}

// addLocked appends c, forgetting the oldest command past the limit. The
// caller holds mu.
func (s *shell) addLocked(c *command) {
	s.cmds = append(s.cmds, c)
	s.byID[c.id] = c
	s.text += len(c.command)
	for len(s.cmds) > 1 && (len(s.cmds) > MaxCommandsPerShell || s.text > maxShellText) {
		old := s.cmds[0]
		s.uncharge(old.log.dropOldest(old.log.cost))
		delete(s.byID, old.id)
		s.text -= len(old.command)
		s.cmds[0] = nil
		s.cmds = s.cmds[1:]
	}
}

// read demultiplexes the shell's output into its commands until the shell
// ends; then every command still running ends with the shell's exit code.
// A shell that exited (`exit` in a command) stays listed with its logs; a
// lost stream forgets it from the cache (the next use reattaches, when
// the sandbox still runs it).
func (s *shell) read() {
	demux := [2]*demuxer{{s: s, open: s.marker(), stderr: false}, {s: s, open: s.marker(), stderr: true}}
	defer s.markSettled()
	for {
		out, err := s.proc.Recv()
		if err != nil {
			if st, ok := s.proc.Exit(); ok && errors.Is(err, io.EOF) {
				s.end(st.Code)
				return
			}
			if s.m.ctx.Err() != nil {
				s.detach() // the daemon is stopping: the shell runs on
				return
			}
			s.b.forget(s)
			s.detach()
			return
		}
		demux[boolIndex(out.Stream == agent.Stderr)].feed(out.Data)
	}
}

func (s *shell) marker() []byte { return []byte("\x1e" + s.token + ":") }

// end marks the shell gone: running commands end with code.
func (s *shell) end(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended, s.endCode = true, code
	for _, c := range s.cmds {
		if c.exitCode == nil {
			c.exitCode = &code
			c.notify()
		}
	}
}

// kill ends the shell's process group and its stream, and drops its
// output.
func (s *shell) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.proc.Signal(ctx, syscall.SIGKILL) // best effort: the sandbox may be gone
	s.detach()
}

// detach ends the shell's stream (not the shell) and drops its output.
// It is idempotent.
func (s *shell) detach() {
	s.stopOnce.Do(func() {
		_ = s.proc.Close()
		s.cancel()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	for _, c := range s.cmds {
		s.uncharge(c.log.dropOldest(c.log.cost))
		c.notify()
	}
}

// charge counts cost more output kept; the caller holds mu.
func (s *shell) charge(cost int) {
	s.kept.Add(int64(cost))
	s.m.logs.charge(s.sandboxID, cost)
}

func (s *shell) uncharge(cost int) { s.charge(-cost) }

// evict drops at least need of the shell's oldest output (oldest command
// first, the running one included), waking those who follow it, and
// returns what it freed.
func (s *shell) evict(need int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	freed := 0
	for _, c := range s.cmds {
		if freed >= need {
			break
		}
		if n := c.log.dropOldest(need - freed); n > 0 {
			freed += n
			c.notify()
		}
	}
	s.uncharge(freed)
	return freed
}

func (s *shell) info() ShellInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ShellInfo{ID: s.id, Commands: make([]CommandInfo, 0, len(s.cmds))}
	for _, c := range s.cmds {
		out.Commands = append(out.Commands, CommandInfo{ID: c.id, Command: c.command, ExitCode: c.exitCode})
	}
	return out
}

// logs is what c kept, each stream behind a marker of what it dropped.
func (s *shell) logs(c *command) Logs {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all, stdout, stderr bytes.Buffer
	all.WriteString(droppedMarker(c.log.dropped[0] + c.log.dropped[1]))
	stdout.WriteString(droppedMarker(c.log.dropped[0]))
	stderr.WriteString(droppedMarker(c.log.dropped[1]))
	for _, ch := range c.log.chunks {
		all.Write(ch.Data)
		if ch.Stderr {
			stderr.Write(ch.Data)
		} else {
			stdout.Write(ch.Data)
		}
	}
	return Logs{Output: all.String(), Stdout: stdout.String(), Stderr: stderr.String()}
}

// notify wakes everyone waiting on c. The shell's mu must be held.
func (c *command) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// demuxer splits one output stream of a shell at its markers:
// \x1e<token>:<cmd id>:B<text>\x1e starts a command's output on this
// stream and \x1e<token>:<cmd id>:E<code>\x1e ends it. Bytes outside a
// command's markers (a background job of an earlier command, say, or
// output of a command whose begin the agent no longer kept) are dropped.
type demuxer struct {
	s      *shell
	open   []byte
	stderr bool
	buf    []byte
}

func (d *demuxer) feed(data []byte) {
	d.buf = append(d.buf, data...)
	for {
		i := bytes.Index(d.buf, d.open)
		if i < 0 {
			keep := partialSuffix(d.buf, d.open)
			d.emit(d.buf[:len(d.buf)-keep])
			d.buf = append([]byte(nil), d.buf[len(d.buf)-keep:]...)
			return
		}
		d.emit(d.buf[:i])
		rest := d.buf[i+len(d.open):]
		j := bytes.IndexByte(rest, 0x1e)
		if j < 0 && len(rest) <= maxMarkerLen {
			d.buf = append([]byte(nil), d.buf[i:]...)
			return
		}
		if j < 0 || j > maxMarkerLen { // not a marker of ours: output
			d.emit(d.buf[i : i+len(d.open)])
			d.buf = rest
			continue
		}
		d.marker(string(rest[:j]))
		d.buf = rest[j+1:]
	}
}

// partialSuffix is the length of the longest proper prefix of marker that
// b ends with: bytes to hold back until the next chunk decides.
func partialSuffix(b, marker []byte) int {
	for k := min(len(marker)-1, len(b)); k > 0; k-- {
		if bytes.HasSuffix(b, marker[:k]) {
			return k
		}
	}
	return 0
}

func (d *demuxer) emit(b []byte) {
	if len(b) == 0 {
		return
	}
	s := d.s
	s.mu.Lock()
	c := s.current[boolIndex(d.stderr)]
	if c == nil || s.released {
		s.mu.Unlock()
		return
	}
	s.charge(c.log.add(d.stderr, b))
	// The command's own ring: its newest CommandBytes.
	if over := c.log.cost - s.m.logs.limits.CommandBytes; over > 0 {
		s.uncharge(c.log.dropOldest(over))
	}
	c.notify()
	s.mu.Unlock()
	s.m.enforce(s.sandboxID) // the sandbox's and the daemon's limits, outside the lock
}

// marker handles "<cmd id>:B<text>" and "<cmd id>:E<code>". A begin of a
// command the shell does not know (replayed after a restart of the
// daemon) makes it known.
func (d *demuxer) marker(m string) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id, kind, ok := strings.Cut(m, ":")
	if !ok || kind == "" {
		return
	}
	c := s.byID[id]
	idx := boolIndex(d.stderr)
	switch kind[0] {
	case 'B':
		if c == nil && cmdIDPattern.MatchString(id) && !s.released {
			text, _ := base64.StdEncoding.DecodeString(kind[1:])
			c = &command{id: id, command: strings.ToValidUTF8(string(text), "\uFFFD"), changed: make(chan struct{})}
			s.addLocked(c)
		}
		s.current[idx] = c
	case 'E':
		s.current[idx] = nil
		if c == nil {
			return
		}
		c.ends++
		if c.ends == 2 && c.exitCode == nil {
			code, err := strconv.Atoi(kind[1:])
			if err != nil {
				code = -1
			}
			c.exitCode = &code
			c.notify()
		}
	}
}
