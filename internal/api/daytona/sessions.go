package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// Limits that bound what sessions hold in the daemon's memory; the bytes
// of output they keep are bounded by SessionLogLimits (sessionlog.go).
const (
	maxSessionsPerSandbox = 64
	maxCommandsPerSession = 1000 // older commands are forgotten
	sessionStartTimeout   = 30 * time.Second
	// maxMarkerLen bounds a marker's text after its opening bytes (a
	// command id, a kind and an exit code): output that opens a marker and
	// never closes it is output, not a reason to buffer without end.
	maxMarkerLen = 64
	// maxSessionLogsInput bounds a client message on the follow
	// WebSocket, where the client sends nothing (any message ends it).
	maxSessionLogsInput = 1 << 10
)

// Prefixes of the follow WebSocket's frames: the SDK demultiplexes stdout
// and stderr by them.
var (
	stdoutPrefix = []byte{1, 1, 1}
	stderrPrefix = []byte{2, 2, 2}
)

// sessionIDPattern bounds session ids: they name an agent process tag.
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// session is one long-lived bash, started through the agent with stdin
// open, that runs a Daytona session's commands one after another, so
// shell state (cd, export, functions) carries over. See the package
// documentation for the framing.
type session struct {
	id        string
	sandboxID string
	budget    *logBudget
	enforce   func() // drops the oldest output past the limits; no lock held
	proc      *agent.Process
	cancel    context.CancelFunc // ends proc's stream
	token     string             // the random part of this session's markers
	forget    func()             // removes the session from the facade

	writeMu sync.Mutex // orders command texts on the shell's stdin

	mu       sync.Mutex
	cmds     []*command
	byID     map[string]*command
	released bool // the session is gone: its output is no longer kept
	ended    bool
	endCode  int
	current  [2]*command // per stream: the command whose output is flowing
	stopOnce sync.Once

	// kept is the cost of all the commands' logs (written under mu, read
	// without it to choose whom to evict).
	kept atomic.Int64
}

// command is one command of a session and what it printed.
type command struct {
	id      string
	command string

	// Guarded by the session's mu.
	exitCode *int
	ends     int           // end markers seen (one per stream; done at 2)
	log      cmdLog        // the newest output, in arrival order
	changed  chan struct{} // closed (and replaced) on every change
}

// sessionInfo is Daytona's Session.
type sessionInfo struct {
	SessionID string        `json:"sessionId"`
	Commands  []commandInfo `json:"commands"`
}

// commandInfo is Daytona's Command; exitCode is absent while it runs.
type commandInfo struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

type createSessionBody struct {
	SessionID string `json:"sessionId"`
}

type sessionExecBody struct {
	Command  string `json:"command"`
	RunAsync bool   `json:"runAsync"`
	Async    bool   `json:"async"`
}

type sessionExecResponse struct {
	CmdID    string  `json:"cmdId"`
	ExitCode *int    `json:"exitCode,omitempty"`
	Output   *string `json:"output,omitempty"`
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
}

type logsResponse struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

type inputBody struct {
	Data string `json:"data"`
}

