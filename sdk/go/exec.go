package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// ExecRequest is a command to run to completion with Exec. Set exactly one
// of Cmd (an argv, run without a shell) and Command (a shell string, run
// with sh -c).
type ExecRequest struct {
	Cmd     []string          `json:"cmd,omitempty"`
	Command string            `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	User    string            `json:"user,omitempty"`
	// Stdin is the whole of the process's standard input, as text.
	Stdin string `json:"stdin,omitempty"`
	// Timeout bounds the command's run time, rounded up to whole seconds;
	// zero means the daemon's default.
	Timeout time.Duration `json:"-"`
}

type execBody struct {
	ExecRequest
	TimeoutS int64 `json:"timeout_s,omitempty"`
}

// ExecResult is the outcome of a command run by Exec.
type ExecResult struct {
	ExitCode int `json:"exit_code"`
	// Stdout and Stderr are the command's output as UTF-8 text, each capped
	// at 1 MiB by the daemon; Truncated reports that a cap was hit.
	Stdout    string        `json:"stdout"`
	Stderr    string        `json:"stderr"`
	Duration  time.Duration `json:"-"`
	Truncated bool          `json:"truncated"`
}

// execResultWire is ExecResult as sent by the API.
type execResultWire struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
}

// MarshalJSON encodes r in the API's form (duration_ms).
func (r ExecResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(execResultWire{r.ExitCode, r.Stdout, r.Stderr, r.Duration.Milliseconds(), r.Truncated})
}

// UnmarshalJSON decodes the API's form.
func (r *ExecResult) UnmarshalJSON(b []byte) error {
	var w execResultWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = ExecResult{w.ExitCode, w.Stdout, w.Stderr, time.Duration(w.DurationMS) * time.Millisecond, w.Truncated}
	return nil
}

// Exec runs a command in a sandbox, waits for it to finish, and returns
// its exit code and output. A command that runs and fails is not an
// error: check ExitCode.
//
// Exec is never retried: running a command is not idempotent, and a retry
// after a lost answer could run it twice. Use ExecStream for long-running
// commands or output beyond 1 MiB.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	var res ExecResult
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "exec"}, retry: retryNever}
	if err := c.do(ctx, r, execBody{req, seconds(req.Timeout)}, &res); err != nil {
		return nil, fmt.Errorf("exec in sandbox %q: %w", id, err)
	}
	return &res, nil
}

// PTYSize is the size of a terminal, in character cells.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// StreamRequest is a command to run with ExecStream. Set exactly one of
// Cmd and Command, as for ExecRequest.
type StreamRequest struct {
	Cmd     []string
	Command string
	Env     map[string]string
	Cwd     string
	User    string
	// PTY, when set, runs the process on a terminal of this size; its
	// output (stdout and stderr merged) then arrives as stdout.
	PTY *PTYSize

	// Stdout and Stderr, when set, receive the process's output as it
	// arrives, from one goroutine, in order. A slow writer slows the
	// stream down (the daemon sees back-pressure) rather than buffering.
	// When nil, the output is read from Process.Stdout or Process.Stderr
	// instead; set io.Discard to drop it.
	Stdout io.Writer
	Stderr io.Writer
}

// Frame sizes. The API does not bound frames; these keep both ends within
// the common WebSocket default message limit (32 KiB) for what we send,
// and accept generous output chunks (base64 inflates by 4/3).
const (
	stdinChunk    = 16 << 10
	maxFrameBytes = 8 << 20
)

// clientFrame is a text frame from the client.
type clientFrame struct {
	Type    string            `json:"type"`
	Cmd     []string          `json:"cmd,omitempty"`
	Command string            `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	User    string            `json:"user,omitempty"`
	PTY     *PTYSize          `json:"pty,omitempty"`
	Cols    int               `json:"cols,omitempty"`
	Rows    int               `json:"rows,omitempty"`
	Signal  string            `json:"signal,omitempty"`
}

// serverFrame is a text frame from the daemon.
type serverFrame struct {
	Type     string `json:"type"`
	PID      int    `json:"pid"`
	Data     []byte `json:"data"` // base64 in JSON
	ExitCode int    `json:"exit_code"`
	Error    *struct {
		Code    ErrorCode `json:"code"`
		Message string    `json:"message"`
	} `json:"error"`
}

// errClosed is what Wait reports after Close ended a running process.
var errClosed = errors.New("exec stream closed by Close")

