package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// The agent socket directory is mounted read-only in the sandbox (nothing
// there may replace the socket or fill the directory), so the daemon
// makes the agent's socket and hands it over at every boot; see package
// agent/handoff. Afterwards every connection to the socket is checked:
// its peer must be the process the engine reports as the container's
// init, the agent. The pid is cached per sandbox, set at each boot and
// looked up again whenever a peer does not match it.

// bootLockStripes spreads the per-sandbox boot locks over a fixed set of
// mutexes: no map entry to clean up, and unrelated sandboxes rarely share
// one (a boot takes milliseconds).
const bootLockStripes = 64

// bootLock serializes the boots (Create's and Start's) of one sandbox: two
// boots at once would each replace the other's sockets.
func (r *Runtime) bootLock(sandboxID string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sandboxID))
	return &r.boots[h.Sum32()%bootLockStripes]
}

// boot is one handoff of a fresh agent socket, prepared before the
// container starts so that the agent finds it at once.
type boot struct {
	dir  string
	sock *os.File          // the agent socket: bound, not listening
	ln   *net.UnixListener // the handoff socket
}

// prepareBoot replaces whatever sockets an earlier run left in the
// sandbox's socket directory with a fresh agent socket and a handoff
// listener.
func prepareBoot(dir string) (*boot, error) {
	sock, ln, err := handoff.Prepare(filepath.Join(dir, runtime.AgentSocketName), filepath.Join(dir, runtime.AgentHandoffName))
	if err != nil {
		return nil, err
	}
	return &boot{dir: dir, sock: sock, ln: ln}, nil
}

// close ends the handoff: the listener goes (and its file with it), and
// the daemon's copy of the agent socket, which the agent holds its own
// copy of once the handoff happened.
func (b *boot) close() {
	b.ln.Close() // removes handoff.sock: net.ListenUnix made it
	b.sock.Close()
}

// startAgent starts the sandbox's container with start and returns once
// its agent answers, handing the agent its socket and token on the way
// (no token: a container whose environment carries it, token.go). The
// caller holds the sandbox's boot lock.
//
// Under gVisor there is no handoff: a socket passed from the host cannot
// cross into gVisor's kernel, so the agent creates its socket itself (runsc
// makes it on the host, in a socket directory left writable for that), and
// every socket in that directory is made by runsc's file proxy, so the
// peer check below can only tell that a connection is this sandbox's, not
// that the agent answers it. The bounds on everything the daemon reads
// from an agent (package agent) are what hold there. The token goes in a
// file of the socket directory, written while the container is not
// running and removed by the agent before it serves (handoff.WriteTokenFile).
func (r *Runtime) startAgent(ctx context.Context, sandboxID string, gvisor bool, token []byte, start func() error) error {
	r.forgetPID(sandboxID)
	if gvisor {
		dir := r.SocketDir(sandboxID)
		if len(token) > 0 {
			if err := handoff.WriteTokenFile(dir, token); err != nil {
				return err
			}
		}
		// The agent removed it; one it did not take (it never started)
		// must not outlive the boot.
		defer func() {
			if err := handoff.RemoveTokenFile(dir); err != nil {
				r.log.Warn("agent token file", "sandbox", sandboxID, "err", err)
			}
		}()
		if err := start(); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		if pid, err := r.enginePID(ctx, sandboxID); err == nil {
			r.setPID(sandboxID, pid)
		}
		return r.waitAgentReady(ctx, sandboxID)
	}
	b, err := prepareBoot(r.SocketDir(sandboxID))
	if err != nil {
		return err
	}
	defer b.close()
	if err := start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	offerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Without a pid (the container already exited, or the engine did not
	// answer) there is nobody to hand the socket to; readiness below
	// reports why.
	if pid, err := r.enginePID(ctx, sandboxID); err == nil {
		r.setPID(sandboxID, pid)
		wg.Go(func() { r.offer(offerCtx, sandboxID, b, pid, token) })
	}
	return r.waitAgentReady(ctx, sandboxID)
}

func (r *Runtime) offer(ctx context.Context, sandboxID string, b *boot, pid int, token []byte) {
	err := handoff.Offer(ctx, b.ln, b.sock, pid, token, func(peer int) {
		r.log.Warn("agent socket handoff refused to a process other than the sandbox's agent",
			"sandbox", sandboxID, "peer_pid", peer, "agent_pid", pid)
	})
	if err != nil && ctx.Err() == nil {
		r.log.Warn("agent socket handoff", "sandbox", sandboxID, "err", err)
	}
}

// enginePID is the host pid of the sandbox's init process (the agent), as
// the engine reports it; an error when the container is not running.
func (r *Runtime) enginePID(ctx context.Context, sandboxID string) (int, error) {
	res, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return 0, runtime.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	if s := res.Container.State; s == nil || !s.Running || s.Pid <= 0 {
		return 0, errors.New("container is not running")
	}
	return res.Container.State.Pid, nil
}

func (r *Runtime) cachedPID(sandboxID string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, ok := r.pids[sandboxID]
	return pid, ok
}

func (r *Runtime) setPID(sandboxID string, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pids[sandboxID] = pid
}

func (r *Runtime) forgetPID(sandboxID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pids, sandboxID)
}

