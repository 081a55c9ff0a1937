package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// A boot runs the OCI runtime's `run --detach` on the sandbox's bundle.
// The OCI runtime exits once the container's init (the agent) runs: no
// shim, no monitor, nothing of the sandbox's stays on the host but its own
// processes. The agent's stdout and stderr are the file output.log in the
// sandbox's directory (on its subvolume, under its disk limit), truncated
// at every boot. The agent gets its socket from the daemon over the
// handoff socket, as under the Docker runtime (package agent/handoff).
//
// This process is a child subreaper: when the OCI runtime exits, the
// agent it started becomes this process's child, and the reaper
// (startReaper) collects its exit status into state.json. A sandbox
// whose agent exits while no daemon is its parent (the daemon restarted
// in between) is reaped by the host's init: its exit code is unknown.

// boot starts the sandbox's container and returns once its agent
// answers. The caller holds the sandbox's lock.
func (r *Runtime) boot(ctx context.Context, id string, meta *sandboxMeta) error {
	return r.launch(ctx, id, meta, "")
}

// launch is boot, or, with image set, the restore of the checkpoint
// image in that directory (checkpoint.go): the same bundle, the same
// records, the output appended to rather than truncated.
func (r *Runtime) launch(ctx context.Context, id string, meta *sandboxMeta, image string) error {
	dir := r.sandboxDir(id)
	gvisor := meta.Isolation == runtime.IsolationGVisor
	if gvisor {
		if err := r.checkTmpBind(id); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
	}
	// A restored agent has its token in its memory: none is handed.
	var token []byte
	if image == "" {
		var err error
		if token, err = r.readAgentToken(id); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
	}
	var b *bootSockets
	if !gvisor {
		var err error
		if b, err = prepareBoot(r.SocketDir(id)); err != nil {
			return err
		}
		defer b.close()
	} else {
		// No handoff under gVisor: the token goes in a file of the
		// socket directory, written while nothing of the sandbox runs,
		// which the agent removes before it serves (never beside a
		// restored sandbox, whose processes run at once).
		sockDir := r.SocketDir(id)
		var err error
		if len(token) > 0 {
			err = handoff.WriteTokenFile(sockDir, token)
		} else {
			err = handoff.RemoveTokenFile(sockDir)
		}
		if err != nil {
			return fmt.Errorf("boot: %w", err)
		}
		defer func() {
			if err := handoff.RemoveTokenFile(sockDir); err != nil {
				r.log.Warn("agent token file", "sandbox", id, "err", err)
			}
		}()
	}
	outFlags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC | os.O_APPEND
	if image != "" {
		outFlags &^= os.O_TRUNC
	}
	out, err := os.OpenFile(filepath.Join(r.rwDir(id), "output.log"), outFlags, 0o600)
	if errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.ENOSPC) {
		// The sandbox filled its disk: it boots all the same, its
		// output going nowhere (it could not be kept anyway).
		r.log.Warn("a sandbox's disk is full: its output is not kept", "sandbox", id)
		_ = os.Remove(filepath.Join(r.rwDir(id), "output.log"))
		out, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if err != nil {
		return noSpace(fmt.Errorf("output file: %w", err))
	}
	defer out.Close()
	logPath := filepath.Join(dir, "runtime.log")
	_ = os.Remove(logPath)
	pidPath := filepath.Join(dir, "pid")
	_ = os.Remove(pidPath)
	// Until watch has it: an agent that exits at once is the reaper's
	// (its exit code), not a stray.
	booting.add(pidPath)
	defer booting.remove(pidPath)
	args := r.globalArgs(meta, logPath)
	unstage := func() {}
	if image != "" {
		// A sealed image is opened for runsc, in memory, until it has
		// it (seal.go): the restore holds its file open once it returns.
		staged, done, err := r.stageImage(id, image)
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		defer done()
		image, unstage = staged, done
	}
	if image != "" {
		args = append(args, "restore", "--image-path", image, "--detach", "--bundle", dir, "--pid-file", pidPath, id)
	} else {
		args = append(args, "run", "--detach", "--bundle", dir, "--pid-file", pidPath, id)
	}
	cmd := exec.CommandContext(ctx, r.binaryOf(meta), args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = dir
	// Its own process group: a signal to the daemon's group (a terminal's
	// ^C) does not reach the sandboxes. It dies with this process: a
	// start the daemon was killed during must not complete behind the
	// next daemon's back, which finds the sandbox without a run and
	// removes it, and would leave its agent running in a cgroup of a
	// sandbox nothing lists. The container it started, once it returned,
	// is not its child by then and runs on (the death signal is not
	// inherited).
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	err = runTracked(cmd)
	unstage()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("start: %w", cerr)
		}
		return fmt.Errorf("start: %s %s: %w: %s", filepath.Base(r.binaryOf(meta)), map[bool]string{false: "run", true: "restore"}[image != ""], err, tail(logPath, 1024))
	}
	pidText, err := os.ReadFile(pidPath)
	if err != nil {
		return fmt.Errorf("start: the pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("start: the pid file holds %q", pidText)
	}
	startTicks, _, err := procStat(pid)
	if err != nil {
		// Already gone: it exited at once. Readiness below says so.
		startTicks = 0
	}
	st := runState{Pid: pid, PidStart: startTicks, StartedAt: time.Now().UTC()}
	mu := r.stateMu(id)
	mu.Lock()
	err = r.writeState(id, st)
	mu.Unlock()
	if err != nil {
		return noSpace(fmt.Errorf("start: record the run: %w", err))
	}
	// gone is closed once the reaper collected the agent's exit: a wait
	// for its handoff ends then, not at the readiness deadline.
	gone := make(chan struct{})
	watch(pid, func(ws unix.WaitStatus) {
		r.exited(id, pid, ws)
		close(gone)
	})
	if err := r.step("started"); err != nil {
		return err
	}
	var handed chan struct{}
	if image != "" {
		// The restored agent is parked (checkpoint.go): wake it (its
		// old socket's file is gone already: restoreFrom).
		if err := r.wake(ctx, meta); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	if b != nil {
		handed = make(chan struct{})
		offerCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() {
			err := handoff.Offer(offerCtx, b.ln, b.sock, pid, token, func(peer int) {
				r.log.Warn("agent socket handoff refused to a process other than the sandbox's agent", "sandbox", id, "peer_pid", peer, "agent_pid", pid)
			})
			if err == nil {
				close(handed)
			} else if offerCtx.Err() == nil {
				r.log.Warn("agent socket handoff", "sandbox", id, "err", err)
			}
		})
	}
	return r.awaitAgent(ctx, id, handed, gone)
}

