package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
)

// The agent must outlive whatever runs beside it: when it dies, PID 1
// dies, the sandbox with it. Two things have killed it: the OOM killer
// (the agent is often the largest process of a small sandbox) and the pids
// limit (under a fork bomb the Go runtime fails to start a thread and
// aborts). So every process the agent starts runs 1000 points of
// oom_score_adj above the agent, set while the child is held at its exec
// (process.Options.AtExec) so that all its descendants inherit it, and the
// agent keeps a few threads in reserve.
//
// Where the engine may lower scores (a root daemon on an ordinary host),
// the runtime starts the agent at -1000, which the OOM killer never takes,
// and its children run at 0. Where it may not (no CAP_SYS_RESOURCE, as in
// some VMs, this project's test machines among them), the agent runs at 0
// and its children at +1000: within the sandbox's memory cgroup the order
// is the same, and on the host a sandbox's processes go first. Either way
// a process may lower its own score back to the agent's (the kernel allows
// any process the lowest score its ancestors were given by a privileged
// writer): code that does so on purpose can only hurt its own sandbox.

// oomUnkillable is the oom_score_adj that exempts a process from the OOM
// killer; oomNearly is the lowest that does not; oomMax is the highest.
const (
	oomUnkillable = -1000
	oomNearly     = -999
	oomMax        = 1000
)

// waiter starts a child and reports its exit; see package reaper.
type waiter interface {
	Start(start func() (int, error)) (<-chan reaper.Exit, error)
}

// oomGuard is the waiter of a privileged agent (at -1000): a child
// inherits its parent's score at fork, so the agent lowers its guard to
// -999 (an OOM victim only when nothing else can be: -999 discounts all of
// the sandbox's memory) for each fork and restores -1000 after it. No
// child is born immune, even one that is not held at its exec (see
// childScore).
type oomGuard struct {
	inner waiter
	log   *slog.Logger
	mu    sync.Mutex // one fork at a time: the agent's score is process-wide
	self  *os.File   // /proc/self/oom_score_adj
}

// guardOOM returns the waiter to start children through (w, or w wrapped
// in an oomGuard when the agent runs at -1000) and the function that sets
// each child's score before its program runs (process.Options.AtExec): 1000
// above the agent's own, at most 1000.
func guardOOM(w waiter, log *slog.Logger) (waiter, func(pid int)) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	own, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		log.Warn("read the agent's oom_score_adj: children keep its score", "err", errors.Join(err, perr))
		return w, nil
	}
	child := []byte(strconv.Itoa(min(own+1000, oomMax)))
	atExec := func(pid int) {
		// A child that already exited has no score to set.
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), child, 0)
	}
	if own != oomUnkillable {
		return w, atExec
	}
	self, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		log.Warn("children not held at their exec may start unkillable", "err", err)
		return w, atExec
	}
	return &oomGuard{inner: w, log: log, self: self}, atExec
}

func (g *oomGuard) Start(start func() (int, error)) (<-chan reaper.Exit, error) {
	return g.inner.Start(func() (int, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.write(oomNearly)
		defer g.write(oomUnkillable)
		return start()
	})
}

func (g *oomGuard) write(score int) {
	if _, err := g.self.WriteString(strconv.Itoa(score)); err != nil {
		g.log.Warn("set the agent's oom_score_adj", "score", score, "err", err)
	}
}

// reservedThreads is how many idle OS threads the agent keeps for the Go
// runtime. Once a sandbox reaches its pids limit no new thread can start,
// and the runtime aborts when it needs one; it reuses idle threads first
// and never gives them back. A handful cover the agent's blocking calls;
// each costs one pid of the sandbox's limit.
const reservedThreads = 16

// reserveThreads makes the runtime start n threads now: n goroutines each
// hold one (LockOSThread) until all have one, then let go, leaving the
// threads idle for later.
func reserveThreads(n int) {
	var held sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		held.Add(1)
		done.Go(func() {
			runtime.LockOSThread()
			held.Done()
			<-release
			runtime.UnlockOSThread()
		})
	}
	held.Wait()
	close(release)
	done.Wait()
}
