package adversarial_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// rssBound is how much the daemon's resident memory may grow while one
// sandbox attacks it.
const rssBound = 64 << 20

// takeOverAgentSocket is what root in a sandbox would try against its
// agent's socket directory: remove or replace the socket (to answer the
// daemon in the agent's place), add a socket of its own, fill the host's
// disk through the directory. It prints one line per attempt that worked.
const takeOverAgentSocket = `
import os, socket
d = "/run/sandboxd"
for name in os.listdir(d):
    try:
        os.rename(os.path.join(d, name), "/tmp/" + name); print("moved", name)
    except OSError:
        pass
    try:
        os.remove(os.path.join(d, name)); print("removed", name)
    except OSError:
        pass
try:
    s = socket.socket(socket.AF_UNIX); s.bind(d + "/agent.sock"); s.listen(); print("bound")
except OSError:
    pass
try:
    with open(d + "/fill", "wb") as f:
        f.write(b"\0" * (8 << 20)); print("wrote")
except OSError:
    pass
`

// TestAgent_SandboxCannotTakeOverItsAgentSocket:
// root in a sandbox cannot remove, replace or add anything in its agent
// socket directory, nor write through it; its mountinfo does not show the
// daemon's data directory; its agent keeps answering through the daemon,
// whose memory stays bounded, and another tenant's sandbox is unaffected.
func TestAgent_SandboxCannotTakeOverItsAgentSocket(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "agentsock")
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{Image: baseImage})
	watch := watchBystander(t, d)
	rss := watchRSS(t, d)

	res, err := mallory.Exec(t.Context(), sb.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "-c", takeOverAgentSocket}})
	if err != nil {
		t.Fatalf("attack: %v", err)
	}
	if res.Stdout != "" {
		t.Errorf("the sandbox changed its agent socket directory:\n%s", res.Stdout)
	}
	if res := sh(t, mallory, sb.ID, "cat /proc/self/mountinfo"); strings.Contains(res.Stdout, d.DataDir()) {
		t.Errorf("mountinfo shows the daemon's data directory %s:\n%s", d.DataDir(), res.Stdout)
	}
	if res := sh(t, mallory, sb.ID, "echo still answering"); res.Stdout != "still answering\n" {
		t.Errorf("exec after the attack: %+v", res)
	}
	g := rss.Growth()
	t.Logf("daemon RSS growth during the attack: %d KiB", g>>10)
	if g > rssBound {
		t.Errorf("daemon RSS grew by %d MiB, want at most %d MiB", g>>20, rssBound>>20)
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
}

// forkBomb runs a bash fork bomb whose shell stays until the command's
// timeout kills its process group (the agent never signals a group whose
// leader it reaped), lowering its own OOM score to just above the agent's
// so that the OOM killer takes the bomb first; builtins only after the
// bomb starts, since no process can be started once the pids limit is hit.
const forkBomb = `mkfifo /tmp/hold
:(){ :|:& }; :
read a < /proc/1/oom_score_adj; echo $((a+1)) > /proc/$$/oom_score_adj
read <> /tmp/hold`

// TestAgent_ForkBombLeavesTheDaemonAndOthersAlone: a
// fork bomb in a 256 MB sandbox runs into its pids limit and the OOM
// killer; the agent survives it (the sandbox does not go to error), the
// daemon's memory stays bounded, another tenant's sandbox keeps answering
// throughout, and once the bomb's group is killed at its timeout the
// bombed sandbox runs commands again.
func TestAgent_ForkBombLeavesTheDaemonAndOthersAlone(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "forkbomb")
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{Image: baseImage, MemoryMB: 256, CPU: 1})
	watch := watchBystander(t, d)
	rss := watchRSS(t, d)

	ctx := testContext(t, 2*time.Minute)
	_, err := mallory.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"bash", "-c", forkBomb}, Timeout: 20 * time.Second})
	t.Logf("fork bomb exec returned: %v", err)
	waitFor(t, "the bombed sandbox to run a command", func() error {
		res, err := mallory.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"echo", "ok"}, Timeout: 10 * time.Second})
		if err != nil {
			return err
		}
		if res.Stdout != "ok\n" {
			return fmt.Errorf("echo ok: %+v", res)
		}
		return nil
	})
	got, err := mallory.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != sandboxd.StateRunning {
		t.Errorf("bombed sandbox after the bomb: %+v, %v; want running", got, err)
	}
	g := rss.Growth()
	t.Logf("daemon RSS growth during the attack: %d KiB", g>>10)
	if g > rssBound {
		t.Errorf("daemon RSS grew by %d MiB, want at most %d MiB", g>>20, rssBound>>20)
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
}

