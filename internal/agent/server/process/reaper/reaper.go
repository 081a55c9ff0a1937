package reaper

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Exit is how a child ended, as wait4 reported it.
type Exit = unix.WaitStatus

// Reaper reaps every child of the calling process and delivers the exit
// status of children started through [Reaper.Start] to their starters. Use
// it only in a process that should adopt orphans: PID 1, or a process that
// made itself a child subreaper. Create it with [New] and run [Reaper.Run].
type Reaper struct {
	log *slog.Logger

	mu      sync.Mutex
	waiting map[int]chan Exit // tracked children not yet reaped
}

// New returns a Reaper that logs to log (nil discards).
func New(log *slog.Logger) *Reaper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reaper{log: log, waiting: make(map[int]chan Exit)}
}

// Start calls start, which must fork exactly one child and return its pid,
// while holding the reap lock, and returns a channel that receives the
// child's status once it has been reaped. A start error is returned as is
// and nothing is registered.
func (r *Reaper) Start(start func() (int, error)) (<-chan Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan Exit, 1)
	r.waiting[pid] = ch
	return ch, nil
}

// Run reaps children whenever SIGCHLD arrives (and once at the start, for
// children that exited before Run) until ctx ends. It returns nil when ctx
// ends; a wait4 failure other than "no children" is logged, not fatal.
func (r *Reaper) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	defer signal.Stop(sigs)
	for {
		r.reap()
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		}
	}
}

// reap collects every child that has exited. SIGCHLD does not queue, so one
// signal may stand for many exits: loop until wait4 finds none.
func (r *Reaper) reap() {
	for r.reapOne() {
	}
}

// reapOne reaps one exited child, if there is one, and reports whether to
// look for another. It takes the lock for each child rather than for the
// whole batch: under a fork bomb the batch never ends, and Start, which
// holds the lock across a fork, would wait for it forever.
func (r *Reaper) reapOne() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD), err == nil && pid == 0:
			return false
		case err != nil:
			r.log.Error("reaper: wait4", "err", err)
			return false
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws // buffered, never blocks
			return true
		}
		r.log.Debug("reaper: reaped orphan", "pid", pid, "status", ws)
		return true
	}
}

// Own waits only for the children started through it. It is for processes
// that are not PID 1. The zero value is ready to use.
type Own struct{}

// Start calls start, which must fork exactly one child and return its pid,
// and returns a channel that receives the child's status once it exited.
func (Own) Start(start func() (int, error)) (<-chan Exit, error) {
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan Exit, 1)
	go func() {
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				// ECHILD: someone else reaped it, which breaks the contract
				// above; report a kill rather than hang forever.
				ws = unix.WaitStatus(unix.SIGKILL)
			}
			ch <- ws
			return
		}
	}()
	return ch, nil
}