// checkPeer refuses conn, a connection to the sandbox's agent socket,
// unless the process listening on it is the sandbox's agent. A peer that
// is not the cached pid is compared once more with a fresh answer from
// the engine: the pid is not cached after a daemon restart, and changes
// when the container was restarted behind the runtime's back.
func (r *Runtime) checkPeer(ctx context.Context, sandboxID string, conn net.Conn) error {
	got, err := handoff.PeerPID(conn)
	if err != nil {
		return err
	}
	if want, ok := r.cachedPID(sandboxID); ok && got == want {
		return nil
	}
	want, err := r.enginePID(ctx, sandboxID)
	if err != nil {
		return fmt.Errorf("check the agent socket's peer: %w", engineErr(err))
	}
	r.setPID(sandboxID, want)
	switch got {
	case want:
		return nil
	case 0:
	default:
		if r.gvisorPeer(ctx, sandboxID, got, want) {
			return nil
		}
	}
	switch got {
	case 0:
		return fmt.Errorf("%w: the peer's pid is not visible here (sandboxd must share the engine's pid namespace)", runtime.ErrAgentImpostor)
	}
	r.log.Warn("agent socket answered by a process other than the sandbox's agent: refused",
		"sandbox", sandboxID, "peer_pid", got, "agent_pid", want)
	return fmt.Errorf("%w: peer pid %d, agent pid %d", runtime.ErrAgentImpostor, got, want)
}

// gvisorPeer reports whether peer is runsc's file proxy of sandbox id
// (whose engine pid is want): the sandbox runs under gVisor and the two
// are siblings. Only asked when the peer is not the engine's pid.
func (r *Runtime) gvisorPeer(ctx context.Context, sandboxID string, peer, want int) bool {
	gv, err := r.underGVisor(ctx, sandboxID)
	return err == nil && gv && sameParent(peer, want)
}

// underGVisor reports whether the engine runs sandbox id under runsc.
func (r *Runtime) underGVisor(ctx context.Context, sandboxID string) (bool, error) {
	gvisor, _, err := r.inspectBoot(ctx, sandboxID)
	return gvisor, err
}

// bootInfo is what a boot of sandbox id needs of its container: whether
// it runs under runsc, and its agent token (token.go; nil for a
// container that carries it in its environment).
func (r *Runtime) bootInfo(ctx context.Context, sandboxID string) (gvisor bool, token []byte, err error) {
	gvisor, sealed, err := r.inspectBoot(ctx, sandboxID)
	if err != nil {
		return false, nil, err
	}
	token, err = r.openToken(sandboxID, sealed)
	return gvisor, token, err
}

func (r *Runtime) inspectBoot(ctx context.Context, sandboxID string) (gvisor bool, sealedToken string, err error) {
	res, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return false, "", runtime.ErrNotFound
	}
	if err != nil {
		return false, "", err
	}
	if c := res.Container.Config; c != nil {
		sealedToken = c.Labels[labelAgentToken]
	}
	return res.Container.HostConfig != nil && res.Container.HostConfig.Runtime == r.opts.GVisorRuntime, sealedToken, nil
}

// sameParent reports whether host processes a and b are children of one
// process: under gVisor the engine reports runsc's sandbox process as the
// container's pid, and the host sockets the sandbox makes belong to
// runsc's file proxy, its sibling under the container's shim. Under runc
// no process of the sandbox is a sibling of its init (they all descend
// from it).
func sameParent(a, b int) bool {
	pa, errA := parentPID(a)
	pb, errB := parentPID(b)
	return errA == nil && errB == nil && pa == pb && pa > 1
}

// parentPID reads a host process's parent from /proc.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("malformed /proc stat")
	}
	return strconv.Atoi(f[1])
}

// mayLowerOOMScores reports whether this process holds CAP_SYS_RESOURCE,
// which lowering an oom_score_adj below zero takes. The engine runs beside
// the daemon with the same privileges in the usual setups (both root on
// the host); where the daemon lacks it, so does the engine (inside some
// VMs and containers), and asking it for a negative score would make
// every container start fail.
func mayLowerOOMScores() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const bit = unix.CAP_SYS_RESOURCE
	return data[bit/32].Effective&(1<<(bit%32)) != 0
}
