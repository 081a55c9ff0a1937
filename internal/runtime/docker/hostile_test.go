package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Tests of what code inside a sandbox can do to the daemon through the
// agent socket: each plays the attack for real, from inside a
// container.

// logBuffer collects a runtime's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// box is one sandbox of a test, with a client of its agent.
type box struct {
	rt     *docker.Runtime
	id     string
	client *agent.Client
}

// newBox creates a sandbox from the test image on rt; mod may change the
// spec first. It is destroyed when t ends.
func newBox(t *testing.T, rt *docker.Runtime, mod func(*runtime.Spec)) *box {
	t.Helper()
	id := runtimetest.NewSandboxID()
	spec := runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: env.agent, AgentToken: "tok-" + id}
	if mod != nil {
		mod(&spec)
	}
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	if _, err := rt.Create(t.Context(), spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, spec.AgentToken)
	t.Cleanup(c.Close)
	return &box{rt: rt, id: id, client: c}
}

// sh runs script in the sandbox and returns its combined output.
func (b *box) sh(t *testing.T, script string) string {
	t.Helper()
	res, err := b.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// TestDialAgent_RefusesAnImpostor: a process in the sandbox listens on a
// socket of its own (on a directory the sandbox can write) and that
// socket is put where the daemon dials the agent. The daemon must refuse
// the connection, before sending or reading a byte, and log it; with the
// real agent's socket back, it talks to the agent again.
func TestDialAgent_RefusesAnImpostor(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	var logs logBuffer
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *docker.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	share, err := os.MkdirTemp(filepath.Dir(env.socketRoot), "fake") // same filesystem as the socket root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(share) })
	copyFile(t, env.fake, filepath.Join(share, "fakeagent"))
	b := newBox(t, rt, func(s *runtime.Spec) {
		s.Mounts = []runtime.Mount{{HostPath: share, Path: "/mnt/fake"}}
	})
	p, err := b.client.StartProcess(t.Context(), agent.StartRequest{
		Cmd: []string{"/mnt/fake/fakeagent", "-mode", "health", "-listen", "/mnt/fake/fake.sock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if out, err := p.Recv(); err != nil || !strings.Contains(string(out.Data), "listening") {
		t.Fatalf("fake agent: %q, %v", out.Data, err)
	}

	// Swap the impostor in, keeping the real socket aside.
	real, fake := rt.AgentSocketPath(b.id), filepath.Join(share, "fake.sock")
	aside := filepath.Join(share, "real.sock")
	if err := os.Rename(real, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fake, real); err != nil {
		t.Fatal(err)
	}
	conn, err := rt.DialAgent(t.Context(), b.id)
	if err == nil {
		conn.Close()
		t.Fatal("DialAgent connected to a socket a sandbox process listens on")
	}
	if !errors.Is(err, runtime.ErrAgentImpostor) {
		t.Errorf("DialAgent = %v, want ErrAgentImpostor", err)
	}
	if got := logs.String(); !strings.Contains(got, "refused") || !strings.Contains(got, b.id) {
		t.Errorf("no log record of the refusal; logs:\n%s", got)
	}

	if err := os.Rename(aside, real); err != nil {
		t.Fatal(err)
	}
	if out := b.sh(t, "echo back"); out != "back\n" {
		t.Errorf("with the agent's socket back: %q", out)
	}
}

// TestSocketDir_ReadOnlyInTheSandbox: root in the sandbox cannot remove,
// replace or add anything in the agent socket directory, so it can
// neither plant an impostor nor fill the host's disk through it, and the
// agent keeps answering.
func TestSocketDir_ReadOnlyInTheSandbox(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	b := newBox(t, rt, nil)
	d := runtime.AgentSocketDir
	out := b.sh(t, `
		rm -f `+d+`/agent.sock && echo rm-ok
		mv `+d+`/agent.sock `+d+`/moved && echo mv-ok
		ln -s / `+d+`/link && echo ln-ok
		mkdir `+d+`/dir && echo mkdir-ok
		dd if=/dev/zero of=`+d+`/fill bs=1M count=8 && echo fill-ok
		mount -o remount,rw `+d+` && echo remount-ok
		true`)
	if strings.Contains(out, "-ok") {
		t.Errorf("the sandbox changed its agent socket directory:\n%s", out)
	}
	entries, err := os.ReadDir(rt.SocketDir(b.id))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{runtime.AgentSocketName}) {
		t.Errorf("socket dir holds %v, want only %s (the handoff socket goes once the agent has its socket)", names, runtime.AgentSocketName)
	}
	if out := b.sh(t, "echo alive"); out != "alive\n" {
		t.Errorf("after the attempts: %q", out)
	}
}

// TestDialAgent_FreshRuntimeFindsTheAgent: a runtime that did not boot the
// sandbox (a restarted daemon) has no pid cached, asks the engine, and
// reaches the agent.
func TestDialAgent_FreshRuntimeFindsTheAgent(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	node := "node-" + runtimetest.NewSandboxID()[3:]
	b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: node}), nil)
	fresh, err := docker.New(docker.Options{Client: env.cli, NodeID: node, SocketRoot: env.socketRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return fresh.DialAgent(ctx, b.id) }, "tok-"+b.id)
	defer c.Close()
	if err := c.Health(t.Context()); err != nil {
		t.Fatalf("Health through a fresh runtime: %v", err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// baseImage has bash and the tools of a real sandbox (scripts/build-images.sh).
const baseImage = "sandboxd/base:bookworm"

// smallBox is a sandbox with the service's default pids limit and a small
// memory limit, where a runaway process hits the limits fast.
func smallBox(t *testing.T) *box {
	t.Helper()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	return newBox(t, rt, func(s *runtime.Spec) {
		s.Image, s.MemoryMB, s.PidsLimit, s.CPU = baseImage, 256, 1024, 1
	})
}

// wantUsable fails t unless the sandbox's container still runs and, once
// the runaway processes are gone, a command runs in it.
func (b *box) wantUsable(t *testing.T) {
	t.Helper()
	st, err := b.rt.Inspect(t.Context(), b.id)
	if err != nil || st.State != runtime.StateRunning {
		t.Fatalf("sandbox after the attack: %+v, %v; want it running (the agent died); its output:\n%s", st, err, b.agentOutput())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's output:\n%s", b.agentOutput())
		}
	})
	testenv.WaitFor(t, "a command to run in the sandbox", func() error {
		res, err := b.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"echo", "ok"}, Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		if string(res.Stdout) != "ok\n" {
			return fmt.Errorf("echo ok: %+v", res)
		}
		return nil
	})
}

