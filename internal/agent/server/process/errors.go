package process

import (
	"errors"

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
	switch {
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
