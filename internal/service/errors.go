package service

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
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
	// (a *QuotaError, which also matches ErrCapacityExhausted); it clears
	// only when the owner stops or destroys a sandbox, so it is not
	// retryable.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrIdempotencyKeyReused is an Idempotency-Key sent again with another body.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrImageNotPresent is a create whose image is not on the host and
	// could not be pulled (a *FieldError for "image", or an *ImageError,
	// that also matches it). A facade may answer it as its own "template
	// not found".
	ErrImageNotPresent = errors.New("image not present")
	// ErrImageTooLarge is an image refused because it is bigger than the
	// host's cap (--image-max-mb): a *FieldError for "image", so 400 and
	// not retryable on every edge. It is not ErrImageNotPresent: the image
	// exists, and no facade may answer it as "template not found".
	ErrImageTooLarge = errors.New("image larger than the host's cap")
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

// Error is a refusal worded once for the caller: Msg says what failed
// and, where there is something to do, what to do. Kind is the domain
// sentinel it is (the edges classify by it) and Err the cause, kept for
// errors.Is and for logs; neither is repeated in the message, so a
// sentinel's word ("invalid argument") or a lower package's prefix
// ("agent: start …: invalid_argument: …") never reaches the caller twice.
type Error struct {
	Kind error
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap makes the error Kind, and Err.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// refuse is an *Error of kind caused by cause (may be nil), its message
// format's.
func refuse(kind, cause error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// QuotaError is a refusal for the owner's quota. Its Reason names the
// quota and is safe to show the caller (it is about the caller's own
// tenant).
type QuotaError struct{ Reason string }

func (e *QuotaError) Error() string { return e.Reason }

// Unwrap makes the refusal both ErrCapacityExhausted and ErrQuotaExceeded;
// the edges answer ErrQuotaExceeded (403, not retryable: it clears only
// when the owner stops or destroys a sandbox) before ErrCapacityExhausted.
func (e *QuotaError) Unwrap() []error { return []error{ErrCapacityExhausted, ErrQuotaExceeded} }

// UnavailableError is ErrUnavailable with its cause in words safe to show
// any caller ("the cluster has no quorum", "the container engine is
// unreachable"): the edges answer Reason, never Err, whose text may name
// internal addresses.
type UnavailableError struct {
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return e.Reason + ": " + e.Err.Error()
}

// Unwrap makes the error ErrUnavailable (503, retryable), and Err.
func (e *UnavailableError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.Err}
}

// Unavailable is an *UnavailableError: err (may be nil) because of reason.
func Unavailable(reason string, err error) error { return &UnavailableError{Reason: reason, Err: err} }

// UnavailableReason is the shown cause of an unavailable err, "" when it
// names none.
func UnavailableReason(err error) string {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return ue.Reason
	}
	return ""
}

// Reasons an UnavailableError gives.
const (
	// ReasonNoQuorum is a call that needs the cluster while it cannot
	// commit (a majority of its members is gone).
	ReasonNoQuorum = "the cluster has no quorum"
	// ReasonEngineUnreachable is a call that needs the container engine
	// while it does not answer.
	ReasonEngineUnreachable = "the container engine is unreachable"
)

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

// The causes of a fault: the dependency that failed under a call. A
// fault answers 503 unavailable (retryable) naming its cause on every
// edge, and /readyz names the causes that last while it is asked.
const (
	// CauseEngine: the container engine does not answer.
	CauseEngine = "engine"
	// CauseDisk: the data directory's filesystem, or the engine's, is full.
	CauseDisk = "disk"
	// CauseStore: the database cannot be written (read-only, or I/O errors).
	CauseStore = "store"
)

// FaultError is a call that failed because a dependency did, named by
// Cause. It matches ErrUnavailable. Fault also recognizes the runtime's
// and the store's fault sentinels and the host's errnos unwrapped, so the
// service passes those up with their context like any other error.
type FaultError struct {
	Cause string
	Err   error
}

func (e *FaultError) Error() string { return FaultMessage(e.Cause) + ": " + e.Err.Error() }

// Unwrap makes errors.Is(err, ErrUnavailable) true, and reaches Err.
func (e *FaultError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Fault reports whether err is a fault of a dependency and which: a
// *FaultError, the runtime's ErrUnavailable (engine) or ErrNoSpace
// (disk), the store's ErrDiskFull (disk) or ErrUnwritable (store), or
// ENOSPC/EDQUOT (disk) or EROFS (store) from a file the service wrote.
// The edges classify with it, before the domain's own sentinels: a call
// a dependency failed under says nothing else reliable.
func Fault(err error) (cause string, ok bool) {
	var fe *FaultError
	switch {
	case err == nil:
		return "", false
	case errors.As(err, &fe):
		return fe.Cause, true
	case errors.Is(err, runtime.ErrNoSpace), errors.Is(err, store.ErrDiskFull),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return CauseDisk, true
	case errors.Is(err, runtime.ErrUnavailable):
		return CauseEngine, true
	case errors.Is(err, store.ErrUnwritable), errors.Is(err, syscall.EROFS):
		return CauseStore, true
	}
	return "", false
}

// FaultMessage is what every edge says of a fault with cause: safe to
// show (no paths, no engine text), naming the cause.
func FaultMessage(cause string) string {
	switch cause {
	case CauseEngine:
		return "unavailable (cause: engine): the container engine does not answer; retry later"
	case CauseDisk:
		return "unavailable (cause: disk): the host's disk is full; retry once space is freed"
	case CauseStore:
		return "unavailable (cause: store): the daemon's database cannot be written; retry later"
	case CauseRegistry:
		return "unavailable (cause: registry): the image's registry could not be reached or broke off the pull; retry later"
	}
	return "unavailable (cause: " + cause + "); retry later"
}
