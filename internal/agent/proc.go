package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// Headers of process streams: keepalive events (seconds, envd's), and
// sandboxd's own kept output (bytes, on Start) and replay (on Connect).
const (
	headerKeepalive  = "Keepalive-Ping-Interval"
	headerKeepOutput = "X-Sandboxd-Keep-Output"
	headerReplay     = "X-Sandboxd-Replay"
	// headerLog names the process's lines in the sandbox's log (the
	// agent's process.headerLog): LogStart, LogOff, or absent (by pid).
	headerLog = "X-Sandboxd-Log"
	// headerStartExitCode is the agent's process.HeaderStartExitCode.
	headerStartExitCode = "X-Sandboxd-Start-Exit-Code"
)

// StartRequest describes a process to start.
type StartRequest struct {
	// Cmd is the program and its arguments; Cmd[0] is looked up in the
	// agent's PATH. For a shell line use {"/bin/sh", "-c", line}.
	Cmd []string
	Env map[string]string
	// Cwd defaults to the user's home.
	Cwd string
	// User defaults to root.
	User string
	Tag  string
	// Stdin keeps a pipe to the process's stdin open for SendInput.
	Stdin bool
	// PTY runs the process on a terminal of this size (Cols and Rows > 0).
	PTY *Size
	// Lifetime bounds the process: the agent kills it when it passes, even
	// if nobody is attached any more. Zero means unbounded.
	Lifetime time.Duration
	// Keepalive asks the agent for keepalive events on quiet streams;
	// they are consumed by [Process.Recv]. Zero uses the agent's default.
	Keepalive time.Duration
	// KeepOutput asks the agent to keep the process's newest output, up to
	// this many bytes (the agent caps it at 4 MiB), whether or not anyone
	// is attached, and to keep the process known to a replaying
	// ConnectProcess for a while after it ends. Zero keeps nothing.
	KeepOutput int
	// LogAs names the process's lines in the sandbox's log (Client.Logs):
	// "" by its pid, LogStart as the sandbox's start command, LogOff not
	// at all (the daemon's own probes).
	LogAs string
}

// Values of StartRequest.LogAs and ExecRequest.LogAs.
const (
	LogStart = "start"
	LogOff   = "off"
)

// Size is a terminal size.
type Size struct{ Cols, Rows uint32 }

// Stream names the output an [Output] came from.
type Stream int

// Outputs of a process.
const (
	Stdout Stream = iota + 1
	Stderr
	PTY
)

// Output is one chunk of a process's output.
type Output struct {
	Stream Stream
	Data   []byte
}

// ExitStatus is how a process ended, as the agent reports it.
type ExitStatus struct {
	// Code is the exit code, -1 when a signal killed the process.
	Code int
	// Exited is false when a signal ended the process.
	Exited bool
	// Status reads "exit status 1" or "signal: killed".
	Status string
}

// Process is a stream of one process's events, from StartProcess or
// ConnectProcess, and the controls of that process. Recv must be called
// from one goroutine; the other methods are safe from any.
type Process struct {
	c      *Client
	pid    uint32
	pty    bool
	user   string
	cancel context.CancelFunc
	recv   func() (*rpc.ProcessEvent, error)
	close  func() error
	exit   *ExitStatus

	// replayed is closed once Recv has returned every replayed output (see
	// Replayed); replaying says it is still open.
	replayed  chan struct{}
	replaying bool
}

// doneReplay is the Replayed of a stream that replays nothing.
var doneReplay = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Replayed is closed once Recv has returned the last output of the replay
// an Attach with Replay asked for (the agent marks its end), or the stream
// ended first; it is closed from the start on a stream that replays
// nothing.
func (p *Process) Replayed() <-chan struct{} { return p.replayed }

// endReplay closes replayed once.
func (p *Process) endReplay() {
	if p.replaying {
		p.replaying = false
		close(p.replayed)
	}
}

