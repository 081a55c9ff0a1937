package agent

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"
)

// DefaultMaxOutput caps each of stdout and stderr in [Client.Exec] when
// ExecRequest.MaxOutput is zero.
const DefaultMaxOutput = 1 << 20

// ExecRequest describes a command to run to completion.
type ExecRequest struct {
	// Cmd is the program and its arguments (see StartRequest.Cmd).
	Cmd  []string
	Env  map[string]string
	Cwd  string
	User string
	// Stdin, when not nil, is written to the process's stdin, which is
	// then closed. When nil the process reads /dev/null.
	Stdin []byte
	// Timeout bounds the command; the agent kills it when it passes, even
	// if this client is gone. Zero means unbounded.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr; output beyond it is read
	// and dropped and Truncated is set. Zero means DefaultMaxOutput.
	MaxOutput int
	// LogAs: see StartRequest.LogAs.
	LogAs string
}

// ExecResult is the outcome of a command that ran to completion.
type ExecResult struct {
	PID       uint32
	ExitCode  int
	Exited    bool
	Status    string
	Stdout    []byte
	Stderr    []byte
	Truncated bool
	Duration  time.Duration
}

// Exec runs a command to completion and collects its output. A non-zero
// exit code is a result, not an error; errors are transport failures, a
// command that cannot start (connect code invalid_argument), or the
// timeout (connect code deadline_exceeded). When ctx ends first, the
// process is killed (best effort) and ctx's error is returned.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (*ExecResult, error) {
	begin := time.Now()
	limit := r.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	p, err := c.StartProcess(ctx, StartRequest{
		Cmd: r.Cmd, Env: r.Env, Cwd: r.Cwd, User: r.User,
		Stdin: r.Stdin != nil, Lifetime: r.Timeout, LogAs: r.LogAs,
	})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if r.Stdin != nil {
		if len(r.Stdin) > 0 {
			if err := p.SendInput(ctx, r.Stdin); err != nil {
				return nil, err
			}
		}
		if err := p.CloseStdin(ctx); err != nil {
			return nil, err
		}
	}
	res := &ExecResult{PID: p.PID()}
	for {
		out, err := p.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = p.Signal(kctx, syscall.SIGKILL)
				cancel()
				return nil, fmt.Errorf("agent: exec %q: %w", r.Cmd[0], ctx.Err())
			}
			return nil, fmt.Errorf("agent: exec %q: %w", r.Cmd[0], err)
		}
		dst := &res.Stdout
		if out.Stream == Stderr {
			dst = &res.Stderr
		}
		if room := limit - len(*dst); room < len(out.Data) {
			out.Data = out.Data[:max(room, 0)]
			res.Truncated = true
		}
		*dst = append(*dst, out.Data...)
	}
	st, _ := p.Exit()
	res.ExitCode, res.Exited, res.Status = st.Code, st.Exited, st.Status
	res.Duration = time.Since(begin)
	return res, nil
}
