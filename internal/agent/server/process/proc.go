package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// launch is everything needed to start one process.
type launch struct {
	config *rpc.ProcessConfig // as requested, for List
	tag    *string
	path   string
	args   []string
	env    []string
	dir    string
	cred   *syscall.Credential // nil: run as the agent's own user
	pty    *rpc.PTY            // nil: pipes
	stdin  bool                // keep a stdin pipe (ignored with a PTY)
	// logAs is the source of the process's lines in the sandbox's log:
	// "" names it by pid ("pid-N"); logOff keeps it out of the log.
	logAs string
}

// proc is one started process: its I/O, its subscribers and its fate.
type proc struct {
	pid    uint32
	seq    uint64 // start order, for deterministic tag lookup
	config *rpc.ProcessConfig
	tag    *string
	hub    *hub
	// done is closed once the end event has been published.
	done chan struct{}

	process *os.Process
	tty     *os.File   // PTY master; nil for pipe processes
	outputs []*os.File // read ends the readers own
	readers sync.WaitGroup

	inMu  sync.Mutex // serialises input writes and guards stdin
	stdin *os.File   // write end; nil when disabled or closed

	// mu guards reaped: once the process has been reaped its pid (and so
	// its process group id) may belong to someone else, so no signal may
	// be sent after that.
	mu       sync.Mutex
	reaped   bool
	lifetime *time.Timer
}

// waiter starts a child and reports its exit; see package reaper.
type waiter interface {
	Start(start func() (int, error)) (<-chan reaper.Exit, error)
}

// start launches l through w and starts the output readers. The process
// runs in a process group of its own (a session, with a PTY) whose id is
// its pid, so that signals reach the commands it runs. h must already hold
// the subscribers that should see all output. On error nothing is left
// running and every descriptor is closed.
func start(w waiter, l launch, h *hub, atExec func(pid int)) (*proc, <-chan reaper.Exit, error) {
	cmd := exec.Command(l.path, l.args...)
	cmd.Env = l.env
	cmd.Dir = l.dir
	p := &proc{config: l.config, tag: l.tag, hub: h, done: make(chan struct{})}

	var childEnds []*os.File // closed in the parent once the child has them
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	var (
		exits <-chan reaper.Exit
		err   error
	)
	if l.pty != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.cred} // pty adds Setsid, Setctty
		size := &pty.Winsize{Cols: uint16(l.pty.GetSize().GetCols()), Rows: uint16(l.pty.GetSize().GetRows())}
		startPTY := atExecStart(cmd, atExec, func() (err error) {
			p.tty, err = pty.StartWithSize(cmd, size)
			return err
		})
		exits, err = w.Start(func() (int, error) {
			if err := startPTY(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		if err != nil {
			if p.tty != nil { // the terminal opened, the child did not run
				p.tty.Close()
			}
			return nil, nil, startError(l.path, err)
		}
		p.tty = pollable(p.tty)
		p.outputs = []*os.File{p.tty}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.cred, Setpgid: true}
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{outR, outW})
			return nil, nil, err
		}
		parentEnds := []*os.File{outR, errR}
		childEnds = []*os.File{outW, errW}
		cmd.Stdout, cmd.Stderr = outW, errW
		if l.stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				closeAll(append(parentEnds, childEnds...))
				return nil, nil, err
			}
			cmd.Stdin, p.stdin = inR, inW
			childEnds = append(childEnds, inR)
			parentEnds = append(parentEnds, inW)
		}
		startCmd := atExecStart(cmd, atExec, cmd.Start)
		exits, err = w.Start(func() (int, error) {
			if err := startCmd(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		closeAll(childEnds)
		if err != nil {
			closeAll(parentEnds)
			return nil, nil, startError(l.path, err)
		}
		p.outputs = []*os.File{outR, errR}
	}
	p.process = cmd.Process
	p.pid = uint32(cmd.Process.Pid)
	if h.book != nil { // before the readers start: they read it unlocked
		switch l.logAs {
		case logOff:
			h.book = nil
		case "":
			h.source = fmt.Sprintf("pid-%d", p.pid)
		default:
			h.source = l.logAs
		}
	}

	if p.tty != nil {
		p.readers.Go(func() { readOutput(p.tty, streamPTY, ptyChunk, h) })
	} else {
		p.readers.Go(func() { readOutput(p.outputs[0], streamStdout, pipeChunk, h) })
		p.readers.Go(func() { readOutput(p.outputs[1], streamStderr, pipeChunk, h) })
	}
	return p, exits, nil
}

// limit kills the process group after d; zero means no limit. This is the
// process lifetime that envd derives from Connect-Timeout-Ms.
func (p *proc) limit(d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifetime = time.AfterFunc(d, func() { _ = p.signal(unix.SIGKILL) })
}

// wait blocks until the process has been reaped and its output read, then
// publishes the end event. After the process exits, its output is read
// until EOF for at most grace; a descendant that still holds the pipes or
// the terminal open after that is cut off (what is already buffered is
// still delivered) so that the end event is never held hostage.
func (p *proc) wait(exits <-chan reaper.Exit, grace time.Duration) {
	ws := <-exits
	p.mu.Lock()
	p.reaped = true
	if p.lifetime != nil {
		p.lifetime.Stop()
	}
	p.mu.Unlock()

	read := make(chan struct{})
	go func() { p.readers.Wait(); close(read) }()
	t := time.NewTimer(grace)
	select {
	case <-read:
		t.Stop()
	case <-t.C:
		for _, f := range p.outputs {
			cutOutput(f)
		}
		<-read
	}
	for _, f := range p.outputs {
		f.Close()
	}
	p.inMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.inMu.Unlock()
	_ = p.process.Release()

	p.hub.finish(endEvent(ws))
	close(p.done)
}

// endEvent describes ws the way envd (and so os/exec) does.
func endEvent(ws reaper.Exit) *rpc.ProcessEvent {
	end := &rpc.ProcessEvent_EndEvent{ExitCode: int32(ws.ExitStatus()), Exited: ws.Exited()}
	switch {
	case ws.Exited():
		end.Status = fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		end.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			end.Status += " (core dumped)"
		}
	default:
		end.Status = fmt.Sprintf("wait status %#x", uint32(ws))
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		end.Error = &end.Status
	}
	return &rpc.ProcessEvent{Event: &rpc.ProcessEvent_End{End: end}}
}