// Process is a command running in a sandbox, started by ExecStream. Its
// methods are safe for concurrent use.
//
// Write, CloseStdin, Resize and Signal send frames to the daemon; Wait
// waits for the exit; Close ends the stream. The process is killed when
// the stream ends before it exits: by Close, by the cancellation of the
// context given to ExecStream, or by a broken connection.
type Process struct {
	conn   *websocket.Conn
	ctx    context.Context // the stream's lifetime
	cancel context.CancelCauseFunc
	pid    int

	stdoutR, stderrR *io.PipeReader // nil when the caller gave writers
	stdout, stderr   io.Writer      // where output frames go

	started   chan struct{} // closed at the first frame showing the process runs
	startOnce sync.Once
	done      chan struct{} // closed when the read loop has ended
	ended     atomic.Bool   // the exit or error frame arrived (done may lag)

	// Set by the read loop before done is closed.
	exitCode int
	err      error
}

// ExecStream starts a command in a sandbox and returns once the daemon
// reports it running (or its first output or exit). Output is delivered
// live, stdin is forwarded frame by frame.
//
// ctx bounds the whole life of the process, like exec.CommandContext: when
// it is done, the stream is closed and the daemon kills the process.
//
// The WebSocket handshake is retried on transient failures like any safe
// call: the process starts only once the handshake is complete and the
// start frame sent, which happens at most once. A refusal before the start
// (sandbox not found, say) is an *APIError.
//
// Call Wait for the exit code, and Close when done with the Process.
func (c *Client) ExecStream(ctx context.Context, id string, req StreamRequest) (*Process, error) {
	if c.baseErr != nil {
		return nil, c.baseErr
	}
	u := c.url(&request{segs: []string{"v1", "sandboxes", id, "exec", "stream"}})
	hdr := http.Header{}
	c.setHeaders(hdr)
	hdr.Del("Accept")

	var conn *websocket.Conn
	err := c.withRetry(ctx, retrySafe, func() error {
		var resp *http.Response
		var err error
		conn, resp, err = websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: hdr})
		if err != nil && resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return c.decodeError(resp)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("exec stream in sandbox %q: %w", id, err)
	}
	conn.SetReadLimit(maxFrameBytes)

	pctx, cancel := context.WithCancelCause(ctx)
	p := &Process{
		conn:    conn,
		ctx:     pctx,
		cancel:  cancel,
		stdout:  req.Stdout,
		stderr:  req.Stderr,
		started: make(chan struct{}),
		done:    make(chan struct{}),
	}
	var stdoutW, stderrW *io.PipeWriter
	if p.stdout == nil {
		p.stdoutR, stdoutW = io.Pipe()
		p.stdout = stdoutW
	}
	if p.stderr == nil {
		p.stderrR, stderrW = io.Pipe()
		p.stderr = stderrW
	}
	// When the stream's context ends, unblock everything: a read loop
	// stuck writing to a pipe nobody reads, and the socket itself.
	stop := context.AfterFunc(pctx, func() {
		for _, r := range []*io.PipeReader{p.stdoutR, p.stderrR} {
			if r != nil {
				r.CloseWithError(context.Cause(pctx))
			}
		}
		conn.CloseNow()
	})

	start := clientFrame{
		Type: "start", Cmd: req.Cmd, Command: req.Command, Env: req.Env,
		Cwd: req.Cwd, User: req.User, PTY: req.PTY,
	}
	if err := p.sendFrame(start); err != nil {
		stop()
		cancel(err)
		conn.CloseNow()
		return nil, fmt.Errorf("exec stream in sandbox %q: send start: %w", id, err)
	}
	go p.readLoop(stdoutW, stderrW)

	select {
	case <-p.started:
		return p, nil
	case <-p.done:
		if p.err != nil {
			cancel(p.err)
			return nil, fmt.Errorf("exec stream in sandbox %q: %w", id, p.err)
		}
		return p, nil
	}
}

