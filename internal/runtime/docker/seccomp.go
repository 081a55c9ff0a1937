package docker

import (
	"encoding/json"
	"sync"
)

// The sandboxes' seccomp profile (runc). It follows the rules of the
// engine's default profile, as Docker documents it (an allow list; what
// is not on it fails with EPERM; clone without namespace flags;
// personality for the usual personas only; every system call gated on a
// capability left out, since a sandbox never holds CAP_SYS_ADMIN,
// CAP_SYS_MODULE, CAP_SYS_TIME, CAP_SYS_PTRACE, CAP_SYS_RAWIO, CAP_SYS_BOOT,
// CAP_SYS_NICE, CAP_SYS_PACCT, CAP_SYSLOG, CAP_BPF, CAP_PERFMON or
// CAP_SYS_TTY_CONFIG: runtime.SandboxCapabilities), written here as Go
// data, less what a sandbox does not need:
//
//   - io_uring_setup, io_uring_enter, io_uring_register: a second system
//     call interface into the kernel that seccomp cannot look into, and a
//     long history of privilege escalations; nothing a sandbox runs needs
//     it (programs that can use it fall back to epoll and the
//     synchronous calls on EPERM).
//   - AF_VSOCK sockets: the host's vsock is no business of a container's;
//     and so socketcall, the 32-bit multiplexer through which a socket's
//     family cannot be checked (ENOSYS: the C library uses the direct calls).
//   - btrfs's own ioctls (type 0x94), but for the three that became the
//     generic reflink calls (FICLONE, FICLONERANGE, FIDEDUPERANGE, which cp
//     uses): on the engine's btrfs storage a sandbox's disk limit is the
//     qgroup of its container's subvolume, and a subvolume the sandbox
//     made itself (BTRFS_IOC_SUBVOL_CREATE needs no privilege) would be
//     counted by no qgroup. An ioctl of another type is allowed as before.
//
// What the engine's default also refuses, and so does this profile:
// userfaultfd (a favourite of kernel exploits: it stalls the kernel at a
// chosen page fault), the kernel keyring (add_key, keyctl, request_key:
// not namespaced), bpf and perf_event_open (kernel attack surface, host
// observation), kexec_load, kexec_file_load, reboot, the module calls,
// mount and the new mount API, umount, pivot_root, swapon/off, setns,
// unshare, clock and time setting, acct, quotactl, the handle calls
// (open_by_handle_at reads any file of a file system), ptrace-class
// memory policy calls (mbind, set_mempolicy, get_mempolicy, move_pages,
// migrate_pages), ioperm, iopl, vm86, lookup_dcookie, nfsservctl,
// syslog, vhangup, uselib, ustat, sysfs, _sysctl, fanotify_init and
// kcmp. clone3 answers ENOSYS, not EPERM: the C library then falls back
// to clone, which the profile can inspect (its flags are in registers,
// clone3's in memory).
//
// Under gVisor the profile is not passed: a sandbox's system calls never
// reach the host's kernel; runsc's sentry implements them in user space
// (io_uring too: TestSandbox_SeccompRefusesIOUring logs what it answers)
// and guards the host with its own filter, and the engine's runsc ignores
// an OCI profile unless started with --oci-seccomp.