// agentOutput is the start of what the agent logged and, if it crashed,
// the start of its crash report, for failure messages.
func (b *box) agentOutput() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := env.cli.ContainerLogs(ctx, b.rt.ContainerName(b.id), client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 1<<20))
	var keep []string
	for line := range strings.Lines(out.String()) {
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "goroutine ") && len(keep) < 40 {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// TestSandbox_SurvivesAForkBomb: a fork bomb in a 256 MB sandbox runs into
// its pids limit (and the OOM killer); the agent (PID 1) keeps answering
// through it, the bomb dies with its process group when the command's
// lifetime ends, and the sandbox runs commands again.
func TestSandbox_SurvivesAForkBomb(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	b := smallBox(t)
	// The shell stays, reading its stdin (kept open), so that the bomb's
	// process group still has its leader, and is killed whole, when the
	// lifetime passes: the agent never signals a group whose leader it
	// reaped (the id may be reused). So that the OOM killer does not take
	// the leader first, it lowers its own score to just above the agent's
	// once the bomb is away (builtins only: no fork needed).
	script := `:(){ :|:& }; :
		read a < /proc/1/oom_score_adj; echo $((a+1)) > /proc/$$/oom_score_adj
		read`
	lifetime := 20 * time.Second
	begin := time.Now()
	p, err := b.client.StartProcess(t.Context(), agent.StartRequest{
		Cmd: []string{"/bin/bash", "-c", script}, Stdin: true, Lifetime: lifetime,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Keep the agent busy meanwhile, as callers would: its blocking calls
	// need threads, which the pids limit no longer lets it start.
	busy, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for busy.Err() == nil {
				_, _ = b.client.Filesystem().ListDir(busy, connect.NewRequest(&fsrpc.ListDirRequest{Path: "/etc", Depth: 1}))
			}
		})
	}
	// Sample the agent's health every second while the bomb runs.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		if time.Since(begin) > lifetime-5*time.Second {
			break
		}
		if err := b.client.Health(t.Context()); err != nil {
			t.Errorf("the agent does not answer during the fork bomb: %v", err)
			break
		}
	}
	_, err = p.Wait()
	stop()
	wg.Wait()
	t.Logf("fork bomb stream ended: %v", err)
	b.wantUsable(t)
}