// StartProcess starts a process and returns once the agent reported its
// pid. ctx governs the stream (not the process: see StartRequest.Lifetime);
// Close ends the stream. The process runs on without a stream until it
// exits or its lifetime passes.
func (c *Client) StartProcess(ctx context.Context, r StartRequest) (*Process, error) {
	if len(r.Cmd) == 0 {
		return nil, errors.New("agent: start process: empty command")
	}
	msg := &rpc.StartRequest{
		Process: &rpc.ProcessConfig{Cmd: r.Cmd[0], Args: r.Cmd[1:], Envs: r.Env},
		Stdin:   &r.Stdin,
	}
	if r.Cwd != "" {
		msg.Process.Cwd = &r.Cwd
	}
	if r.Tag != "" {
		msg.Tag = &r.Tag
	}
	if r.PTY != nil {
		msg.Pty = &rpc.PTY{Size: &rpc.PTY_Size{Cols: r.PTY.Cols, Rows: r.PTY.Rows}}
	}
	// Connect sends the stream's deadline as Connect-Timeout-Ms, which the
	// agent takes as the lifetime: derive the stream context accordingly.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if r.Lifetime > 0 {
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.Lifetime)
	}
	stop := context.AfterFunc(ctx, cancel)
	req := connect.NewRequest(msg)
	SetUser(req.Header(), r.User)
	if r.Keepalive > 0 {
		req.Header().Set(headerKeepalive, fmt.Sprint(int(r.Keepalive.Seconds())))
	}
	if r.KeepOutput > 0 {
		req.Header().Set(headerKeepOutput, fmt.Sprint(r.KeepOutput))
	}
	if r.LogAs != "" {
		req.Header().Set(headerLog, r.LogAs)
	}
	st, err := c.proc.Start(sctx, req)
	if err != nil {
		stop()
		cancel()
		return nil, startErr(r.Cmd[0], err)
	}
	p := &Process{c: c, pty: r.PTY != nil, user: r.User, cancel: func() { stop(); cancel() }, close: st.Close, replayed: doneReplay,
		recv: func() (*rpc.ProcessEvent, error) {
			if !st.Receive() {
				return nil, streamEnd(st.Err())
			}
			return st.Msg().GetEvent(), nil
		}}
	if err := p.awaitStart(); err != nil {
		p.Close()
		return nil, startErr(r.Cmd[0], err)
	}
	return p, nil
}

// Attach selects a running process for ConnectProcess: by PID, or by Tag
// when PID is zero. PTY says whether it runs on a terminal (it decides
// where SendInput writes).
type Attach struct {
	PID  uint32
	Tag  string
	PTY  bool
	User string
	// Replay first delivers the output the process kept (StartRequest.
	// KeepOutput), then the live output, none lost or repeated between
	// the two; it also reaches such a process that ended recently, whose
	// stream then carries its kept output and its end.
	Replay bool
}

// ConnectProcess attaches to a running process; its output from now on
// (or, with Replay, its kept output first) arrives through Recv. An
// unknown process is a connect error with code not_found.
func (c *Client) ConnectProcess(ctx context.Context, a Attach) (*Process, error) {
	sctx, cancel := context.WithCancel(ctx)
	req := connect.NewRequest(&rpc.ConnectRequest{Process: selector(a.PID, a.Tag)})
	SetUser(req.Header(), a.User)
	if a.Replay {
		req.Header().Set(headerReplay, "1")
	}
	st, err := c.proc.Connect(sctx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("agent: connect to process: %w", err)
	}
	p := &Process{c: c, pty: a.PTY, user: a.User, cancel: cancel, close: st.Close, replayed: doneReplay,
		recv: func() (*rpc.ProcessEvent, error) {
			if !st.Receive() {
				return nil, streamEnd(st.Err())
			}
			return st.Msg().GetEvent(), nil
		}}
	if a.Replay {
		p.replayed, p.replaying = make(chan struct{}), true
	}
	if err := p.awaitStart(); err != nil {
		p.Close()
		return nil, fmt.Errorf("agent: connect to process: %w", err)
	}
	return p, nil
}

func selector(pid uint32, tag string) *rpc.ProcessSelector {
	if pid != 0 {
		return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Pid{Pid: pid}}
	}
	return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Tag{Tag: tag}}
}

// awaitStart reads the first event, which must be start{pid}.
func (p *Process) awaitStart() error {
	ev, err := p.recv()
	if err != nil {
		return err
	}
	s := ev.GetStart()
	if s == nil {
		return fmt.Errorf("first event is %T, want start", ev.GetEvent())
	}
	p.pid = s.GetPid()
	return nil
}

// PID is the process id inside the sandbox.
func (p *Process) PID() uint32 { return p.pid }

// Recv returns the next chunk of output. When the process has ended it
// returns io.EOF and [Process.Exit] reports how. Any other error ends the
// stream (not the process).
func (p *Process) Recv() (Output, error) {
	if p.exit != nil {
		return Output{}, io.EOF
	}
	for {
		ev, err := p.recv()
		if err != nil {
			p.endReplay()
			return Output{}, err
		}
		switch e := ev.GetEvent().(type) {
		case *rpc.ProcessEvent_Keepalive:
			p.endReplay() // the first one after a replay marks its end
		case *rpc.ProcessEvent_Data:
			switch o := e.Data.GetOutput().(type) {
			case *rpc.ProcessEvent_DataEvent_Stdout:
				return Output{Stream: Stdout, Data: o.Stdout}, nil
			case *rpc.ProcessEvent_DataEvent_Stderr:
				return Output{Stream: Stderr, Data: o.Stderr}, nil
			case *rpc.ProcessEvent_DataEvent_Pty:
				return Output{Stream: PTY, Data: o.Pty}, nil
			}
		case *rpc.ProcessEvent_End:
			p.endReplay()
			p.exit = &ExitStatus{Code: int(e.End.GetExitCode()), Exited: e.End.GetExited(), Status: e.End.GetStatus()}
			// Read the stream's own end too, so that its connection is
			// free for reuse once the stream is closed.
			_, _ = p.recv()
			return Output{}, io.EOF
		}
		// an event this client does not know: skip
	}
}

