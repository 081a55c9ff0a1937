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
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

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
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", r.AgentSocketPath(sandboxID))
	if err != nil {
		return nil, fmt.Errorf("dial agent of sandbox %s: %w", sandboxID, err)
	}
	return conn, nil
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
			cause := ctx.Err()
			if cause == nil {
				cause = fmt.Errorf("readiness deadline %s passed", r.opts.AgentReadyTimeout)
			}
			return r.notReady(ctx, sandboxID, start, fmt.Errorf("%w; last probe: %w", cause, lastErr))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, probeBackoffMax)
	}
}

// agentHTTPClient is an HTTP client whose every connection is the sandbox's
// agent socket.
func (r *Runtime) agentHTTPClient(sandboxID string) *http.Client {
	sock := r.AgentSocketPath(sandboxID)
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
}

// probeHealth sends one GET /health; nil means 204 No Content.
func probeHealth(ctx context.Context, hc *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+runtime.HealthPath, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("GET %s: status %s, want 204", runtime.HealthPath, resp.Status)
	}
	return nil
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
	rc, err := r.cli.ContainerLogs(ctx, sandboxID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: logsTailLines})
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
