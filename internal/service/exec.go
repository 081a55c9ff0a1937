package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/store"
)

// ExecRequest is a command to run to completion. Exactly one of Cmd (an
// argv) and Command (a line for /bin/sh -c) is set.
type ExecRequest struct {
	Cmd     []string
	Command string
	Env     map[string]string
	Cwd     string
	User    string
	Stdin   []byte
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr (0: agent.DefaultMaxOutput).
	MaxOutput int
}

// ExecResult is how a command ended and what it printed.
type ExecResult = agent.ExecResult

const maxExecTimeout = 24 * time.Hour

// argv turns Cmd or Command into the argv the agent runs.
func argv(cmd []string, command string) ([]string, error) {
	switch {
	case len(cmd) > 0 && command != "":
		return nil, invalid("cmd", "give either cmd or command, not both")
	case len(cmd) > 0:
		for _, a := range cmd {
			if strings.ContainsRune(a, 0) {
				return nil, invalid("cmd", "arguments may not contain NUL")
			}
		}
		if cmd[0] == "" {
			return nil, invalid("cmd", "the program name is empty")
		}
		return cmd, nil
	case command != "":
		if strings.ContainsRune(command, 0) {
			return nil, invalid("command", "may not contain NUL")
		}
		return []string{"/bin/sh", "-c", command}, nil
	}
	return nil, invalid("cmd", "give cmd (an argv) or command (a shell line)")
}