// seccompAllowed are the system calls every sandbox may make, without
// conditions. Names a kernel or libseccomp does not know are skipped by
// the OCI runtime.
var seccompAllowed = []string{
	// Files and directories.
	"access", "chdir", "chmod", "chown", "chown32", "chroot", "close", "close_range", "copy_file_range",
	"creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate",
	"fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64",
	"fdatasync", "fgetxattr", "file_getattr", "file_setattr", "flistxattr", "flock", "fremovexattr",
	"fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
	"ftruncate64", "futimesat", "getcwd", "getdents", "getdents64", "getxattr", "getxattrat",
	"lchown", "lchown32", "lgetxattr", "link", "linkat", "listxattr", "listxattrat", "llistxattr",
	"_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "mkdir", "mkdirat", "mknod",
	"mknodat", "newfstatat", "open", "openat", "openat2", "pread64", "preadv", "preadv2", "pwrite64",
	"pwritev", "pwritev2", "read", "readahead", "readdir", "readlink", "readlinkat", "readv",
	"removexattr", "removexattrat", "rename", "renameat", "renameat2", "rmdir", "sendfile",
	"sendfile64", "setxattr", "setxattrat", "splice", "stat", "stat64", "statfs", "statfs64", "statx",
	"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "truncate64",
	"umask", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vmsplice",
	"write", "writev", "cachestat",
	// Asynchronous I/O (the old interface; its submissions are plain
	// reads and writes), polling, events and watches.
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_setup",
	"io_submit", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark",
	"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "poll", "ppoll",
	"ppoll_time64", "pselect6", "pselect6_time64", "select", "_newselect", "signalfd", "signalfd4",
	"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64",
	// Memory.
	"brk", "madvise", "membarrier", "memfd_create", "memfd_secret", "mincore", "mlock", "mlock2",
	"mlockall", "mmap", "mmap2", "mprotect", "mremap", "mseal", "msync", "munlock", "munlockall",
	"munmap", "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages", "map_shadow_stack",
	"process_madvise", "process_mrelease",
	// Processes, threads, signals, scheduling, limits and credentials.
	"capget", "capset", "execve", "execveat", "exit", "exit_group", "fork", "vfork", "futex",
	"futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "get_robust_list",
	"get_thread_area", "getcpu", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32",
	"getgroups", "getgroups32", "getitimer", "getpgid", "getpgrp", "getpid", "getppid", "getpriority",
	"getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "getrusage", "getsid",
	"gettid", "getuid", "getuid32", "ioprio_get", "ioprio_set", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "nice", "pause", "pidfd_getfd", "pidfd_open",
	"pidfd_send_signal", "prctl", "prlimit64", "process_vm_readv", "process_vm_writev", "ptrace",
	"restart_syscall", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
	"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
	"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
	"seccomp", "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid", "setfsgid32",
	"setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups", "setgroups32", "setitimer", "setpgid",
	"setpriority", "setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32",
	"setreuid", "setreuid32", "setrlimit", "setsid", "setuid", "setuid32", "sigaction", "sigaltstack",
	"signal", "sigpending", "sigprocmask", "sigreturn", "sigsuspend", "tgkill", "tkill", "ugetrlimit",
	"wait4", "waitid", "waitpid", "arch_prctl", "modify_ldt", "set_tls", "breakpoint", "cacheflush",
	"lsm_get_self_attr", "lsm_list_modules",
	// Time (reading it, timers and sleeping; setting the clock is the host's).
	"adjtimex", "alarm", "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
	"clock_nanosleep", "clock_nanosleep_time64", "gettimeofday", "nanosleep", "time", "timer_create",
	"timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64", "timer_settime",
	"timer_settime64", "times",
	// Sockets and IPC (socket itself is below, without AF_VSOCK).
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
	"recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg", "sendmsg",
	"sendto", "setsockopt", "shutdown", "socketpair", "pipe", "pipe2", "ipc", "msgctl",
	"msgget", "msgrcv", "msgsnd", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
	"mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "semctl", "semget",
	"semop", "semtimedop", "semtimedop_time64", "shmat", "shmctl", "shmdt", "shmget",
	// The system.
	"getrandom", "sethostname", "setdomainname", "sysinfo", "uname", "olduname",
	"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2",
}

// Engine seccomp profile JSON (the documented format of Docker's
// --security-opt seccomp=<file>).
type (
	seccompProfile struct {
		DefaultAction   string           `json:"defaultAction"`
		DefaultErrnoRet *uint            `json:"defaultErrnoRet,omitempty"`
		ArchMap         []seccompArch    `json:"archMap"`
		Syscalls        []seccompSyscall `json:"syscalls"`
	}
	seccompArch struct {
		Architecture     string   `json:"architecture"`
		SubArchitectures []string `json:"subArchitectures"`
	}
	seccompSyscall struct {
		Names    []string     `json:"names"`
		Action   string       `json:"action"`
		ErrnoRet *uint        `json:"errnoRet,omitempty"`
		Args     []seccompArg `json:"args,omitempty"`
		Comment  string       `json:"comment,omitempty"`
	}
	seccompArg struct {
		Index    uint   `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"valueTwo"`
		Op       string `json:"op"`
	}
)

// Values the conditional rules compare with.
const (
	errnoEPERM  = 1
	errnoENOSYS = 38
	// cloneNamespaceFlags are clone's CLONE_NEW* flags (NEWNS, NEWCGROUP,
	// NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET): a new namespace needs
	// CAP_SYS_ADMIN, which a sandbox never has, and a user namespace
	// would hand it capabilities over its own copies of the kernel's
	// objects, the door to most namespace exploits.
	cloneNamespaceFlags = 0x7E020000
	afVsock             = 40
	// btrfsIoctlType is the type byte (bits 8–15 of an ioctl's command)
	// of btrfs's ioctls.
	btrfsIoctlType = 0x94
)

