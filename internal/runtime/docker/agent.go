package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Readiness polling: start fast (a healthy agent is up within tens of
// milliseconds of the container starting), back off to a ceiling that keeps
// the engine load of a slow boot small.
const (
	probeBackoffMin = 5 * time.Millisecond
	probeBackoffMax = 100 * time.Millisecond
	// probeTimeout bounds one health request: the agent answers /health
	// without doing work, so a slow answer is as bad as none.
	probeTimeout = 2 * time.Second
	// stateCheckEvery spaces out the container state checks made between
	// failed probes, which notice an agent that exited.
	stateCheckEvery = 100 * time.Millisecond
	// logsTailLines and logsTailBytes bound the output quoted in errors.
	logsTailLines = "20"
	logsTailBytes = 2048
)

// DialAgent implements runtime.Runtime.
func (r *Runtime) DialAgent(ctx context.Context, sandboxID string) (net.Conn, error) {
	if err := checkID(sandboxID); err != nil {
		return nil, err
	}
	if _, err := os.Stat(r.SocketDir(sandboxID)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("dial agent of sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	conn, err := r.dialAgent(ctx, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("dial agent of sandbox %s: %w", sandboxID, err)
	}
	return conn, nil
}

// dialAgent connects to the sandbox's agent socket and refuses the
// connection unless the agent is what answers (checkPeer).
func (r *Runtime) dialAgent(ctx context.Context, sandboxID string) (net.Conn, error) {
	conn, err := dialSocket(ctx, r.AgentSocketPath(sandboxID))
	if err != nil {
		return nil, err
	}
	if err := r.checkPeer(ctx, sandboxID, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// errNotASocket is an agent socket path that the sandbox replaced with
// something else (a symlink, a file).
var errNotASocket = errors.New("agent socket path is not a socket")

// dialSocket connects to the unix socket at path without following
// anything planted there. The socket directory is read-only inside the
// sandbox, but it was writable before, and a sandbox that could write it
// could swap agent.sock for a symlink to a host socket — the Docker
// engine's, say — which the daemon, running as root, would dial. So, as a
// second line: open the path itself with O_PATH|O_NOFOLLOW (a symlink
// fails), check the opened inode is a socket, and connect through
// /proc/self/fd, which names exactly that inode: nothing can be swapped
// between check and use.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s: %w", path, errNotASocket)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// WaitAgentReady implements runtime.Runtime. It is bounded by
// Options.AgentReadyTimeout and by ctx, whichever ends first.
func (r *Runtime) WaitAgentReady(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if err := r.waitAgentReady(ctx, sandboxID); err != nil {
		return fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// waitAgentReady is WaitAgentReady for a valid id, without the id in its
// error (callers add it).
func (r *Runtime) waitAgentReady(ctx context.Context, sandboxID string) error {
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, r.opts.AgentReadyTimeout)
	defer cancel()

	hc := r.agentHTTPClient(sandboxID)
	defer hc.CloseIdleConnections()

	backoff := probeBackoffMin
	var lastErr error
	var lastStateCheck time.Time
	for {
		lastErr = probeHealth(waitCtx, hc)
		if lastErr == nil {
			r.log.Debug("agent ready", "sandbox", sandboxID, "waited", time.Since(start))
			return nil
		}
		// Stop early when the container is not running any more: its agent
		// exited (or never started) and will not answer.
		if time.Since(lastStateCheck) >= stateCheckEvery {
			lastStateCheck = time.Now()
			st, err := r.Inspect(waitCtx, sandboxID)
			if err == nil && st.State != runtime.StateRunning {
				return r.notReady(ctx, sandboxID, start, fmt.Errorf("container is %s: %w", st.State, lastErr))
			}
		}
		select {
		case <-waitCtx.Done():
			// Report the caller's cancellation or our own deadline, with
			// the probe error that explains why we were still waiting.
			if cause := ctx.Err(); cause != nil {
				return r.notReady(ctx, sandboxID, start, fmt.Errorf("%w; last probe: %w", cause, lastErr))
			}
			// Our own deadline: the last probe, cut short by it, must not
			// read as the caller's context ending (it is text, not wrapped).
			return r.notReady(ctx, sandboxID, start, fmt.Errorf("readiness deadline %s passed; last probe: %v", r.opts.AgentReadyTimeout, lastErr))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, probeBackoffMax)
	}
}

// agentHTTPClient is an HTTP client whose every connection is the sandbox's
// agent socket.
func (r *Runtime) agentHTTPClient(sandboxID string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.dialAgent(ctx, sandboxID)
		},
		DisableKeepAlives: true,
		// The probe reads 4 KiB of body at most (runtime.ProbeHealth) and
		// the agent's headers are a few hundred bytes: bound them too.
		MaxResponseHeaderBytes: 16 << 10,
		DisableCompression:     true,
	}}
}

// probeHealth sends one GET /health; nil means 204 No Content.
func probeHealth(ctx context.Context, hc *http.Client) error {
	return runtime.ProbeHealth(ctx, hc, probeTimeout)
}

// notReady builds the *AgentNotReadyError, gathering state and output with a
// fresh context (the caller's may be the reason we stopped).
func (r *Runtime) notReady(ctx context.Context, sandboxID string, start time.Time, last error) error {
	e := &runtime.AgentNotReadyError{SandboxID: sandboxID, Waited: time.Since(start), Err: last}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if st, err := r.Inspect(ctx, sandboxID); err == nil {
		e.Status = st
	}
	e.LogsTail = r.logsTail(ctx, sandboxID)
	return e
}

// logsTail returns the last lines of the container's output, best effort.
func (r *Runtime) logsTail(ctx context.Context, sandboxID string) string {
	rc, err := r.cli.ContainerLogs(ctx, r.name(sandboxID), client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: logsTailLines})
	if err != nil {
		if !cerrdefs.IsNotFound(err) {
			r.log.Debug("agent logs", "sandbox", sandboxID, "err", err)
		}
		return ""
	}
	defer rc.Close()
	var buf bytes.Buffer
	// Containers run without a TTY, so the stream is multiplexed.
	if _, err := stdcopy.StdCopy(&buf, &buf, io.LimitReader(rc, 64<<10)); err != nil {
		r.log.Debug("agent logs", "sandbox", sandboxID, "err", err)
	}
	out := strings.TrimSpace(buf.String())
	if len(out) > logsTailBytes {
		out = "…" + out[len(out)-logsTailBytes:]
	}
	return out
}
