package process

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
)

// Errors of the process service. Handlers wrap them with detail; [toConnect]
// turns them into Connect codes.
var (
	// ErrNotFound: no tracked process matches the selector.
	ErrNotFound = errors.New("process not found")
	// ErrInvalid: the request cannot be carried out as asked (no command,
	// missing cwd, an unknown signal, an empty selector).
	ErrInvalid = errors.New("invalid argument")
	// ErrNoInput: the process has no input of the kind the request uses
	// (stdin was disabled or closed, or input for a PTY sent to a pipe).
	ErrNoInput = errors.New("process input unavailable")
	// ErrStart: the process could not be started (no such executable,
	// permission denied).
	ErrStart = errors.New("cannot start process")
)

// toConnect maps an error of this package to a Connect error. It is the only
// place that chooses codes; errors that already are Connect errors pass.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	var se *StartError
	switch {
	case errors.As(err, &se):
		// envd answers invalid_argument here too; the exit status a
		// shell would give rides along for sandboxd's own client.
		ce := connect.NewError(connect.CodeInvalidArgument, err)
		if se.ExitCode != 0 {
			ce.Meta().Set(HeaderStartExitCode, strconv.Itoa(se.ExitCode))
		}
		return ce
	case errors.Is(err, ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, ErrInvalid),
		errors.Is(err, ErrStart), // envd answers invalid_argument here too
		errors.Is(err, account.ErrInvalid),
		errors.Is(err, account.ErrUnknownUser):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrNoInput), errors.Is(err, ErrNotPTY):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, ErrClosed):
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, err)
}

var (
	// ErrNotPTY: a terminal operation (resize, PTY input) on a process that
	// has no terminal, or pipe operations on one that has.
	ErrNotPTY = errors.New("wrong terminal mode for process")
	// ErrClosed: the service is shutting down and starts nothing new.
	ErrClosed = errors.New("process service is shutting down")
)

// HeaderStartExitCode, on a Start refused because the program could not
// be executed, is the exit status a shell gives for the same failure:
// 127 for a program that is not there, 126 for one that cannot be
// executed. sandboxd's client (internal/agent) reads it so that its exec
// of a missing program exits 127 like sh and docker exec; E2B's SDK
// ignores it and sees envd's invalid_argument.
const HeaderStartExitCode = "X-Sandboxd-Start-Exit-Code"

// StartError is a process that could not be started. It is ErrStart.
type StartError struct {
	Path string
	Err  error
	// ExitCode is a shell's status for the failure: 127 (not found),
	// 126 (not executable), 0 when the failure is of another kind.
	ExitCode int
}

func (e *StartError) Error() string {
	return fmt.Sprintf("%v: %s: %v", ErrStart, e.Path, e.Err)
}

// Unwrap makes the error ErrStart, and Err.
func (e *StartError) Unwrap() []error { return []error{ErrStart, e.Err} }

// startError classifies err, the failure to start path, by its errno.
func startError(path string, err error) error {
	se := &StartError{Path: path, Err: err}
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		se.ExitCode = 127
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.EPERM):
		se.ExitCode = 126
	}
	return se
}