// reflinkIoctls are the btrfs-numbered ioctls every file system that can
// share extents implements: FICLONE, FICLONERANGE, FIDEDUPERANGE. Shared
// extents are counted by the container's qgroup like any other.
var reflinkIoctls = []uint64{0x40049409, 0x4020940D, 0xC0189436}

// ioctlRules allow every ioctl whose type byte is not btrfs's, and the
// reflink ioctls. A rule that refuses a command beside an unconditional
// allow is not enough (libseccomp lets the allow win), so the allow
// itself is conditional: one rule per bit of the type byte, each matching
// the commands whose type differs from btrfs's in that bit. Only the low
// 16 bits are compared, so junk in the register's upper half cannot slip
// a btrfs command past them.
func ioctlRules() []seccompSyscall {
	var rules []seccompSyscall
	for bit := range 8 {
		mask := uint64(1) << (8 + bit)
		want := uint64(^btrfsIoctlType&0xff) << 8 & mask
		rules = append(rules, seccompSyscall{Names: []string{"ioctl"}, Action: "SCMP_ACT_ALLOW",
			Args: []seccompArg{{Index: 1, Value: mask, ValueTwo: want, Op: "SCMP_CMP_MASKED_EQ"}}})
	}
	for _, cmd := range reflinkIoctls {
		rules = append(rules, seccompSyscall{Names: []string{"ioctl"}, Action: "SCMP_ACT_ALLOW",
			Args: []seccompArg{{Index: 1, Value: cmd, Op: "SCMP_CMP_EQ"}}})
	}
	return rules
}

// personas are the personality(2) arguments allowed: the default
// (PER_LINUX), UNAME26, ADDR_NO_RANDOMIZE, both, and the query (0xffffffff).
var personas = []uint64{0x0, 0x0008, 0x20000, 0x20008, 0xffffffff}

func buildSeccompProfile() seccompProfile {
	eperm, enosys := uint(errnoEPERM), uint(errnoENOSYS)
	p := seccompProfile{
		DefaultAction:   "SCMP_ACT_ERRNO",
		DefaultErrnoRet: &eperm,
		ArchMap: []seccompArch{
			{Architecture: "SCMP_ARCH_X86_64", SubArchitectures: []string{"SCMP_ARCH_X86", "SCMP_ARCH_X32"}},
			{Architecture: "SCMP_ARCH_AARCH64", SubArchitectures: []string{"SCMP_ARCH_ARM"}},
		},
		Syscalls: []seccompSyscall{
			{Names: seccompAllowed, Action: "SCMP_ACT_ALLOW"},
			{Names: []string{"clone"}, Action: "SCMP_ACT_ALLOW", Comment: "no new namespaces",
				Args: []seccompArg{{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: "SCMP_CMP_MASKED_EQ"}}},
			{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &enosys, Comment: "the C library falls back to clone"},
			{Names: []string{"socket"}, Action: "SCMP_ACT_ALLOW", Comment: "any family but AF_VSOCK",
				Args: []seccompArg{{Index: 0, Value: afVsock, Op: "SCMP_CMP_NE"}}},
			// The 32-bit multiplexer hides socket's family behind a pointer
			// seccomp cannot read: refused, so a 32-bit program cannot open
			// an AF_VSOCK socket through it. ENOSYS (not the default EPERM:
			// a rule whose action is the default's is dropped by the OCI
			// runtime) makes the C library use the direct socket calls,
			// which every kernel this runs on has.
			{Names: []string{"socketcall"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &enosys, Comment: "socket's family is checkable only on the direct call"},
		},
	}
	p.Syscalls = append(p.Syscalls, ioctlRules()...)
	for _, v := range personas {
		p.Syscalls = append(p.Syscalls, seccompSyscall{Names: []string{"personality"}, Action: "SCMP_ACT_ALLOW",
			Args: []seccompArg{{Index: 0, Value: v, Op: "SCMP_CMP_EQ"}}})
	}
	return p
}

// seccompJSON is the profile as the engine takes it in SecurityOpt
// ("seccomp=<json>"), built once.
var seccompJSON = sync.OnceValue(func() string {
	b, err := json.Marshal(buildSeccompProfile())
	if err != nil {
		panic(err) // static data: cannot happen
	}
	return string(b)
})

// SeccompProfileJSON is the sandboxes' seccomp profile in the engine's
// format, for runtimes that hand it to an OCI runtime themselves
// (internal/runtime/oci converts it).
func SeccompProfileJSON() string { return seccompJSON() }