// signal sends sig to the process's group. After the process has been
// reaped it does nothing: the process is gone, and its pid may be reused.
func (p *proc) signal(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if err := unix.Kill(-int(p.pid), sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d to process group %d: %w", sig, p.pid, err)
	}
	return nil
}

// write sends b to the process's stdin, or to its terminal when pty is set.
// A write blocked on a full pipe gives up when ctx ends.
func (p *proc) write(ctx context.Context, b []byte, toPTY bool) error {
	if toPTY != (p.tty != nil) {
		if toPTY {
			return fmt.Errorf("%w: process %d has no terminal; send stdin", ErrNotPTY, p.pid)
		}
		return fmt.Errorf("%w: process %d has a terminal; send pty input", ErrNotPTY, p.pid)
	}
	// Writes are serialised so that a deadline set to abandon one write
	// never leaks into the next.
	p.inMu.Lock()
	defer p.inMu.Unlock()
	f := p.stdin
	if toPTY {
		f = p.tty
	}
	if f == nil {
		return fmt.Errorf("%w: stdin of process %d is disabled or closed", ErrNoInput, p.pid)
	}
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := f.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ctx.Err()
		}
		return fmt.Errorf("%w: write to process %d: %v", ErrNoInput, p.pid, err)
	}
	return nil
}

// closeStdin closes the stdin pipe so the process reads EOF. It is
// idempotent; a PTY process has no separate stdin (send Ctrl-D instead).
func (p *proc) closeStdin() error {
	if p.tty != nil {
		return fmt.Errorf("%w: process %d has a terminal; send Ctrl-D (0x04) as pty input", ErrNotPTY, p.pid)
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

// resize sets the terminal size.
func (p *proc) resize(size *rpc.PTY_Size) error {
	if p.tty == nil {
		return fmt.Errorf("%w: process %d has no terminal", ErrNotPTY, p.pid)
	}
	// Through the poller's descriptor, never (*os.File).Fd (pty.Setsize),
	// which would put the master back in blocking mode (see pollable).
	rc, err := p.tty.SyscallConn()
	if err != nil {
		return err
	}
	ws := &unix.Winsize{Col: uint16(size.GetCols()), Row: uint16(size.GetRows())}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	return ierr
}

// pollable returns a terminal's master as a file of the runtime's poller
// (f itself, should that fail). creack/pty's ioctls call (*os.File).Fd,
// which leaves the master in blocking mode: a read then blocks in the
// kernel, where no deadline reaches it, and [cutOutput] cannot end it. The
// read ends by itself (EIO) only once every holder of the terminal closed
// it, which a descendant in a session of its own (setsid) may never do,
// and gVisor's master never reports at all: the end event waited for ever.
func pollable(f *os.File) *os.File {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	nfd := -1
	_ = rc.Control(func(fd uintptr) {
		if d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
			nfd = d
		}
	})
	if nfd < 0 {
		return f
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return f
	}
	f.Close()
	return os.NewFile(uintptr(nfd), f.Name()) // non-blocking: NewFile registers it with the poller
}

func (p *proc) info() *rpc.ProcessInfo {
	return &rpc.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}