// TestSandbox_SurvivesAMemoryHog: a process that takes all the memory it
// can is killed by the OOM killer, not the agent, and the sandbox runs
// commands again.
func TestSandbox_SurvivesAMemoryHog(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	b := smallBox(t)
	// tail buffers its last line, and /dev/zero has no newline.
	res, err := b.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"tail", "/dev/zero"}, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("memory hog: %v", err)
	}
	if res.Exited || res.Status != "signal: killed" {
		t.Errorf("memory hog ended %+v, want killed by the OOM killer", res)
	}
	b.wantUsable(t)
}

// TestSandbox_OOMKillerTakesAnythingBeforeTheAgent: every process the
// agent starts, and what those start, scores 1000 above the agent (-1000
// and 0 where the engine may lower scores, 0 and 1000 where it may not),
// and the agent keeps its own score after starting processes.
func TestSandbox_OOMKillerTakesAnythingBeforeTheAgent(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}), nil)
	got := strings.Fields(b.sh(t, "cat /proc/1/oom_score_adj /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'; cat /proc/1/oom_score_adj"))
	var want []string
	if len(got) > 0 {
		agentScore := got[0]
		child := map[string]string{"-1000": "0", "0": "1000"}[agentScore]
		want = []string{agentScore, child, child, agentScore}
	}
	if len(got) != 4 || !slices.Contains([]string{"-1000", "0"}, got[0]) || !slices.Equal(got, want) {
		t.Errorf("oom_score_adj of the agent, a child, a grandchild, the agent again = %q, want %q (agent -1000 or 0)", got, want)
	}
}

// TestSandbox_PackageInstallAndSudoStyleOperations: with every capability
// but runtime.SandboxCapabilities dropped, what package managers and sudo
// do still works in the base image: apt-get installs a local package whose
// files and script chown, chmod and set a setuid bit (no network needed),
// su switches users, and the unprivileged user gains root through a setuid
// program (what sudo is), both through a shell and exec'd directly.
func TestSandbox_PackageInstallAndSudoStyleOperations(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}), func(s *runtime.Spec) {
		s.Image = baseImage
	})
	install := `set -e
		d=$(mktemp -d); mkdir -p $d/DEBIAN $d/opt/sbxtest
		printf 'Package: sbxtest\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.com>\nDescription: test\n' > $d/DEBIAN/control
		printf '#!/bin/sh\nset -e\nchown user:user /opt/sbxtest/owned\nchmod 4755 /opt/sbxtest/suid\n' > $d/DEBIAN/postinst
		chmod 755 $d/DEBIAN/postinst
		cp /usr/bin/id $d/opt/sbxtest/suid; touch $d/opt/sbxtest/owned
		dpkg-deb --build --root-owner-group $d /tmp/sbxtest.deb >/dev/null
		apt-get install -y -q /tmp/sbxtest.deb >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
		stat -c '%U %a' /opt/sbxtest/owned /opt/sbxtest/suid
		su user -c 'id -un'`
	if got, want := b.sh(t, install), "user 644\nroot 4755\nuser\n"; got != want {
		t.Errorf("package install and su:\n%s\nwant:\n%s", got, want)
	}
	for name, cmd := range map[string][]string{
		"through a shell": {"/bin/sh", "-c", "/opt/sbxtest/suid -u"},
		"exec'd directly": {"/opt/sbxtest/suid", "-u"},
	} {
		res, err := b.client.Exec(t.Context(), agent.ExecRequest{Cmd: cmd, User: "user"})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout); got != "0\n" {
			t.Errorf("setuid program run by user %s: euid %q (stderr %q), want 0", name, got, res.Stderr)
		}
	}
}

