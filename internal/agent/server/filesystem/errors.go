package filesystem

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
)

// Errors of the filesystem service. Handlers wrap them with detail;
// [toConnect] turns them into Connect codes.
var (
	// ErrInvalid: the request cannot be carried out as asked (a file where
	// a directory is needed, removing "/").
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: the target of a create already exists.
	ErrExists = errors.New("already exists")
	// ErrUnknownWatcher: no polling watcher has the given id.
	ErrUnknownWatcher = errors.New("watcher not found")
	// ErrTooManyWatchers: the polling watcher limit is reached.
	ErrTooManyWatchers = errors.New("too many watchers")
	// ErrClosed: the service is shutting down.
	ErrClosed = errors.New("filesystem service is closed")
)

// toConnect maps an error to a Connect error. It is the only place that
// chooses codes; Connect errors pass unchanged.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(codeOf(err), err)
}

func codeOf(err error) connect.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, ErrInvalid),
		errors.Is(err, account.ErrInvalid),
		errors.Is(err, account.ErrUnknownUser),
		errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.EINVAL), // e.g. moving a directory into itself
		errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.ENXIO): // a socket or device where a file is needed
		return connect.CodeInvalidArgument
	case errors.Is(err, ErrUnknownWatcher), errors.Is(err, fs.ErrNotExist):
		return connect.CodeNotFound
	case errors.Is(err, ErrExists), errors.Is(err, fs.ErrExist): // EEXIST, ENOTEMPTY
		return connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission): // EACCES, EPERM
		return connect.CodePermissionDenied
	case errors.Is(err, ErrTooManyWatchers),
		errors.Is(err, syscall.ENOSPC), // also inotify's max_user_watches
		errors.Is(err, syscall.EDQUOT),
		errors.Is(err, syscall.EMFILE): // also inotify's max_user_instances
		return connect.CodeResourceExhausted
	case errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.EBUSY), // a mount point (the agent's binary, a volume)
		errors.Is(err, syscall.ETXTBSY):
		return connect.CodeFailedPrecondition
	case errors.Is(err, ErrClosed):
		return connect.CodeUnavailable
	default:
		return connect.CodeInternal
	}
}
