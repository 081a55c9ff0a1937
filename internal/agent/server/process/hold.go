package process

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// A child can be held at the exec of its program, before its first
// instruction, so that what Options.AtExec sets on it (toolboxd: its
// oom_score_adj) holds for everything it will ever fork. Go has no hook
// between fork and exec, and a write after the start loses the race about
// one time in ten: a shell can fork before the agent's goroutine runs
// again. So the child is started traced (PTRACE_TRACEME, which Go does
// right before exec); the kernel stops it with SIGTRAP once the exec
// succeeded; the agent waits for that stop, calls AtExec, and detaches,
// dropping the SIGTRAP. The tracer is the thread that forked, so the
// start runs on a locked thread.
//
// A traced exec does not honour setuid, setgid or file capabilities, so
// programs that carry one (sudo) are not held; AtExec runs for them right
// after the start.

// holdable reports whether the program at path may be started held.
func holdable(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return true // the exec fails; holding changes nothing
	}
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return false
	}
	_, err := unix.Getxattr(path, "security.capability", nil)
	return err != nil
}

// atExecStart wraps startCmd, which starts cmd, so that atExec runs on the
// child before its program does (see above); without atExec it is
// startCmd.
func atExecStart(cmd *exec.Cmd, atExec func(pid int), startCmd func() error) func() error {
	if atExec == nil {
		return startCmd
	}
	if !holdable(cmd.Path) {
		return func() error {
			if err := startCmd(); err != nil {
				return err
			}
			atExec(cmd.Process.Pid)
			return nil
		}
	}
	cmd.SysProcAttr.Ptrace = true
	return func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := startCmd(); err != nil {
			return err
		}
		return release(cmd.Process.Pid, atExec)
	}
}

// release waits for the held child pid to stop at its exec, runs atExec
// and lets the child run. A child that died first has been reaped here,
// and the error says so.
func release(pid int, atExec func(pid int)) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the child at its exec: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		return fmt.Errorf("the child ended before its program ran (%v)", ws)
	}
	atExec(pid)
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL) // never leave it stopped
		return fmt.Errorf("release the child: %w", err)
	}
	return nil
}