// TestSandbox_CapabilitiesAndCgroupNamespace: root in the sandbox holds
// exactly runtime.SandboxCapabilities (so no device nodes, no raw
// sockets), and sees its own cgroup as the root of the hierarchy.
func TestSandbox_CapabilitiesAndCgroupNamespace(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}), nil)
	want := uint64(0)
	for _, c := range runtime.SandboxCapabilities {
		want |= 1 << capNumbers[c]
	}
	out := b.sh(t, "grep -E '^Cap(Eff|Bnd):' /proc/self/status; mknod /tmp/null c 1 3 2>/dev/null && echo mknod-ok; cat /proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch f := strings.Fields(line); {
		case len(f) == 2 && (f[0] == "CapEff:" || f[0] == "CapBnd:"):
			if got, err := strconv.ParseUint(f[1], 16, 64); err != nil || got != want {
				t.Errorf("%s %s, want %016x", f[0], f[1], want)
			}
		case line == "mknod-ok":
			t.Errorf("mknod succeeded: CAP_MKNOD was not dropped")
		case !strings.HasSuffix(line, ":/"):
			t.Errorf("/proc/self/cgroup line %q: want the sandbox's own cgroup to be /", line)
		}
	}
}

// capNumbers are the bits of the capabilities runtime.SandboxCapabilities
// names.
var capNumbers = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
}

// kernelDoors asks the kernel for what the sandboxes' seccomp profile
// refuses, and for what it must keep: one line per call, "name: ok" or
// "name: errno N".
const kernelDoors = `
import ctypes, os, threading, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *args)
    print("%s: %s" % (name, "ok" if r >= 0 else "errno %d" % ctypes.get_errno()))
params = ctypes.create_string_buffer(120)
call("io_uring_setup", 425, ctypes.c_uint(4), params)
call("io_uring_enter", 426, ctypes.c_int(-1), ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_uint(0), None, ctypes.c_size_t(0))
call("io_uring_register", 427, ctypes.c_int(-1), ctypes.c_uint(0), None, ctypes.c_uint(0))
call("userfaultfd", 323, ctypes.c_int(0))
call("keyctl", 250, ctypes.c_int(0), ctypes.c_long(-3), ctypes.c_long(0))
call("unshare_user", 272, ctypes.c_int(0x10000000))
call("personality_query", 135, ctypes.c_ulong(0xffffffff))
t = threading.Thread(target=lambda: None); t.start(); t.join(); print("thread: ok")
try:
    socket.socket(40, socket.SOCK_STREAM); print("vsock: ok")
except OSError as e:
    print("vsock: errno %d" % e.errno)
os.mkfifo("/tmp/fifo"); print("mkfifo: ok")
d = os.open("/tmp", os.O_RDONLY)
vol = ctypes.create_string_buffer(4096); vol[8:11] = b"sv1"
call("btrfs_subvol_create", 16, ctypes.c_int(d), ctypes.c_ulong(0x5000940E), vol)
call("btrfs_subvol_create_high", 16, ctypes.c_int(d), ctypes.c_ulong(0x15000940E), vol)
a = os.open("/tmp/ra", os.O_CREAT | os.O_RDWR); os.write(a, b"x" * 8192)
b = os.open("/tmp/rb", os.O_CREAT | os.O_RDWR)
r = libc.syscall(ctypes.c_long(16), ctypes.c_int(b), ctypes.c_ulong(0x40049409), ctypes.c_long(a)); e = ctypes.get_errno()
print("reflink: %s" % ("ok" if r >= 0 or e != 1 else "errno 1"))
import platform, struct
if platform.machine() == "x86_64":
    # socket(AF_VSOCK) through the 32-bit socketcall (int 0x80), whose
    # arguments seccomp cannot read: the code and its arguments live in
    # a page under 4 GiB.
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    m = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)
    ctypes.memmove(m + 2048, struct.pack("<III", 40, 1, 0), 12)
    code = b"\x53\xb8\x66\x00\x00\x00\xbb\x01\x00\x00\x00\xb9" + struct.pack("<I", m + 2048) + b"\xcd\x80\x5b\xc3"
    ctypes.memmove(m, code, len(code))
    r = ctypes.CFUNCTYPE(ctypes.c_int)(m)()
    print("socketcall_vsock: %s" % ("ok" if r >= 0 else "errno %d" % -r))
else:
    print("socketcall_vsock: errno 38")
`