// attachToAgent is what root in a sandbox would try against its agent
// (PID 1): ptrace it, read its memory and its environment. It prints one
// line per attempt that worked; an attach that worked is undone at once,
// so that the old code's agent survives the test.
const attachToAgent = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.ptrace(16, 1, None, None) == 0:  # PTRACE_ATTACH
    print("attached")
    os.waitpid(1, 0x40000000)  # __WALL
    libc.ptrace(17, 1, None, None)  # PTRACE_DETACH
for f in ["/proc/1/environ", "/proc/1/mem", "/proc/1/maps", "/proc/1/auxv"]:
    try:
        with open(f, "rb") as fh:
            fh.read(64)
        print("read", f)
    except OSError:
        pass
`

// TestAgent_SandboxCannotTraceItsAgent: root in a runc
// sandbox cannot ptrace the agent, nor read its memory or environment
// through /proc/1 (the agent is not dumpable), while the agent's own hold
// of each child at its exec (a ptrace of its own) keeps working: a command
// runs after the attack.
func TestAgent_SandboxCannotTraceItsAgent(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "ptrace")
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{Image: baseImage})

	res, err := mallory.Exec(t.Context(), sb.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "-c", attachToAgent}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("attack: %+v, %v", res, err)
	}
	if res.Stdout != "" {
		t.Errorf("root in the sandbox reached its agent:\n%s", res.Stdout)
	}
	// The sandbox's own processes stay traceable by their parent (the
	// agent's exec hold depends on the same kernel rule).
	if res := sh(t, mallory, sb.ID, `python3 -c 'import os; print(open("/proc/%d/environ" % os.getpid(), "rb").read().count(b"PATH="))'`); res.Stdout != "1\n" {
		t.Errorf("a process reading its own /proc environ: %+v", res)
	}
	if res := sh(t, mallory, sb.ID, "echo still answering"); res.Stdout != "still answering\n" {
		t.Errorf("exec after the attack: %+v", res)
	}
}

// TestAgent_FilesAPICannotRemoveSystemFiles: the
// files API refuses to remove /dev/null (every command's stdin), another
// device node, /proc or /sys, or the agent's binary and socket directory,
// with a typed 400; commands keep running afterwards. Before, the delete
// of /dev/null succeeded and every later exec failed until a restart.
func TestAgent_FilesAPICannotRemoveSystemFiles(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "devnull")
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{})
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev", "/proc/1", "/sys", "/run/sandboxd", "/opt/sandboxd/toolboxd"} {
		err := mallory.RemoveFile(t.Context(), sb.ID, p)
		var apiErr *sandboxd.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != "invalid_argument" {
			t.Errorf("delete %s: %v, want 400 invalid_argument", p, err)
		}
	}
	res, err := mallory.Exec(t.Context(), sb.ID, sandboxd.ExecRequest{Cmd: []string{"sh", "-c", "test -c /dev/null && test -c /dev/zero && echo ok"}})
	if err != nil || res.Stdout != "ok\n" {
		t.Errorf("exec after the deletes: %+v, %v; want ok", res, err)
	}
	// The user's files, and /dev/shm's, stay removable.
	sh(t, mallory, sb.ID, "touch /tmp/mine /dev/shm/mine")
	for _, p := range []string{"/tmp/mine", "/dev/shm/mine"} {
		if err := mallory.RemoveFile(t.Context(), sb.ID, p); err != nil {
			t.Errorf("delete %s: %v", p, err)
		}
	}
}
