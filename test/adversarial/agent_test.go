package adversarial_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// rssBound is how much the daemon's resident memory may grow while one
// sandbox attacks it (issue 11: "at most a few tens of MB").
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

// TestAgent_SandboxCannotTakeOverItsAgentSocket (issue 11, items 1 and 5):
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

// TestAgent_ForkBombLeavesTheDaemonAndOthersAlone (issue 11, item 6): a
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
