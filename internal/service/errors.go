package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Sentinel errors of the domain. The API edges map each to their own wire
// shape (native JSON codes, E2B and Daytona bodies) in one function apiece.
var (
	// ErrInvalidArgument marks a request that can never succeed as sent.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound is a sandbox (or port, domain, file) that does not exist,
	// or that the caller may not see.
	ErrNotFound = errors.New("not found")
	// ErrNameConflict is a create whose name another sandbox holds.
	ErrNameConflict = errors.New("name conflict")
	// ErrHostnameConflict is a custom hostname another sandbox holds.
	ErrHostnameConflict = errors.New("hostname conflict")
	// ErrPermissionDenied is a file operation the sandbox's own
	// permissions refuse (the user may not read or write the path).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrConflict is a request that contradicts the current state.
	ErrConflict = errors.New("conflict")
	// ErrPaused is a call that needs the sandbox's processes (exec, files,
	// ports) on a paused sandbox. It matches ErrConflict too: edges that
	// know no more answer it as a conflict.
	ErrPaused = fmt.Errorf("sandbox is paused; resume it: %w", ErrConflict)
	// ErrCapacityExhausted is a create past the host's budget; retry later.
	ErrCapacityExhausted = errors.New("capacity exhausted")
	// ErrQuotaExceeded is a create or start past the owner's quota
	// (a *QuotaError, which also matches ErrCapacityExhausted); retry
	// after stopping or destroying a sandbox.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrIdempotencyKeyReused is an Idempotency-Key sent again with another body.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrImageNotPresent is a create whose image is not on the host (a
	// *FieldError for "image" that also matches it): images are never
	// pulled. A facade may answer it as its own "template not found".
	ErrImageNotPresent = errors.New("image not present")
	// ErrUnavailable is a dependency that is down or a node that may not
	// serve the call; retry later or elsewhere.
	ErrUnavailable = errors.New("unavailable")
	// ErrDiskFull is a write into a sandbox (an upload) past its disk
	// limit, or past what its file system has left (ENOSPC, EDQUOT).
	// Nothing was written in its place; free space in the sandbox first.
	ErrDiskFull = errors.New("the sandbox's disk is full")
)

// FieldError is a validation failure of one request field. It unwraps to
// ErrInvalidArgument, and to Kind when set.
type FieldError struct {
	Field  string
	Reason string
	// Kind, when set, is a sentinel that says more (ErrImageNotPresent).
	Kind error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidArgument) true, and
// errors.Is(err, Kind).
func (e *FieldError) Unwrap() []error {
	if e.Kind != nil {
		return []error{ErrInvalidArgument, e.Kind}
	}
	return []error{ErrInvalidArgument}
}

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// QuotaError is a refusal for the owner's quota. Its Reason names the
// quota and is safe to show the caller (it is about the caller's own
// tenant).
type QuotaError struct{ Reason string }

func (e *QuotaError) Error() string { return e.Reason }

// Unwrap makes the refusal both ErrCapacityExhausted (429, retryable) and
// ErrQuotaExceeded.
func (e *QuotaError) Unwrap() []error { return []error{ErrCapacityExhausted, ErrQuotaExceeded} }

// RetryAfterError carries how long a caller should wait before retrying.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying sentinel.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// storeKinds lists, for each sentinel of the domain, the store sentinels
// that mean the same thing. The service passes a store error up with its
// context rather than re-wrapping it at each of its many store calls; this
// table is the one place where the store's words become the domain's, and
// Is, the one classifier the edges use, applies it.
var storeKinds = map[error][]error{
	ErrIdempotencyKeyReused: {store.ErrIdempotencyKeyReused},
	ErrInvalidArgument:      {store.ErrInvalidArgument},
	ErrNotFound:             {store.ErrNotFound},
	ErrNameConflict:         {store.ErrNameConflict},
	ErrHostnameConflict:     {store.ErrHostnameConflict},
	ErrConflict:             {store.ErrStateConflict, store.ErrPortProtocolConflict},
}

// Is reports whether err is the domain sentinel target: errors.Is, or the
// store sentinel that target stands for. The edges classify errors with
// it, so that they never need to know the store's words.
func Is(err, target error) bool {
	if errors.Is(err, target) {
		return true
	}
	for _, s := range storeKinds[target] {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