// TestSandbox_SeccompRefusesIOUring: under runc the
// sandboxes' own seccomp profile refuses io_uring (EPERM, or ENOSYS where
// the kernel lacks it), userfaultfd, the keyring, user namespaces and
// vsock, and keeps what programs need: threads (glibc's clone3, answered
// ENOSYS, falls back to clone), personality queries, fifos. Under gVisor
// (when the engine has runsc) the profile is not passed and sandboxes
// still run: there every call, io_uring's included, is the sentry's own
// implementation, and none reaches the host's kernel.
func TestSandbox_SeccompRefusesIOUring(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	want := map[string]string{
		"io_uring_setup": "refused", "io_uring_enter": "refused", "io_uring_register": "refused",
		"userfaultfd": "refused", "keyctl": "refused", "unshare_user": "refused", "vsock": "refused",
		"btrfs_subvol_create": "refused", "btrfs_subvol_create_high": "refused", "socketcall_vsock": "refused",
		"personality_query": "ok", "thread": "ok", "mkfifo": "ok", "reflink": "ok",
	}
	check := func(t *testing.T, out string, only ...string) {
		t.Helper()
		got := map[string]string{}
		for line := range strings.Lines(out) {
			name, res, ok := strings.Cut(strings.TrimSpace(line), ": ")
			if !ok {
				continue
			}
			switch res {
			case "ok":
				got[name] = "ok"
			case fmt.Sprintf("errno %d", unix.EPERM), fmt.Sprintf("errno %d", unix.ENOSYS):
				got[name] = "refused"
			default:
				got[name] = res
			}
		}
		for name, w := range want {
			if len(only) > 0 && !slices.Contains(only, name) {
				continue
			}
			if got[name] != w {
				t.Errorf("%s: %q, want %s\n%s", name, got[name], w, out)
			}
		}
	}
	t.Run("runc", func(t *testing.T) {
		t.Parallel()
		b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}), func(s *runtime.Spec) {
			s.Image = baseImage
		})
		check(t, b.sh(t, "python3 -c '"+kernelDoors+"'"))
	})
	t.Run("gvisor", func(t *testing.T) {
		t.Parallel()
		requireGVisor(t)
		b := newBox(t, newRuntime(t, runtimetest.Options{NodeID: "node-gv-" + runtimetest.NewSandboxID()[3:]}), func(s *runtime.Spec) {
			s.Image, s.Isolation = baseImage, runtime.IsolationGVisor
			s.MemoryMB, s.PidsLimit = max(runtime.MinGVisorMemoryMB, 256), runtime.MinGVisorPidsLimit
		})
		out := b.sh(t, "python3 -c '"+kernelDoors+"'")
		t.Logf("under gVisor:\n%s", out)
		check(t, out, "thread", "mkfifo")
	})
}