// readLoop reads frames until the exit, an error frame, or the end of the
// connection, then records the outcome and closes done.
func (p *Process) readLoop(stdoutW, stderrW *io.PipeWriter) {
	code, err := -1, error(nil)
	var outErr error // first failure to deliver output
	defer func() {
		if err == nil && outErr != nil {
			err = outErr
		}
		p.exitCode, p.err = code, err
		for _, w := range []*io.PipeWriter{stdoutW, stderrW} {
			if w != nil {
				w.CloseWithError(err) // nil: readers see io.EOF
			}
		}
		close(p.done)
	}()
	deliver := func(w *io.Writer, name string, data []byte) {
		if *w == io.Discard {
			return
		}
		if _, werr := (*w).Write(data); werr != nil {
			// Keep the stream (and the exit code); drop this output.
			if outErr == nil && p.ctx.Err() == nil {
				outErr = fmt.Errorf("deliver %s: %w", name, werr)
			}
			*w = io.Discard
		}
	}
	for {
		typ, msg, rerr := p.conn.Read(p.ctx)
		if rerr != nil {
			if p.ctx.Err() != nil {
				err = context.Cause(p.ctx) // errClosed after Close
			} else {
				err = fmt.Errorf("stream ended before the process exited: %w", rerr)
			}
			return
		}
		if typ != websocket.MessageText {
			continue // the API sends only text frames
		}
		var f serverFrame
		if jerr := json.Unmarshal(msg, &f); jerr != nil {
			err = fmt.Errorf("bad frame from daemon: %w", jerr)
			p.conn.Close(websocket.StatusUnsupportedData, "bad frame")
			return
		}
		switch f.Type {
		case "started":
			p.startOnce.Do(func() { p.pid = f.PID; close(p.started) })
		case "stdout":
			p.markStarted()
			deliver(&p.stdout, "stdout", f.Data)
		case "stderr":
			p.markStarted()
			deliver(&p.stderr, "stderr", f.Data)
		case "exit":
			code = f.ExitCode
			p.ended.Store(true)
			p.conn.Close(websocket.StatusNormalClosure, "")
			return
		case "error":
			e := &APIError{Code: CodeInternal}
			if f.Error != nil {
				e.Code, e.Message = f.Error.Code, f.Error.Message
			}
			err = e
			p.ended.Store(true)
			p.conn.CloseNow()
			return
		default:
			// Unknown frames are ignored, for forward compatibility.
		}
	}
}

func (p *Process) markStarted() { p.startOnce.Do(func() { close(p.started) }) }

func (p *Process) sendFrame(f clientFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return p.conn.Write(p.ctx, websocket.MessageText, b)
}

// PID is the process id the daemon reported, or 0 if it reported none.
func (p *Process) PID() int {
	select {
	case <-p.started:
		return p.pid
	default:
		return 0
	}
}

// Stdout returns the process's standard output (or, on a PTY, all of its
// output), which ends with io.EOF when the process has exited. It is nil
// when StreamRequest.Stdout was set. The stream is not buffered: read it
// concurrently with Wait, or the process stalls once the daemon's buffers
// fill.
func (p *Process) Stdout() io.Reader {
	if p.stdoutR == nil {
		return nil
	}
	return p.stdoutR
}

// Stderr is like Stdout, for standard error.
func (p *Process) Stderr() io.Reader {
	if p.stderrR == nil {
		return nil
	}
	return p.stderrR
}

// Write sends b to the process's standard input. It returns
// os.ErrProcessDone once the process has exited.
func (p *Process) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if p.exited() {
			return n, os.ErrProcessDone
		}
		chunk := b[:min(len(b), stdinChunk)]
		if err := p.conn.Write(p.ctx, websocket.MessageBinary, chunk); err != nil {
			if p.exited() {
				return n, os.ErrProcessDone
			}
			return n, fmt.Errorf("write stdin: %w", err)
		}
		n += len(chunk)
		b = b[len(chunk):]
	}
	return n, nil
}

// CloseStdin closes the process's standard input: it reads EOF after the
// bytes already written.
func (p *Process) CloseStdin() error {
	return p.control(clientFrame{Type: "stdin_close"})
}

// Resize changes the size of the process's terminal. It applies only to a
// process started with StreamRequest.PTY.
func (p *Process) Resize(cols, rows int) error {
	return p.control(clientFrame{Type: "resize", Cols: cols, Rows: rows})
}

// Signal sends a signal to the process: "SIGTERM", "SIGKILL" or "SIGINT".
func (p *Process) Signal(name string) error {
	return p.control(clientFrame{Type: "signal", Signal: name})
}

func (p *Process) control(f clientFrame) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	if err := p.sendFrame(f); err != nil {
		if p.exited() {
			return os.ErrProcessDone
		}
		return fmt.Errorf("send %s: %w", f.Type, err)
	}
	return nil
}

func (p *Process) exited() bool {
	if p.ended.Load() {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns its exit code. The error
// is non-nil when the exit code is unknown (the code is then -1): an error
// frame from the daemon (an *APIError), a broken stream, the end of the
// context given to ExecStream, or Close. It is also non-nil, beside a
// valid exit code, when writing output to StreamRequest.Stdout or Stderr
// failed. Wait may be called any number of times.
func (p *Process) Wait() (int, error) {
	<-p.done
	return p.exitCode, p.err
}

// Close ends the stream and releases its resources, killing the process
// if it is still running; Wait then reports an error. Close after the
// process has exited only releases resources. It waits for the stream's
// goroutine to end and always returns nil.
func (p *Process) Close() error {
	p.cancel(errClosed)
	<-p.done
	return nil
}
