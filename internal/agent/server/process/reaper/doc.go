// Package reaper waits for child processes, in the two situations the agent
// runs in.
//
// As PID 1 of a sandbox the agent inherits every orphan in the container:
// a daemonised grandchild whose parent exited is re-parented to PID 1, and
// it stays a zombie until PID 1 waits for it. [Reaper] does that: on every
// SIGCHLD it calls wait4(-1, WNOHANG) until no exited child remains.
//
// Reaping with wait4(-1) takes every child's exit status, including the
// children the agent started on purpose and wants the status of. Two
// designs keep those statuses: reap only untracked pids (peeking with
// waitid(WNOWAIT) first), or have one reaper own every wait and hand the
// statuses of tracked children to whoever started them. The first cannot
// see past a tracked zombie that its owner has not collected yet, so we use
// the second. The one race it has to close is a child that exits, and is
// reaped, before its starter has registered its pid: [Reaper.Start] runs the
// fork with the reaper's lock held and registers the pid before releasing
// it, and the reap loop takes the same lock, so a status is never looked up
// before its pid is known. Nothing else in the process may wait for
// children (no exec.Cmd.Wait, no os.Process.Wait): their statuses belong to
// the reaper.
//
// A process that is not PID 1 (unit tests, a development run on a host)
// must not reap children it did not start; [Own] waits for exactly the
// children started through it with wait4(pid), one goroutine each.
//
// Both implement the same Start contract, which package process consumes.
package reaper