// Exec runs a command in a running sandbox and waits for it. A non-zero
// exit code is a result, not an error. Exec is not idempotent (the command
// runs once per call); the command's own effects are the caller's concern.
func (s *Service) Exec(ctx context.Context, c Caller, idOrName string, req ExecRequest) (*ExecResult, error) {
	args, err := argv(req.Cmd, req.Command)
	if err != nil {
		return nil, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return nil, err
	}
	if req.Timeout < 0 || req.Timeout > maxExecTimeout {
		return nil, invalid("timeout_s", "must be between 0 and %d seconds", int(maxExecTimeout.Seconds()))
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	res, err := ac.Exec(ctx, agent.ExecRequest{
		Cmd: args, Env: req.Env, Cwd: req.Cwd, User: req.User,
		Stdin: req.Stdin, Timeout: req.Timeout, MaxOutput: req.MaxOutput,
	})
	if code, stderr, ok := NotExecuted(err); ok {
		// What sh and docker exec answer: an exit status, not an error.
		return &agent.ExecResult{ExitCode: code, Exited: true, Stderr: []byte(stderr)}, nil
	}
	if err != nil {
		return nil, agentErr(err)
	}
	return res, nil
}

// NotExecuted reports whether err is a program the agent could not
// execute, and then the exit status a shell gives for it (127: not
// found, 126: not executable) and the line a shell writes on stderr. The
// native API answers such an exec as a result with that status, not as
// an error, so scripts see what sh and docker exec give them.
func NotExecuted(err error) (exitCode int, stderr string, ok bool) {
	var ne *agent.NotExecutedError
	if !errors.As(err, &ne) {
		return 0, "", false
	}
	switch ne.ExitCode {
	case 127:
		return 127, fmt.Sprintf("sandboxd: %s: command not found\n", ne.Program), true
	case 126:
		return 126, fmt.Sprintf("sandboxd: %s: cannot execute: not an executable program, or permission denied\n", ne.Program), true
	}
	return ne.ExitCode, fmt.Sprintf("sandboxd: %s: %s\n", ne.Program, ne.Msg), true
}

// ProcessRequest is a process to start and stream (see StartProcess).
type ProcessRequest struct {
	Cmd     []string
	Command string
	Env     map[string]string
	Cwd     string
	User    string
	// PTY, when set, runs the process on a terminal of that size.
	PTY *agent.Size
}

// StartProcess starts a process in a running sandbox with stdin open and
// returns its stream. The caller owns the stream: closing it does not kill
// the process, so a caller that wants that (the WebSocket edge) signals it
// first.
func (s *Service) StartProcess(ctx context.Context, c Caller, idOrName string, req ProcessRequest) (*agent.Process, error) {
	args, err := argv(req.Cmd, req.Command)
	if err != nil {
		return nil, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return nil, err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	p, err := ac.StartProcess(ctx, agent.StartRequest{
		Cmd: args, Env: req.Env, Cwd: req.Cwd, User: req.User, Stdin: true, PTY: req.PTY,
	})
	if err != nil {
		return nil, agentErr(err)
	}
	return p, nil
}

// runningAgent resolves a sandbox the caller may see, checks that it is
// running, and returns its agent client.
func (s *Service) runningAgent(ctx context.Context, c Caller, idOrName string) (*agent.Client, error) {
	_, ac, err := s.runningSandbox(ctx, c, idOrName)
	return ac, err
}

// runningSandbox is runningAgent that also returns the sandbox's id.
func (s *Service) runningSandbox(ctx context.Context, c Caller, idOrName string) (string, *agent.Client, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return "", nil, err
	}
	switch row.State {
	case store.StateRunning:
	case store.StatePaused:
		return "", nil, fmt.Errorf("sandbox %s: %w", row.ID, ErrPaused)
	case store.StateCreating:
		return "", nil, beingCreated(row.ID)
	default:
		return "", nil, fmt.Errorf("sandbox %s is %s, not running: %w", row.ID, row.State, ErrConflict)
	}
	ac, err := s.Agent(ctx, row.ID)
	return row.ID, ac, err
}

// beingCreated is a call for a sandbox whose create (or, in a cluster, its
// recreate after its node departed) has not finished: it is retryable,
// as the sandbox is about to run.
func beingCreated(id string) error {
	return Unavailable(fmt.Sprintf("sandbox %s is being created (or recreated after its node departed)", id), nil)
}

// FileEntry is one directory entry inside a sandbox.
type FileEntry struct {
	Name       string
	Path       string
	Type       string // "file", "dir" or "symlink"
	Size       int64
	Mode       uint32
	ModifiedAt time.Time
}

// validPath rejects what no file system accepts before any call is made.
func validPath(p string) error {
	if p == "" {
		return invalid("path", "is required")
	}
	if strings.ContainsRune(p, 0) {
		return invalid("path", "may not contain NUL")
	}
	return nil
}

// Upload streams r to path inside a running sandbox (parents created).
// Repeating it with the same content leaves the same file.
func (s *Service) Upload(ctx context.Context, c Caller, idOrName, path, user string, r io.Reader) error {
	if err := validPath(path); err != nil {
		return err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return err
	}
	return agentErr(ac.Upload(ctx, path, r, user))
}

// Download streams the file at path out of a running sandbox. The caller
// closes the reader. size is -1 when unknown.
func (s *Service) Download(ctx context.Context, c Caller, idOrName, path, user string) (rc io.ReadCloser, size int64, err error) {
	if err := validPath(path); err != nil {
		return nil, 0, err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return nil, 0, err
	}
	// The size is what the agent sends, not what stat says: a kernel
	// file's stat size (0, or a page) is not its length.
	rc, size, err = ac.DownloadSized(ctx, path, user)
	if err != nil {
		return nil, 0, agentErr(err)
	}
	return rc, size, nil
}

// ListFiles lists the entries of the directory at path.
func (s *Service) ListFiles(ctx context.Context, c Caller, idOrName, path, user string) ([]FileEntry, error) {
	if err := validPath(path); err != nil {
		return nil, err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	req := connect.NewRequest(&fsrpc.ListDirRequest{Path: path, Depth: 1})
	agent.SetUser(req.Header(), user)
	resp, err := ac.Filesystem().ListDir(ctx, req)
	if err != nil {
		return nil, agentErr(err)
	}
	out := make([]FileEntry, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		kind := "file"
		switch e.GetType() {
		case fsrpc.FileType_FILE_TYPE_DIRECTORY:
			kind = "dir"
		case fsrpc.FileType_FILE_TYPE_SYMLINK:
			kind = "symlink"
		}
		out = append(out, FileEntry{
			Name: e.GetName(), Path: e.GetPath(), Type: kind, Size: e.GetSize(),
			Mode: e.GetMode(), ModifiedAt: e.GetModifiedTime().AsTime(),
		})
	}
	return out, nil
}

// RemoveFile removes path (recursively) inside a running sandbox. Removing
// something already absent succeeds, so the call is safe to repeat.
func (s *Service) RemoveFile(ctx context.Context, c Caller, idOrName, path, user string) error {
	if err := validPath(path); err != nil {
		return err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return err
	}
	req := connect.NewRequest(&fsrpc.RemoveRequest{Path: path})
	agent.SetUser(req.Header(), user)
	if _, err := ac.Filesystem().Remove(ctx, req); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return agentErr(err)
	}
	return nil
}

// agentErr maps the agent's errors onto the service's sentinels: its
// Connect codes, and the statuses of its plain-HTTP file routes, whose
// message (the agent's, about the sandbox's own files) is kept. The
// message shown is the agent's own words, without the client's "agent:
// start …" context or Connect's code word: the caller's class says the
// code once.
func agentErr(err error) error {
	if err == nil {
		return nil
	}
	var he *agent.HTTPError
	if errors.As(err, &he) {
		return agentHTTPErr(he)
	}
	msg := agentMessage(err)
	if errors.Is(err, fs.ErrNotExist) {
		return refuse(ErrNotFound, err, "%s", msg)
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return refuse(ErrNotFound, err, "%s", msg)
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return refuse(ErrInvalidArgument, err, "%s", msg)
	case connect.CodePermissionDenied:
		return refuse(ErrPermissionDenied, err, "%s", msg)
	case connect.CodeAlreadyExists:
		return refuse(ErrConflict, err, "%s", msg)
	case connect.CodeUnavailable:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// agentMessage is what the agent said: a Connect error's message without
// its code, else the error's text.
func agentMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		return ce.Message()
	}
	return err.Error()
}

// agentHTTPErr maps an answer of the agent's /files routes. Their bodies
// are envd's {"code","message"}; only the message is kept.
func agentHTTPErr(he *agent.HTTPError) error {
	var body struct {
		Message string `json:"message"`
	}
	msg := he.Message
	if json.Unmarshal([]byte(he.Message), &body) == nil && body.Message != "" {
		msg = body.Message
	}
	switch he.StatusCode {
	case http.StatusNotFound:
		return refuse(ErrNotFound, he, "%s", msg)
	case http.StatusBadRequest:
		return &FieldError{Field: "path", Reason: msg}
	case http.StatusForbidden:
		return refuse(ErrPermissionDenied, he, "%s", msg)
	case http.StatusInsufficientStorage: // ENOSPC or EDQUOT: the disk limit
		return refuse(ErrDiskFull, he, "%s", msg)
	}
	return he
}