// agentTokenName is the file, in the sandbox's directory (host only,
// 0600), that keeps its agent token for every boot: the token is not in
// config.json's environment, where the agent's /proc/1/environ would
// show it and the agent had to execute itself again to hide it.
const agentTokenName = "agent.token"

// writeAgentToken records the sandbox's agent token (Create).
func (r *Runtime) writeAgentToken(id, token string) error {
	return os.WriteFile(filepath.Join(r.sandboxDir(id), agentTokenName), []byte(token), 0o600)
}

// readAgentToken is the sandbox's agent token; nil for a sandbox created
// before it was kept here (its config.json's environment carries it, and
// its agent takes it from there: cmd/toolboxd's token.go).
func (r *Runtime) readAgentToken(id string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(r.sandboxDir(id), agentTokenName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the agent token: %w", err)
	}
	if len(b) > handoff.MaxToken {
		return nil, fmt.Errorf("the agent token: %d bytes", len(b))
	}
	return b, nil
}

// globalArgs are the OCI runtime's options before its command.
func (r *Runtime) globalArgs(meta *sandboxMeta, logPath string) []string {
	iso := meta.Isolation
	args := []string{"--root", r.stateRoot(meta)}
	if logPath != "" {
		args = append(args, "--log", logPath)
	}
	if iso == runtime.IsolationGVisor {
		// As scripts/setup-gvisor.sh registers runsc with the engine.
		args = append(args, "--platform=ptrace", "--network=none", "--host-uds=create")
	}
	return args
}

