package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// Session is a shell session: a long-lived bash in the sandbox that runs
// commands one after another, shell state carried over. It lives in the
// sandbox's agent, survives a restart of the daemon and ends with the
// sandbox.
type Session struct {
	ID string `json:"id"`
	// Commands are the last 1000, oldest first.
	Commands []SessionCommand `json:"commands"`
}

// SessionCommand is one command of a session; ExitCode is nil while it
// runs.
type SessionCommand struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// CreateSessionRequest starts a session named ID (1-128 letters, digits,
// '.', '_' or '-'), as User (root when empty), in Cwd (the user's home
// when empty).
type CreateSessionRequest struct {
	ID   string `json:"id"`
	User string `json:"user,omitempty"`
	Cwd  string `json:"cwd,omitempty"`
}

// SessionExecResult is a command's outcome: with Async only its ID.
type SessionExecResult struct {
	ID       string  `json:"id"`
	ExitCode *int    `json:"exit_code,omitempty"`
	Output   *string `json:"output,omitempty"`
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
}

// SessionLogs is what a command kept; Output is both streams in arrival
// order.
type SessionLogs struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

func sessionSegs(id string, rest ...string) []string {
	return append([]string{"v1", "sandboxes", id, "sessions"}, rest...)
}

// CreateSession starts a session. An id in use fails with ErrConflict.
func (c *Client) CreateSession(ctx context.Context, id string, req CreateSessionRequest) (*Session, error) {
	var s Session
	r := &request{method: http.MethodPost, segs: sessionSegs(id), retry: retryNever}
	if err := c.do(ctx, r, req, &s); err != nil {
		return nil, fmt.Errorf("create session %q in sandbox %q: %w", req.ID, id, err)
	}
	return &s, nil
}

// ListSessions returns a sandbox's sessions, by id.
func (c *Client) ListSessions(ctx context.Context, id string) ([]Session, error) {
	var out struct {
		Items []Session `json:"items"`
	}
	r := &request{method: http.MethodGet, segs: sessionSegs(id), retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list sessions of sandbox %q: %w", id, err)
	}
	return out.Items, nil
}

// GetSession returns a session and its commands.
func (c *Client) GetSession(ctx context.Context, id, sid string) (*Session, error) {
	var s Session
	r := &request{method: http.MethodGet, segs: sessionSegs(id, sid), retry: retrySafe}
	if err := c.do(ctx, r, nil, &s); err != nil {
		return nil, fmt.Errorf("get session %q of sandbox %q: %w", sid, id, err)
	}
	return &s, nil
}

// DeleteSession kills a session's shell and what it runs.
func (c *Client) DeleteSession(ctx context.Context, id, sid string) error {
	r := &request{method: http.MethodDelete, segs: sessionSegs(id, sid), retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("delete session %q of sandbox %q: %w", sid, id, err)
	}
	return nil
}

// SessionExec runs command in a session after those before it; with
// async it returns the command's id at once, else its outcome when it
// ends. It is not retried (a retry would run the command twice).
func (c *Client) SessionExec(ctx context.Context, id, sid, command string, async bool) (*SessionExecResult, error) {
	var out SessionExecResult
	in := struct {
		Command string `json:"command"`
		Async   bool   `json:"async,omitempty"`
	}{command, async}
	r := &request{method: http.MethodPost, segs: sessionSegs(id, sid, "exec"), retry: retryNever}
	if err := c.do(ctx, r, in, &out); err != nil {
		return nil, fmt.Errorf("exec in session %q of sandbox %q: %w", sid, id, err)
	}
	return &out, nil
}

// GetSessionCommand returns a command of a session.
func (c *Client) GetSessionCommand(ctx context.Context, id, sid, cid string) (*SessionCommand, error) {
	var out SessionCommand
	r := &request{method: http.MethodGet, segs: sessionSegs(id, sid, "commands", cid), retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("get command %q of session %q: %w", cid, sid, err)
	}
	return &out, nil
}

// SessionCommandLogs returns what a command kept so far.
func (c *Client) SessionCommandLogs(ctx context.Context, id, sid, cid string) (*SessionLogs, error) {
	var out SessionLogs
	r := &request{method: http.MethodGet, segs: sessionSegs(id, sid, "commands", cid, "logs"), retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("logs of command %q of session %q: %w", cid, sid, err)
	}
	return &out, nil
}

// FollowSessionCommand calls out with each chunk of a command's output
// (stderr says which stream), the kept output first, until the command
// ends, and returns its exit code (nil when the stream ended before it,
// e.g. the session was deleted).
func (c *Client) FollowSessionCommand(ctx context.Context, id, sid, cid string, out func(stderr bool, data string) error) (*int, error) {
	r := &request{method: http.MethodGet, segs: sessionSegs(id, sid, "commands", cid, "logs"),
		query: url.Values{"follow": {"true"}}, retry: retryNever}
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("follow command %q of session %q: %w", cid, sid, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Stdout   *string `json:"stdout"`
			Stderr   *string `json:"stderr"`
			ExitCode *int    `json:"exit_code"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("follow command %q: decode: %w", cid, err)
		}
		switch {
		case line.ExitCode != nil:
			return line.ExitCode, nil
		case line.Stdout != nil:
			err = out(false, *line.Stdout)
		case line.Stderr != nil:
			err = out(true, *line.Stderr)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("follow command %q: %w", cid, err)
	}
	return nil, nil
}

// SessionInput writes data to a session's shell, which its running
// command cid reads. It fails with ErrConflict once the command ended.
func (c *Client) SessionInput(ctx context.Context, id, sid, cid, data string) error {
	in := struct {
		Data string `json:"data"`
	}{data}
	r := &request{method: http.MethodPost, segs: sessionSegs(id, sid, "commands", cid, "input"), retry: retryNever}
	if err := c.do(ctx, r, in, nil); err != nil {
		return fmt.Errorf("input to command %q of session %q: %w", cid, sid, err)
	}
	return nil
}