// createSession is POST /process/session {sessionId}: starts the shell.
// An id in use in this sandbox is 409.
func (f *Facade) createSession(w http.ResponseWriter, r *http.Request, b box) error {
	var body createSessionBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if !sessionIDPattern.MatchString(body.SessionID) {
		return badRequest("sessionId must be 1-128 letters, digits, '.', '_' or '-'")
	}
	// Reserve the id first, so concurrent creates start one shell.
	f.mu.Lock()
	byID := f.sessions[b.sb.ID]
	if byID == nil {
		byID = map[string]*session{}
		f.sessions[b.sb.ID] = byID
	}
	if _, dup := byID[body.SessionID]; dup {
		f.mu.Unlock()
		return errorf(http.StatusConflict, "session %s already exists", body.SessionID)
	}
	if len(byID) >= maxSessionsPerSandbox {
		f.mu.Unlock()
		return errorf(http.StatusTooManyRequests, "at most %d sessions per sandbox", maxSessionsPerSandbox)
	}
	byID[body.SessionID] = nil
	f.mu.Unlock()

	s, err := f.startSession(r.Context(), b, body.SessionID)
	stored := false
	f.mu.Lock()
	if byID := f.sessions[b.sb.ID]; byID != nil {
		if reserved, ok := byID[body.SessionID]; ok && reserved == nil {
			if err != nil {
				delete(byID, body.SessionID)
			} else {
				byID[body.SessionID], stored = s, true
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if !stored { // the sandbox stopped or was deleted meanwhile
		s.kill()
		return errorf(http.StatusConflict, "sandbox %s stopped while session %s started", b.sb.ID, body.SessionID)
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// startSession starts the session's shell and its reader.
func (f *Facade) startSession(ctx context.Context, b box, id string) (*session, error) {
	ac, err := f.agentFor(ctx, b)
	if err != nil {
		return nil, err
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:]) // never fails
	// The stream lives as long as the facade (or until the session is
	// killed), not the request; only the start is bounded, by the request
	// and by sessionStartTimeout.
	streamCtx, cancelStream := context.WithCancel(f.ctx)
	timer := time.AfterFunc(sessionStartTimeout, cancelStream)
	stopAfter := context.AfterFunc(ctx, cancelStream)
	proc, err := ac.StartProcess(streamCtx, agent.StartRequest{
		Cmd:   []string{"/bin/bash"},
		User:  b.user,
		Cwd:   b.home,
		Tag:   "daytona-session-" + id,
		Stdin: true,
	})
	if !timer.Stop() || !stopAfter() {
		err = errors.Join(err, errorf(http.StatusServiceUnavailable, "session %s: the shell did not start in time", id))
	}
	if err != nil {
		if proc != nil {
			killProc(proc)
		}
		cancelStream()
		return nil, agentError(err)
	}
	s := &session{
		id: id, sandboxID: b.sb.ID, budget: f.logs, proc: proc, cancel: cancelStream,
		token: hex.EncodeToString(tok[:]), byID: map[string]*command{},
	}
	s.forget = func() { f.forgetSession(b.sb.ID, s) }
	s.enforce = func() { f.enforceLogLimits(b.sb.ID) }
	go s.read()
	return s, nil
}

// lookupSession returns a session of the box's sandbox, or 404.
func (f *Facade) lookupSession(b box, id string) (*session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[b.sb.ID][id]
	if s == nil {
		return nil, errorf(http.StatusNotFound, "session %s not found", id)
	}
	return s, nil
}

// forgetSession removes s from its sandbox's sessions, if it is still
// there.
func (f *Facade) forgetSession(sandboxID string, s *session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if byID := f.sessions[sandboxID]; byID[s.id] == s {
		delete(byID, s.id)
	}
	s.release()
}

// dropSessions kills every session, terminal and interpreter context of a
// sandbox (it stopped, restarted or is being deleted: its shells are gone
// or about to be).
func (f *Facade) dropSessions(sandboxID string) {
	f.dropPTYs(sandboxID)
	f.dropContexts(sandboxID)
	f.mu.Lock()
	byID := f.sessions[sandboxID]
	delete(f.sessions, sandboxID)
	f.mu.Unlock()
	for _, s := range byID {
		if s != nil {
			s.kill()
		}
	}
}

// listSessions is GET /process/session.
func (f *Facade) listSessions(w http.ResponseWriter, _ *http.Request, b box) error {
	f.mu.Lock()
	var all []*session
	for _, s := range f.sessions[b.sb.ID] {
		if s != nil {
			all = append(all, s)
		}
	}
	f.mu.Unlock()
	out := make([]sessionInfo, 0, len(all))
	for _, s := range all {
		out = append(out, s.info())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getSession is GET /process/session/{sid}: its commands in order.
func (f *Facade) getSession(w http.ResponseWriter, r *http.Request, b box) error {
	s, err := f.lookupSession(b, r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.info())
	return nil
}

// deleteSession is DELETE /process/session/{sid}: the shell and whatever
// it runs are killed.
func (f *Facade) deleteSession(w http.ResponseWriter, r *http.Request, b box) error {
	id := r.PathValue("sid")
	f.mu.Lock()
	s := f.sessions[b.sb.ID][id]
	if s != nil {
		delete(f.sessions[b.sb.ID], id)
	}
	f.mu.Unlock()
	if s == nil {
		return errorf(http.StatusNotFound, "session %s not found", id)
	}
	s.kill()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sessionExec is POST /process/session/{sid}/exec {command, runAsync}:
// the command runs in the session's shell after those before it. Sync:
// 200 with its exit code and output once it ends (or the client gives
// up; the command runs on). Async: 202 {cmdId} at once.
func (f *Facade) sessionExec(w http.ResponseWriter, r *http.Request, b box) error {
	var body sessionExecBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.Command == "" {
		return badRequest("command is required")
	}
	s, err := f.lookupSession(b, r.PathValue("sid"))
	if err != nil {
		return err
	}
	cmd, err := s.exec(r.Context(), body.Command)
	if err != nil {
		return err
	}
	if body.RunAsync || body.Async {
		writeJSON(w, http.StatusAccepted, sessionExecResponse{CmdID: cmd.id})
		return nil
	}
	for {
		s.mu.Lock()
		code, changed := cmd.exitCode, cmd.changed
		s.mu.Unlock()
		if code != nil {
			break
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
	logs := s.logs(cmd)
	s.mu.Lock()
	code := *cmd.exitCode
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, sessionExecResponse{
		CmdID: cmd.id, ExitCode: &code, Output: &logs.Output, Stdout: &logs.Stdout, Stderr: &logs.Stderr,
	})
	return nil
}

// sessionCommand is GET …/command/{cid}: {id, command, exitCode?}.
func (f *Facade) sessionCommand(w http.ResponseWriter, r *http.Request, b box) error {
	s, cmd, err := f.lookupCommand(b, r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ci := commandInfo{ID: cmd.id, Command: cmd.command, ExitCode: cmd.exitCode}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, ci)
	return nil
}

// sessionLogs is GET …/command/{cid}/logs: JSON {output, stdout, stderr}
// so far, or with follow=true a WebSocket (no subprotocol) of binary
// frames, each stdout chunk after \x01\x01\x01 and each stderr chunk after
// \x02\x02\x02: the backlog, then live output, then close 1000 when the
// command has ended.
func (f *Facade) sessionLogs(w http.ResponseWriter, r *http.Request, b box) error {
	s, cmd, err := f.lookupCommand(b, r)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("follow") != "true" {
		writeJSON(w, http.StatusOK, s.logs(cmd))
		return nil
	}
	conn := acceptWS(w, r, maxSessionLogsInput)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(r.Context())
	for next := 0; ; { // the index, from the command's start, of the next chunk
		s.mu.Lock()
		skipped := cmd.log.first > next
		next = max(next, cmd.log.first)
		pending, done, changed := cmd.log.chunks[next-cmd.log.first:], cmd.exitCode != nil, cmd.changed
		s.mu.Unlock()
		if skipped {
			// Output dropped before it was sent (the limits): say so.
			mark := append(slices.Clip(stdoutPrefix), "[sandboxd: output dropped]\n"...)
			if err := conn.send(ctx, websocket.MessageBinary, mark); err != nil {
				return nil
			}
		}
		for _, c := range pending {
			prefix := stdoutPrefix
			if c.stderr {
				prefix = stderrPrefix
			}
			if err := conn.send(ctx, websocket.MessageBinary, append(append([]byte{}, prefix...), c.data...)); err != nil {
				return nil
			}
		}
		next += len(pending)
		if done {
			conn.end(websocket.StatusNormalClosure, "")
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// sessionInput is POST …/command/{cid}/input {data}: data goes to the
// shell's stdin, which the running command reads. 409 once it has ended.
func (f *Facade) sessionInput(w http.ResponseWriter, r *http.Request, b box) error {
	var body inputBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	s, cmd, err := f.lookupCommand(b, r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	done := cmd.exitCode != nil
	s.mu.Unlock()
	if done {
		return errorf(http.StatusConflict, "command %s has ended", cmd.id)
	}
	s.writeMu.Lock()
	err = s.proc.SendInput(r.Context(), []byte(body.Data))
	s.writeMu.Unlock()
	if err != nil {
		return agentError(err)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (f *Facade) lookupCommand(b box, r *http.Request) (*session, *command, error) {
	s, err := f.lookupSession(b, r.PathValue("sid"))
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	cmd := s.byID[r.PathValue("cid")]
	s.mu.Unlock()
	if cmd == nil {
		return nil, nil, errorf(http.StatusNotFound, "command %s not found in session %s", r.PathValue("cid"), s.id)
	}
	return s, cmd, nil
}

// exec registers a command and writes it, framed, to the shell. The text
// is one compound command, so bash reads all of it before running any:
// whatever the command reads from stdin is what is sent afterwards.
//
//	{ printf '<B>'; printf '<B>' >&2; { <command>
//	}; __daytona_ec=$?; printf '<E>' "$__daytona_ec" >&2; printf '<E>' "$__daytona_ec"; }
func (s *session) exec(ctx context.Context, text string) (*command, error) {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails
	cmd := &command{id: hex.EncodeToString(id[:]), command: text, changed: make(chan struct{})}

	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, errorf(http.StatusGone, "session %s has ended (its shell exited with %d)", s.id, s.endCode)
	}
	s.cmds = append(s.cmds, cmd)
	s.byID[cmd.id] = cmd
	if len(s.cmds) > maxCommandsPerSession {
		old := s.cmds[0]
		s.uncharge(old.log.dropOldest(old.log.cost))
		delete(s.byID, old.id)
		s.cmds = s.cmds[1:]
	}
	s.mu.Unlock()

	begin := fmt.Sprintf(`printf '\036%s:%s:B\036'`, s.token, cmd.id)
	end := fmt.Sprintf(`printf '\036%s:%s:E%%d\036' "$__daytona_ec"`, s.token, cmd.id)
	script := "{ " + begin + "; " + begin + " >&2; { " + text + "\n}; __daytona_ec=$?; " + end + " >&2; " + end + "; }\n"

	s.writeMu.Lock()
	err := s.proc.SendInput(ctx, []byte(script))
	s.writeMu.Unlock()
	if err != nil {
		return nil, agentError(err)
	}
	return cmd, nil
}

// read demultiplexes the shell's output into its commands until the shell
// ends; then every command still running ends with the shell's exit code.
// A shell that exited (`exit` in a command) leaves the session listed with
// its logs; a lost stream (the sandbox stopped or is gone) forgets it.
func (s *session) read() {
	demux := [2]*demuxer{{s: s, open: s.marker(), stderr: false}, {s: s, open: s.marker(), stderr: true}}
	for {
		out, err := s.proc.Recv()
		if err != nil {
			code := -1
			if st, ok := s.proc.Exit(); ok && errors.Is(err, io.EOF) {
				code = st.Code
			} else {
				s.forget()
			}
			s.end(code)
			return
		}
		demux[boolIndex(out.Stream == agent.Stderr)].feed(out.Data)
	}
}

func (s *session) marker() []byte { return []byte("\x1e" + s.token + ":") }

// end marks the shell gone: running commands end with code.
func (s *session) end(code int) {
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
func (s *session) kill() {
	s.stopOnce.Do(func() {
		killProc(s.proc)
		s.cancel()
	})
	s.release()
}

// release drops every command's output and stops keeping more: the
// session is gone from the facade. It is idempotent.
func (s *session) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	for _, c := range s.cmds {
		s.uncharge(c.log.dropOldest(c.log.cost))
	}
}

// charge counts cost more output kept; the caller holds mu.
func (s *session) charge(cost int) {
	s.kept.Add(int64(cost))
	s.budget.charge(s.sandboxID, cost)
}

func (s *session) uncharge(cost int) { s.charge(-cost) }

// evict drops at least need of the session's oldest output (oldest
// command first, the running one included), waking those who follow it,
// and returns what it freed.
func (s *session) evict(need int) int {
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

// killProc kills a shell's process group (best effort: the sandbox may be
// gone) and closes its stream.
func killProc(p *agent.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Signal(ctx, syscall.SIGKILL)
	_ = p.Close()
}

func (s *session) info() sessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := sessionInfo{SessionID: s.id, Commands: make([]commandInfo, 0, len(s.cmds))}
	for _, c := range s.cmds {
		out.Commands = append(out.Commands, commandInfo{ID: c.id, Command: c.command, ExitCode: c.exitCode})
	}
	return out
}

// logs is what c kept, each stream behind a marker of what it dropped.
func (s *session) logs(c *command) logsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all, stdout, stderr bytes.Buffer
	all.WriteString(droppedMarker(c.log.dropped[0] + c.log.dropped[1]))
	stdout.WriteString(droppedMarker(c.log.dropped[0]))
	stderr.WriteString(droppedMarker(c.log.dropped[1]))
	for _, ch := range c.log.chunks {
		all.Write(ch.data)
		if ch.stderr {
			stderr.Write(ch.data)
		} else {
			stdout.Write(ch.data)
		}
	}
	return logsResponse{Output: all.String(), Stdout: stdout.String(), Stderr: stderr.String()}
}

// notify wakes everyone waiting on c. The session's mu must be held.
func (c *command) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// demuxer splits one output stream of a session shell at its markers:
// \x1e<token>:<cmd id>:B\x1e starts a command's output on this stream and
// \x1e<token>:<cmd id>:E<code>\x1e ends it. Bytes outside a command's
// markers (a background job of an earlier command, say) are dropped.
type demuxer struct {
	s      *session
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
	if over := c.log.cost - s.budget.limits.CommandBytes; over > 0 {
		s.uncharge(c.log.dropOldest(over))
	}
	c.notify()
	s.mu.Unlock()
	s.enforce() // the sandbox's and the daemon's limits, outside the lock
}

// marker handles "<cmd id>:B" and "<cmd id>:E<code>".
func (d *demuxer) marker(m string) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id, kind, ok := cut(m)
	if !ok {
		return
	}
	c := s.byID[id]
	idx := boolIndex(d.stderr)
	switch {
	case kind == "B":
		s.current[idx] = c
	case len(kind) > 1 && kind[0] == 'E':
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

// cut splits "<id>:<kind>" at its last colon.
func cut(m string) (id, kind string, ok bool) {
	i := strings.LastIndexByte(m, ':')
	if i < 0 {
		return "", "", false
	}
	return m[:i], m[i+1:], true
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