// ociRun runs one command of the OCI runtime; its output is in the error.
func (r *Runtime) ociRun(ctx context.Context, meta *sandboxMeta, args ...string) error {
	cmd := exec.CommandContext(ctx, r.binaryOf(meta), append(r.globalArgs(meta, ""), args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runTracked(cmd); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(r.binaryOf(meta)), args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// ociKnows reports whether the OCI runtime has state for the sandbox.
func (r *Runtime) ociKnows(ctx context.Context, meta *sandboxMeta) bool {
	_, err := os.Stat(filepath.Join(r.stateRoot(meta), meta.ID))
	return err == nil
}

// exited records the exit of the sandbox's agent pid, which the reaper
// collected.
func (r *Runtime) exited(id string, pid int, ws unix.WaitStatus) {
	mu := r.stateMu(id)
	mu.Lock()
	defer mu.Unlock()
	st := r.readState(id)
	if st.Pid != pid {
		return
	}
	st.Exited = true
	switch {
	case ws.Exited():
		st.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		st.ExitCode = 128 + int(ws.Signal())
	}
	st.OOMKilled = r.oomKilled(id)
	if st.FinishedAt.IsZero() {
		st.FinishedAt = time.Now().UTC()
	}
	if err := r.writeState(id, st); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("record a sandbox's exit", "sandbox", id, "err", err)
	}
}

// stateMu serializes the read-modify-writes of one sandbox's state.json
// (boot, Stop and the reaper), and of no other (lock.go). One set per
// process: tests run several Runtimes on one directory.
func (r *Runtime) stateMu(id string) *idLock { return stateMus.of(id) }

var stateMus keyedLocks

// tail is the end of a file, at most n bytes, trimmed; "" when unreadable.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	nr, _ := f.ReadAt(b, off)
	s := strings.TrimSpace(string(b[:nr]))
	if off > 0 {
		s = "…" + s
	}
	return s
}

// The reaper: one per process.
var reaper struct {
	once sync.Once
	err  error
	mu   sync.Mutex
	pids map[int]func(unix.WaitStatus)
	// passes counts the reaper's passes (tests).
	passes atomic.Int64
}

// startReaper makes this process a child subreaper and starts the
// goroutine that collects the exits of the pids watched. It waits only
// for those pids, never for any child: os/exec's children stay theirs.
func startReaper() error {
	reaper.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reaper.err = fmt.Errorf("become a child subreaper: %w", err)
			return
		}
		reaper.pids = map[int]func(unix.WaitStatus){}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, unix.SIGCHLD)
		go func() {
			// SIGCHLD is coalesced; the tick covers a signal that came
			// while a pid was being added.
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ch:
				case <-t.C:
				}
				reapWatched()
			}
		}()
	})
	return reaper.err
}

// watch has the reaper collect pid's exit and call fn with its status.
func watch(pid int, fn func(unix.WaitStatus)) {
	reaper.mu.Lock()
	reaper.pids[pid] = fn
	reaper.mu.Unlock()
	reapWatched()
}

func reapWatched() {
	reaper.mu.Lock()
	var done []func()
	for pid, fn := range reaper.pids {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case got == pid:
			delete(reaper.pids, pid)
			done = append(done, func() { fn(ws) })
		case errors.Is(err, unix.ECHILD):
			// Not our child yet: the OCI runtime's process that
			// started it may still be exiting, and hands it to this
			// subreaper when it does. Gone altogether: someone else
			// reaped it.
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, os.ErrNotExist) {
				delete(reaper.pids, pid)
			}
		}
	}
	reaper.mu.Unlock()
	for _, f := range done {
		f()
	}
	reapStrays()
	reaper.passes.Add(1)
}

// The OCI runtime's commands this process runs and waits for itself
// (runTracked): the reaper leaves them to os/exec.
var execs struct {
	mu   sync.Mutex
	pids map[int]bool
}

// runTracked runs cmd, an OCI runtime command, as cmd.Run does.
func runTracked(cmd *exec.Cmd) error {
	execs.mu.Lock()
	err := cmd.Start()
	if err == nil {
		if execs.pids == nil {
			execs.pids = map[int]bool{}
		}
		execs.pids[cmd.Process.Pid] = true
	}
	execs.mu.Unlock()
	if err != nil {
		return err
	}
	err = cmd.Wait()
	execs.mu.Lock()
	delete(execs.pids, cmd.Process.Pid)
	execs.mu.Unlock()
	return err
}

// reapStrays reaps the zombies among this process's children that
// nothing in this process waits for: the processes the OCI runtime's
// commands left behind (runsc's gofer and the helpers its commands
// re-execute, crun's), handed to this subreaper when the command that
// started them exited. A child is someone else's while
//
//   - os/exec waits for it: every process os/exec (os.StartProcess)
//     starts holds a pidfd in this process from its start until its Wait
//     reaped it (Go's own bookkeeping since 1.23), and runTracked's are
//     listed besides (execs);
//   - the reaper waits for it, with a callback (an agent: watch), or
//     will: an agent whose boot is under way, in its pid file (booting).
//
// Every other zombie child is an orphan this process became the parent
// of as a subreaper, whatever its name. Each is reaped through a pidfd
// opened after checking that the pid still has the start time it had
// when seen a zombie (a pid reused since is not reaped). Where the kernel
// gives os/exec no pidfds, nothing is reaped here: its children could
// not be told apart.
func reapStrays() {
	type zombie struct {
		pid   int
		start uint64
	}
	var zombies []zombie
	execs.mu.Lock()
	tasks, _ := os.ReadDir("/proc/self/task")
	seen := map[int]bool{}
	for _, t := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || seen[pid] || execs.pids[pid] {
				continue
			}
			seen[pid] = true
			if start, state, err := procStat(pid); err == nil && state == 'Z' {
				zombies = append(zombies, zombie{pid, start})
			}
		}
	}
	execs.mu.Unlock()
	if len(zombies) == 0 || !execPidfds() {
		return
	}
	// After the zombies, in this order: an agent whose boot is under way
	// is in its pid file (booting) until the boot has it watched.
	starting := booting.pids()
	reaper.mu.Lock()
	agents := maps.Clone(reaper.pids)
	reaper.mu.Unlock()
	zombies = slices.DeleteFunc(zombies, func(z zombie) bool {
		_, watched := agents[z.pid]
		return watched || starting[z.pid]
	})
	held := pidfdPids()
	for _, z := range zombies {
		if held[z.pid] {
			continue // os/exec's (or a caller's) to wait for
		}
		fd, err := unix.PidfdOpen(z.pid, 0)
		if err != nil {
			continue
		}
		if start, state, err := procStat(z.pid); err == nil && state == 'Z' && start == z.start {
			var info unix.Siginfo
			_ = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
		}
		unix.Close(fd)
	}
}

