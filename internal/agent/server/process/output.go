package process

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// Chunk sizes of data events, as envd uses them: a read returns at most
// one chunk, and each chunk becomes one event.
const (
	pipeChunk = 32 << 10
	ptyChunk  = 16 << 10
)

// stream names an output of a process.
type stream int

const (
	streamStdout stream = iota
	streamStderr
	streamPTY
)

func dataEvent(s stream, b []byte) *rpc.ProcessEvent {
	d := &rpc.ProcessEvent_DataEvent{}
	switch s {
	case streamStdout:
		d.Output = &rpc.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case streamStderr:
		d.Output = &rpc.ProcessEvent_DataEvent_Stderr{Stderr: b}
	case streamPTY:
		d.Output = &rpc.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &rpc.ProcessEvent{Event: &rpc.ProcessEvent_Data{Data: d}}
}

// readOutput publishes what f yields, one event per read, until EOF or an
// error (a PTY master reports EIO once the terminal's last holder closed
// it). f must be pollable (a pipe or a PTY master, as the os package opens
// them) so that [cutOutput] can stop it.
func readOutput(f *os.File, s stream, chunk int, h *hub) {
	for {
		buf := make([]byte, chunk)
		n, err := f.Read(buf)
		if n > 0 {
			h.publish(dataEvent(s, buf[:n]))
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drain(f, s, chunk, h)
		}
		return
	}
}

// cutOutput makes a blocked or future read of f return at once. The reader
// then drains what f already holds ([drain]) and stops: used when the
// process has exited but a descendant keeps its output open.
func cutOutput(f *os.File) { _ = f.SetReadDeadline(time.Now()) }

// drain publishes what f holds right now without waiting for more, so that
// cutting a reader off loses nothing the process wrote before the cut.
func drain(f *os.File, s stream, chunk int, h *hub) {
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		buf := make([]byte, chunk)
		var n int
		var rerr error
		// Returning true performs one non-blocking read and never waits.
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		h.publish(dataEvent(s, buf[:n]))
	}
}