// TestCommit_ImageHoldsNoAgentToken: a sandbox
// captured as an image (templates, snapshots) leaves neither its agent
// token nor its env in anything the engine shows of the image: its
// config, and the copy of the container's config the engine records
// beside it (ContainerConfig), which registries receive on a push.
func TestCommit_ImageHoldsNoAgentToken(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	node := "node-" + runtimetest.NewSandboxID()[3:]
	rt := newRuntime(t, runtimetest.Options{NodeID: node})
	b := newBox(t, rt, func(s *runtime.Spec) { s.Env = map[string]string{"SANDBOX_SECRET": "hush-" + s.SandboxID} })
	secrets := []string{"tok-" + b.id, "hush-" + b.id}
	cinfo, err := exec.CommandContext(t.Context(), "docker", "inspect", rt.ContainerName(b.id)).Output()
	if err != nil || !strings.Contains(string(cinfo), secrets[1]) {
		t.Fatalf("the container's config does not show its env (%v): the check looks in the wrong place", err)
	}
	// The token is in the container's config only sealed, in a label
	// (token.go); the image shows neither it nor the sealed form.
	if strings.Contains(string(cinfo), secrets[0]) {
		t.Errorf("the container's config shows the agent token in clear")
	}
	ins, err := env.cli.ContainerInspect(t.Context(), rt.ContainerName(b.id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sealed := ins.Container.Config.Labels[runtime.LabelPrefix+"agent-token"]
	if sealed == "" {
		t.Fatal("the container has no sealed agent token label")
	}
	secrets = append(secrets, sealed)
	ref := "sandboxd/test-commit:" + b.id
	t.Cleanup(func() { _ = rt.RemoveImage(context.Background(), ref) })
	start := time.Now()
	img, err := rt.Commit(t.Context(), b.id, ref, runtime.ImageConfig{Env: []string{"KEPT=1"}})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	t.Logf("commit took %v", time.Since(start))
	out, err := exec.CommandContext(t.Context(), "docker", "image", "inspect", img.ID).Output()
	if err != nil {
		t.Fatalf("docker image inspect: %v", err)
	}
	for _, s := range secrets {
		if strings.Contains(string(out), s) {
			t.Errorf("the image shows %q:\n%s", s, out)
		}
	}
	if !slices.Contains(img.Config.Env, "KEPT=1") {
		t.Errorf("image env %q lacks KEPT=1", img.Config.Env)
	}
	// Nothing of the commit is left running or listed.
	res, err := env.cli.ContainerList(t.Context(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", runtime.LabelPrefix+"commit=1", runtime.LabelNode+"="+node)})
	if err != nil || len(res.Items) != 0 {
		t.Errorf("intermediate containers left: %d, %v", len(res.Items), err)
	}
	// The image still makes a sandbox.
	b2 := newBox(t, rt, func(s *runtime.Spec) { s.Image = ref })
	if got := b2.sh(t, "echo $KEPT"); got != "1\n" {
		t.Errorf("a sandbox of the image: KEPT=%q", got)
	}
}

// TestListOurs_SweepsACommitsLeftover: an intermediate container of Commit
// that a crashed daemon left (never run, labelled with the node) is
// removed by ListOurs once it is old, and not listed as a sandbox; a young
// one (a Commit in progress) is left alone.
func TestListOurs_SweepsACommitsLeftover(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	node := "node-" + runtimetest.NewSandboxID()[3:]
	rt := newRuntime(t, runtimetest.Options{NodeID: node})
	made, err := env.cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Config: &container.Config{Image: testImage, Entrypoint: []string{"true"},
			Labels: map[string]string{runtime.LabelNode: node, runtime.LabelPrefix + "commit": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.cli.ContainerRemove(context.Background(), made.ID, client.ContainerRemoveOptions{Force: true})
	})
	list, err := rt.ListOurs(t.Context())
	if err != nil || len(list) != 0 {
		t.Fatalf("ListOurs = %+v, %v; want no sandbox", list, err)
	}
	if _, err := env.cli.ContainerInspect(t.Context(), made.ID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("a young intermediate container was removed: %v", err)
	}
	docker.SetCommitLeftoverAge(rt, 0)
	if _, err := rt.ListOurs(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := env.cli.ContainerInspect(t.Context(), made.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the old intermediate container is still there: %v", err)
	}
}

// TestQgroups_CountingResumesAfterARemoval: on a btrfs engine the
// engine's removal of a sized container leaves the kernel's qgroups
// inconsistent (it stops counting, and no sandbox is held to its disk
// limit); the runtime rescans before its Destroy returns, and a sandbox
// made after it is held to its limit.
func TestQgroups_CountingResumesAfterARemoval(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	lim, err := rt.DiskLimits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !lim.Enforced || !strings.Contains(lim.How, "btrfs") {
		t.Skipf("the engine enforces no btrfs disk limit here (%s)", lim.How)
	}
	for i := range 3 {
		// The base image: its container's subvolume references the
		// image's hundreds of MB, which the kernel drops after the qgroup
		// is gone.
		b := newBox(t, rt, func(s *runtime.Spec) { s.Image, s.DiskMB = baseImage, 32 })
		b.sh(t, "dd if=/dev/zero of=/fill bs=1M count=8 2>/dev/null; sync")
		if err := rt.Destroy(t.Context(), b.id); err != nil {
			t.Fatal(err)
		}
		if docker.QgroupsInconsistent(rt) {
			t.Fatalf("removal %d left the qgroups inconsistent: no sandbox is held to its disk limit", i)
		}
	}
	b := newBox(t, rt, func(s *runtime.Spec) { s.DiskMB = 32 })
	out := b.sh(t, "dd if=/dev/zero of=/big bs=1M count=256 2>&1; echo rc=$?")
	if !strings.Contains(out, "rc=1") {
		t.Errorf("a 32 MiB sandbox wrote 256 MiB after removals:\n%s", out)
	}
}