// booting are the pid files of the boots under way (boot): the pids in
// them are agents about to be watched, never strays.
var booting = bootingSet{paths: map[string]int{}}

type bootingSet struct {
	mu    sync.Mutex
	paths map[string]int
}

func (b *bootingSet) add(path string) {
	b.mu.Lock()
	b.paths[path]++
	b.mu.Unlock()
}

func (b *bootingSet) remove(path string) {
	b.mu.Lock()
	if b.paths[path]--; b.paths[path] <= 0 {
		delete(b.paths, path)
	}
	b.mu.Unlock()
}

// pids are the pids the boots' pid files hold so far.
func (b *bootingSet) pids() map[int]bool {
	b.mu.Lock()
	paths := slices.Collect(maps.Keys(b.paths))
	b.mu.Unlock()
	out := map[int]bool{}
	for _, p := range paths {
		if text, err := os.ReadFile(p); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(text))); err == nil && pid > 0 {
				out[pid] = true
			}
		}
	}
	return out
}

// execPidfds reports whether os/exec's children have pidfds here
// (CLONE_PIDFD: Linux 5.2), which tells them from strays.
var execPidfds = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// pidfdPids are the pids that pidfds open in this process refer to.
func pidfdPids() map[int]bool {
	out := map[int]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || link != "anon_inode:[pidfd]" {
			continue
		}
		info, _ := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		for line := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
					out[pid] = true
				}
			}
		}
	}
	return out
}

// pidHandle is a live process, held by a pidfd: signals reach exactly it.
type pidHandle struct {
	fd  int
	pid int
}

// livePid opens the run's agent if it is alive: the pid exists, is not a
// zombie, and started when the run recorded (not a reused pid).
func livePid(st runState) (*pidHandle, bool) {
	if st.Pid <= 0 {
		return nil, false
	}
	fd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return nil, false
	}
	start, state, err := procStat(st.Pid)
	if err != nil || state == 'Z' || state == 'X' || (st.PidStart != 0 && start != st.PidStart) {
		unix.Close(fd)
		return nil, false
	}
	return &pidHandle{fd: fd, pid: st.Pid}, true
}

func (p *pidHandle) close() { unix.Close(p.fd) }

func (p *pidHandle) signal(sig unix.Signal) error {
	return unix.PidfdSendSignal(p.fd, sig, nil, 0)
}

// waitExit waits until the process exits (its pidfd turns readable), d
// passes or ctx ends; it reports whether the process exited.
func (p *pidHandle) waitExit(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
	}
}

// procStat reads a process's start time (clock ticks after boot) and
// state letter from /proc.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22 overall
	return start, f[0][0], err
}

// bootSockets is one handoff of a fresh agent socket (the Docker
// runtime's boot, boot.go there).
type bootSockets struct {
	sock *os.File
	ln   *net.UnixListener
}

// prepareBoot replaces the sockets an earlier run left in the socket
// directory with a fresh agent socket and a handoff listener.
func prepareBoot(dir string) (*bootSockets, error) {
	sock, ln, err := handoff.Prepare(filepath.Join(dir, runtime.AgentSocketName), filepath.Join(dir, runtime.AgentHandoffName))
	if err != nil {
		return nil, err
	}
	return &bootSockets{sock: sock, ln: ln}, nil
}

func (b *bootSockets) close() {
	b.ln.Close()
	b.sock.Close()
}

// mayLowerOOMScores reports whether this process holds CAP_SYS_RESOURCE,
// which an oom_score_adj below zero takes (the Docker runtime's rule).
func mayLowerOOMScores() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const bit = unix.CAP_SYS_RESOURCE
	return data[bit/32].Effective&(1<<(bit%32)) != 0
}
