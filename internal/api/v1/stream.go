package v1

import (
	"bytes"
	"connectrpc.com/connect"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/service"
)

const (
	// maxClientFrame bounds one client frame (a stdin chunk or a control
	// frame); clients split larger input.
	maxClientFrame = 1 << 20
	// startFrameTimeout is how long a client may take to send its start
	// frame after the upgrade.
	startFrameTimeout = 30 * time.Second
	// writeTimeout bounds one frame write: a client that stops reading
	// loses its process instead of pinning it forever.
	writeTimeout = 30 * time.Second
	// killTimeout bounds the SIGKILL sent to an abandoned process.
	killTimeout = 10 * time.Second
)

// clientFrame is any text frame a client sends; Type selects which fields
// matter (docs/api-v1.md, "Streaming exec").
type clientFrame struct {
	Type string `json:"type"`
	// start
	Cmd     []string          `json:"cmd"`
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
	User    string            `json:"user"`
	PTY     *ptyJSON          `json:"pty"`
	// resize
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// signal
	Signal string `json:"signal"`
}

type ptyJSON struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// serverFrame is any frame the server sends. Data is base64 in JSON.
type serverFrame struct {
	Type     string     `json:"type"`
	PID      int        `json:"pid,omitempty"`
	Data     []byte     `json:"data,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Error    *errorJSON `json:"error,omitempty"`
}

// execStream runs a process over a WebSocket. The sandbox is looked up
// before the upgrade, so an unknown sandbox or a bad token is an ordinary
// JSON error; after it, failures are an error frame and a close. Closing
// the socket, a protocol error or a write that times out kills the
// process; the handler returns only once the input goroutine has ended.
func (s *server) execStream(w http.ResponseWriter, r *http.Request) error {
	c, id := caller(r), r.PathValue("id")
	if _, err := s.svc.Get(r.Context(), c, id); err != nil {
		return err
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered (403 for a foreign Origin, 426, …)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxClientFrame)
	ctx := r.Context() // frames; ends when the handler returns

	req, err := readStart(ctx, conn)
	if err != nil {
		s.closeWithError(ctx, r, conn, err)
		return nil
	}
	// procCtx governs the process's stream and controls: the input pump
	// cancels it when the client leaves or breaks the protocol.
	procCtx, stop := context.WithCancel(ctx)
	defer stop()
	proc, err := s.svc.StartProcess(procCtx, c, id, req)
	if code, stderr, ok := service.NotExecuted(err); ok {
		// A program that is not there exits 127 (126: not executable),
		// as in sh and docker exec: output and an exit frame, no error.
		if send(ctx, conn, serverFrame{Type: "stderr", Data: []byte(stderr)}) == nil &&
			send(ctx, conn, serverFrame{Type: "exit", ExitCode: &code}) == nil {
			conn.Close(websocket.StatusNormalClosure, "")
		}
		return nil
	}
	if err != nil {
		s.closeWithError(ctx, r, conn, err)
		return nil
	}
	exited := false
	defer func() {
		if !exited {
			kill(proc) // the stream is going away: so does the process
		}
		proc.Close()
	}()
	if err := send(ctx, conn, serverFrame{Type: "started", PID: int(proc.PID())}); err != nil {
		return nil
	}

	in := &inputPump{conn: conn, proc: proc, pty: req.PTY != nil, stop: stop}
	var wg sync.WaitGroup
	wg.Go(func() { in.run(ctx, procCtx) })
	defer func() {
		conn.CloseNow() // ends the pump's Read
		wg.Wait()
	}()
	exited = s.forwardOutput(ctx, r, conn, proc, in)
	return nil
}

// forwardOutput sends the process's output to the client until it exits
// (then the exit frame and a normal close; it reports true) or the stream
// breaks (then an error frame, unless the client left; false).
func (s *server) forwardOutput(ctx context.Context, r *http.Request, conn *websocket.Conn, proc *agent.Process, in *inputPump) (exited bool) {
	for {
		out, err := proc.Recv()
		if errors.Is(err, io.EOF) {
			status, _ := proc.Exit()
			code := shellExitCode(status.Code, status.Exited, status.Status)
			_ = send(ctx, conn, serverFrame{Type: "exit", ExitCode: &code})
			conn.Close(websocket.StatusNormalClosure, "")
			return true
		}
		if err != nil {
			switch gone, failed := in.outcome(); {
			case gone:
				return false // the client left; nobody to tell
			case failed != nil:
				err = failed // the pump stopped the stream; say why
			}
			s.closeWithError(ctx, r, conn, err)
			return false
		}
		if len(out.Data) == 0 {
			continue
		}
		f := serverFrame{Type: "stdout", Data: out.Data} // a terminal's output is stdout
		if out.Stream == agent.Stderr {
			f.Type = "stderr"
		}
		if err := send(ctx, conn, f); err != nil {
			return false // client gone or stuck: the caller kills the process
		}
	}
}

// kill ends a process whose stream is being abandoned, with a fresh
// context: the request's may be over.
func kill(proc *agent.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_ = proc.Signal(ctx, syscall.SIGKILL) // best effort: it may have exited
}

// readStart reads and validates the start frame.
func readStart(ctx context.Context, conn *websocket.Conn) (service.ProcessRequest, error) {
	ctx, cancel := context.WithTimeout(ctx, startFrameTimeout)
	defer cancel()
	typ, b, err := conn.Read(ctx)
	if err != nil {
		return service.ProcessRequest{}, errorf(CodeInvalidArgument, "no start frame: %v", err)
	}
	f, err := decodeFrame(typ, b)
	if err != nil {
		return service.ProcessRequest{}, err
	}
	if f.Type != "start" {
		return service.ProcessRequest{}, errorf(CodeInvalidArgument, "the first frame must be {\"type\":\"start\",…}, got type %q", f.Type)
	}
	req := service.ProcessRequest{Cmd: f.Cmd, Command: f.Command, Env: f.Env, Cwd: f.Cwd, User: f.User}
	if f.PTY != nil {
		size, err := ptySize(f.PTY.Cols, f.PTY.Rows)
		if err != nil {
			return service.ProcessRequest{}, err
		}
		req.PTY = &size
	}
	return req, nil
}

func decodeFrame(typ websocket.MessageType, b []byte) (clientFrame, error) {
	var f clientFrame
	if typ != websocket.MessageText {
		return f, errorf(CodeInvalidArgument, "expected a JSON text frame")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, decodeError(err)
	}
	if dec.More() {
		return f, errorf(CodeInvalidArgument, "unexpected data after the JSON frame")
	}
	return f, nil
}

func ptySize(cols, rows int) (agent.Size, error) {
	if cols < 1 || cols > 0xffff || rows < 1 || rows > 0xffff {
		return agent.Size{}, errorf(CodeInvalidArgument, "terminal size %dx%d is out of range (1-65535)", cols, rows)
	}
	return agent.Size{Cols: uint32(cols), Rows: uint32(rows)}, nil
}

// inputPump forwards client frames to the process, in order: binary frames
// to stdin, text frames as control. When the client leaves or breaks the
// protocol it stops the process's stream, which ends the output loop.
type inputPump struct {
	conn *websocket.Conn
	proc *agent.Process
	pty  bool
	stop context.CancelFunc

	mu     sync.Mutex
	gone   bool  // the socket closed
	failed error // a protocol or control error to report
}

func (p *inputPump) outcome() (gone bool, failed error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone, p.failed
}

func (p *inputPump) run(ctx, procCtx context.Context) {
	for {
		typ, b, err := p.conn.Read(ctx)
		if err == nil {
			err = p.handle(procCtx, typ, b)
			if err == nil || connect.CodeOf(err) == connect.CodeNotFound {
				// not_found: the process has exited (stdin_close, a
				// signal or input that lost the race with its exit). The
				// exit frame follows; nothing failed.
				continue
			}
			p.mu.Lock()
			p.failed = err
			p.mu.Unlock()
		} else {
			p.mu.Lock()
			p.gone = p.failed == nil
			p.mu.Unlock()
		}
		p.stop()
		return
	}
}

func (p *inputPump) handle(ctx context.Context, typ websocket.MessageType, b []byte) error {
	if typ == websocket.MessageBinary {
		return p.proc.SendInput(ctx, b)
	}
	f, err := decodeFrame(typ, b)
	if err != nil {
		return err
	}
	switch f.Type {
	case "stdin_close":
		if p.pty {
			return p.proc.SendInput(ctx, []byte{0x04}) // a terminal has no stdin to close: ^D
		}
		return p.proc.CloseStdin(ctx)
	case "resize":
		size, err := ptySize(f.Cols, f.Rows)
		if err != nil {
			return err
		}
		if !p.pty {
			return errorf(CodeInvalidArgument, "resize needs a process started with pty")
		}
		return p.proc.Resize(ctx, size)
	case "signal":
		switch f.Signal {
		case "SIGTERM":
			return p.proc.Signal(ctx, syscall.SIGTERM)
		case "SIGKILL":
			return p.proc.Signal(ctx, syscall.SIGKILL)
		case "SIGINT":
			// The agent's protocol carries only TERM and KILL. On a
			// terminal, ^C is how SIGINT is sent (the line discipline
			// signals the foreground process group).
			if p.pty {
				return p.proc.SendInput(ctx, []byte{0x03})
			}
			return errorf(CodeInvalidArgument, "SIGINT needs a process started with pty")
		}
		return errorf(CodeInvalidArgument, "signal %q is not one of SIGTERM, SIGKILL, SIGINT", f.Signal)
	case "start":
		return errorf(CodeInvalidArgument, "the process has already started")
	}
	return errorf(CodeInvalidArgument, "unknown frame type %q", f.Type)
}

func send(ctx context.Context, conn *websocket.Conn, f serverFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// closeWithError sends the error frame for err (classified like any other
// error, and counted) and closes the socket: with 1008 (policy violation)
// for the client's errors, 1011 (internal error) for ours.
func (s *server) closeWithError(ctx context.Context, r *http.Request, conn *websocket.Conn, err error) {
	code, msg := classify(err)
	s.metrics.errors.WithLabelValues(string(code)).Inc()
	status := websocket.StatusPolicyViolation
	if apierr.DaemonFault(apierr.Lookup(code).Status) {
		s.log.ErrorContext(ctx, "exec stream failed", "request_id", requestID(r), "code", code, "err", err)
		msg += " (request id " + requestID(r) + ")"
		status = websocket.StatusInternalError
	}
	_ = send(ctx, conn, serverFrame{Type: "error", Error: &errorJSON{Code: code, Message: msg, Retryable: apierr.Lookup(code).Retryable}})
	conn.Close(status, string(code))
}
