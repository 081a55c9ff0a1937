package main

import "golang.org/x/sys/unix"

// undumpable makes the agent non-dumpable (prctl PR_SET_DUMPABLE 0). Root
// in a sandbox shares the agent's user and capabilities, so by the
// kernel's ptrace rules it could attach to PID 1, read and write its
// memory (/proc/1/mem: the agent token, every request in flight) and read
// /proc/1/environ; the sandbox has no CAP_SYS_PTRACE, and a process that
// is not dumpable may only be traced or inspected by one that has it. Its
// /proc/1 files become root's and refuse ptrace-mode access alike. The
// agent's own hold of each child at its exec (oom.go) is unaffected: the
// child asks to be traced (PTRACE_TRACEME), and an exec makes the child
// dumpable again; a process is still traced by its own parent. (gVisor
// refuses that TRACEME: the agent does not hold children there, see run.)
// yama's
// ptrace_scope would also do, but it is the host's setting, not ours.
func undumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