// Exit reports how the process ended, once Recv returned io.EOF.
func (p *Process) Exit() (ExitStatus, bool) {
	if p.exit == nil {
		return ExitStatus{}, false
	}
	return *p.exit, true
}

// Wait discards output until the process ends and returns its status.
func (p *Process) Wait() (ExitStatus, error) {
	for {
		if _, err := p.Recv(); err == io.EOF {
			return *p.exit, nil
		} else if err != nil {
			return ExitStatus{}, err
		}
	}
}

// Close ends the stream; the process is not affected.
func (p *Process) Close() error {
	// Close the stream before cancelling its context: a stream that has
	// been read to its end then leaves its connection for reuse, where a
	// cancelled one would tear it down.
	err := p.close()
	p.cancel()
	if connect.CodeOf(err) == connect.CodeCanceled {
		return nil
	}
	return err
}

// SendInput writes b to the process's terminal or stdin.
func (p *Process) SendInput(ctx context.Context, b []byte) error {
	in := &rpc.ProcessInput{Input: &rpc.ProcessInput_Stdin{Stdin: b}}
	if p.pty {
		in.Input = &rpc.ProcessInput_Pty{Pty: b}
	}
	req := connect.NewRequest(&rpc.SendInputRequest{Process: selector(p.pid, ""), Input: in})
	SetUser(req.Header(), p.user)
	_, err := p.c.proc.SendInput(ctx, req)
	return wrap("send input", err)
}

// CloseStdin closes the process's stdin (not possible with a terminal:
// send Ctrl-D).
func (p *Process) CloseStdin(ctx context.Context) error {
	req := connect.NewRequest(&rpc.CloseStdinRequest{Process: selector(p.pid, "")})
	SetUser(req.Header(), p.user)
	_, err := p.c.proc.CloseStdin(ctx, req)
	return wrap("close stdin", err)
}

// Signal sends SIGTERM or SIGKILL (the only two the protocol carries) to
// the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	var s rpc.Signal
	switch sig {
	case syscall.SIGTERM:
		s = rpc.Signal_SIGNAL_SIGTERM
	case syscall.SIGKILL:
		s = rpc.Signal_SIGNAL_SIGKILL
	default:
		return fmt.Errorf("agent: signal %v: only SIGTERM and SIGKILL are supported", sig)
	}
	req := connect.NewRequest(&rpc.SendSignalRequest{Process: selector(p.pid, ""), Signal: s})
	SetUser(req.Header(), p.user)
	_, err := p.c.proc.SendSignal(ctx, req)
	return wrap("signal", err)
}

// Resize sets the terminal size of a PTY process.
func (p *Process) Resize(ctx context.Context, size Size) error {
	req := connect.NewRequest(&rpc.UpdateRequest{
		Process: selector(p.pid, ""),
		Pty:     &rpc.PTY{Size: &rpc.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	})
	SetUser(req.Header(), p.user)
	_, err := p.c.proc.Update(ctx, req)
	return wrap("resize", err)
}

// streamEnd is the error of a stream that stopped: a stream that ends
// cleanly before the end event is truncated.
func streamEnd(err error) error {
	if err == nil {
		return io.ErrUnexpectedEOF
	}
	return err
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("agent: %s: %w", op, err)
}

// NotExecutedError is a start the agent refused because the program could
// not be executed: ExitCode is what a shell exits with for the same
// failure (127 not found, 126 not executable), Msg the agent's words.
type NotExecutedError struct {
	Program  string
	ExitCode int
	Msg      string
	Err      error
}

func (e *NotExecutedError) Error() string {
	return fmt.Sprintf("agent: start %q: %v", e.Program, e.Err)
}

// Unwrap returns the agent's error.
func (e *NotExecutedError) Unwrap() error { return e.Err }

// startErr wraps the agent's refusal to start program: a
// *NotExecutedError when the agent said which exit status a shell gives.
func startErr(program string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if code, convErr := strconv.Atoi(ce.Meta().Get(headerStartExitCode)); convErr == nil && code > 0 && code < 256 {
			return &NotExecutedError{Program: program, ExitCode: code, Msg: ce.Message(), Err: err}
		}
	}
	return fmt.Errorf("agent: start %q: %w", program, err)
}
