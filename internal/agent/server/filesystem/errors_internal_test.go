package filesystem

import (
	"context"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
)

// TestToConnect pins the mapping for errors the other tests cannot provoke
// as root (EACCES, EPERM) or on a healthy disk (ENOSPC).
func TestToConnect(t *testing.T) {
	pathErr := func(errno syscall.Errno) error { return &fs.PathError{Op: "open", Path: "/x", Err: errno} }
	for _, tc := range []struct {
		err  error
		want connect.Code
	}{
		{pathErr(syscall.EACCES), connect.CodePermissionDenied},
		{pathErr(syscall.EPERM), connect.CodePermissionDenied},
		{pathErr(syscall.ENOENT), connect.CodeNotFound},
		{pathErr(syscall.EEXIST), connect.CodeAlreadyExists},
		{pathErr(syscall.ENOTEMPTY), connect.CodeAlreadyExists},
		{pathErr(syscall.ENOTDIR), connect.CodeInvalidArgument},
		{pathErr(syscall.ENOSPC), connect.CodeResourceExhausted},
		{pathErr(syscall.EXDEV), connect.CodeFailedPrecondition},
		{pathErr(syscall.EROFS), connect.CodeFailedPrecondition},
		{pathErr(syscall.EBUSY), connect.CodeFailedPrecondition},
		{pathErr(syscall.ETXTBSY), connect.CodeFailedPrecondition},
		{pathErr(syscall.ENXIO), connect.CodeInvalidArgument},
		{pathErr(syscall.EIO), connect.CodeInternal},
		{fmt.Errorf("wrapped: %w", account.ErrUnknownUser), connect.CodeInvalidArgument},
		{fmt.Errorf("x: %w", ErrUnknownWatcher), connect.CodeNotFound},
		{fmt.Errorf("x: %w", ErrTooManyWatchers), connect.CodeResourceExhausted},
		{ErrClosed, connect.CodeUnavailable},
		{context.Canceled, connect.CodeCanceled},
		{connect.NewError(connect.CodeAborted, fmt.Errorf("kept")), connect.CodeAborted},
	} {
		if got := connect.CodeOf(toConnect(tc.err)); got != tc.want {
			t.Errorf("toConnect(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if toConnect(nil) != nil {
		t.Error("toConnect(nil) != nil")
	}
}
