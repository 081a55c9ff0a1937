// Package apierr is the one table from the errors the HTTP edges see —
// the service's sentinels, its faults, auth's and net/http's — to their
// class on the wire: a stable code name, an HTTP status, whether a retry
// may succeed, and a message safe to show. The native API (internal/api/v1),
// the E2B facade and the Daytona facade all classify with [Classify]; each
// keeps only its wire's shape (native {"error":{code,message,retryable}},
// E2B {code,message}, Daytona {statusCode,message,error}) and its own
// per-route exceptions, named and commented where they are (E2B's 502 for
// envd traffic to a sandbox that is not there, a template the create names
// that is not present as 404, Daytona's FILE_NOT_FOUND, …). The package
// imports no edge.
//
// # The table
//
//	code                    status  retryable  from
//	invalid_argument        400     no         service.ErrInvalidArgument (a *FieldError; ErrImageNotPresent and ErrImageTooLarge as a field error too)
//	unauthenticated         401     no         auth.ErrUnauthenticated
//	permission_denied       403     no         service.ErrPermissionDenied (a pull a registry refused: *ImageError)
//	not_found               404     no         service.ErrNotFound (a pull of an image the registry lacks: *ImageError), auth.ErrTokenNotFound
//	conflict                409     no         service.ErrConflict (and ErrPaused)
//	name_conflict           409     no         service.ErrNameConflict
//	hostname_conflict       409     no         service.ErrHostnameConflict
//	payload_too_large       413     no         *http.MaxBytesError
//	idempotency_key_reused  422     no         service.ErrIdempotencyKeyReused
//	quota_exceeded          403     no         service.ErrQuotaExceeded (the caller's own quota: stop or destroy a sandbox first)
//	capacity_exhausted      429     yes        service.ErrCapacityExhausted (+ Retry-After)
//	internal                500     yes        anything else
//	unavailable             503     yes        a fault (service.Fault), service.ErrUnavailable, context.DeadlineExceeded
//	disk_full               507     no         service.ErrDiskFull
//
// The store's sentinels count as the service's (service.Is). A fault comes
// first: a call a dependency failed under says nothing else reliable.
//
// Retryable is a field of the native body. E2B's and Daytona's bodies have
// none: there it is the status, which their SDKs turn into their retry
// classes (E2B: RateLimitError, retried on 429 with an integer Retry-After,
// and ServiceBusyError on 503; Daytona: DaytonaRateLimitError,
// DaytonaServiceUnavailableError), so every retryable class is a 429 or a
// 5xx and the one 5xx that is not retryable is 507 ([RetryableStatus]).
//
// # Decisions
//
// The three edges used to keep a copy each of this mapping; where the
// copies disagreed, the table decides:
//
//   - hostname_conflict: the native API answered 409; E2B and Daytona had
//     no case and answered 500 internal, logged as a daemon failure. Now
//     409 everywhere: it is the caller's conflict, and both SDKs read 409
//     as one (E2B "409: …", Daytona DaytonaConflictError).
//   - idempotency_key_reused: native and E2B 422; Daytona had no case (500).
//     Now 422 everywhere (Daytona's DaytonaUnprocessableEntityError).
//   - payload_too_large: native 413 for any *http.MaxBytesError; Daytona's
//     JSON decoder 413 in its own words, E2B's 400 ("read body: …"), and
//     any other path of either 500. Now 413 with one message everywhere.
//   - auth.ErrTokenNotFound (a token id that never existed): native 404,
//     the facades 500 (they have no token routes; the case is for whoever
//     adds one). Now 404 everywhere.
//   - unauthenticated's message: native "missing or invalid API token",
//     the facades "invalid API key", and E2B's own "missing API key
//     (X-API-KEY)" for no key at all. One message now, per auth's rule
//     that every way a credential can be wrong gets the same answer; E2B
//     keys and Daytona keys are sandboxd API tokens.
//   - disk_full's message: the native one, which names both limits a write
//     can hit (the sandbox's disk limit, the host's file system); the
//     facades said only "the sandbox's disk is full".
//   - Logging: the native API logged every 5xx but disk_full as a
//     failure, the facades every 5xx, so a tenant filling its own disk
//     through E2B or Daytona wrote the daemon's error log; now every edge
//     logs [DaemonFault]s only.
//   - quota_exceeded: a refusal for the caller's own quota was 429
//     capacity_exhausted, retryable, with a Retry-After, so the Go SDK
//     (and E2B's RateLimitError, Daytona's DaytonaRateLimitError) retried
//     a limit that clears only when the caller stops or destroys a
//     sandbox. Now 403 quota_exceeded, not retryable, no Retry-After,
//     with the message naming the quota and what to do; 429 is left to
//     refusals that clear by themselves (the host's capacity, the host
//     port pool). The E2B SDK reads 403 as its generic SandboxError with
//     the message, Daytona as DaytonaForbiddenError.
//   - The order of the checks: the native API tested a full disk before
//     not-found and the conflicts, the facades after them; no error is
//     both, and the table has one order.
//
// What the SDKs rely on comes from the table's statuses: E2B's kill(),
// getInfo() and connect() read the body's code 404 (not_found), pause()
// 409 (conflict), 401/429/503 are its AuthenticationError, RateLimitError
// and ServiceBusyError, 507 its NotEnoughSpaceError; Daytona picks its
// class by status (404 DaytonaNotFoundError, 409 DaytonaConflictError,
// 422, 429, 503, …), and by code and source only for the facade's own
// DAYTONA_DAEMON errors.
//
// Unchanged, and so recorded: statuses and retryability of every other
// class agreed; a 5xx's message is fixed (the error itself goes to the
// log only), a 4xx's is the error's own text, which the service writes
// for users.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Code is a class's stable name: the native API's wire error code
// (docs/api-v1.md, "Errors"). The set is closed: clients switch on it.
type Code string

// The codes.
const (
	InvalidArgument      Code = "invalid_argument"
	Unauthenticated      Code = "unauthenticated"
	PermissionDenied     Code = "permission_denied"
	NotFound             Code = "not_found"
	Conflict             Code = "conflict"
	NameConflict         Code = "name_conflict"
	HostnameConflict     Code = "hostname_conflict"
	PayloadTooLarge      Code = "payload_too_large"
	IdempotencyKeyReused Code = "idempotency_key_reused"
	QuotaExceeded        Code = "quota_exceeded"
	CapacityExhausted    Code = "capacity_exhausted"
	Internal             Code = "internal"
	Unavailable          Code = "unavailable"
	DiskFull             Code = "disk_full"
)

// Class is what every edge answers for one kind of error.
type Class struct {
	Code   Code
	Status int
	// Retryable: the same request may succeed later, unchanged.
	Retryable bool
}

// classes is the table, in the order of docs/api-v1.md.
var classes = []Class{
	{InvalidArgument, http.StatusBadRequest, false},
	{Unauthenticated, http.StatusUnauthorized, false},
	{PermissionDenied, http.StatusForbidden, false},
	{NotFound, http.StatusNotFound, false},
	{Conflict, http.StatusConflict, false},
	{NameConflict, http.StatusConflict, false},
	{HostnameConflict, http.StatusConflict, false},
	{PayloadTooLarge, http.StatusRequestEntityTooLarge, false},
	{IdempotencyKeyReused, http.StatusUnprocessableEntity, false},
	// The caller's own quota: it clears only when the caller stops or
	// destroys a sandbox, so no retry of the same request helps.
	{QuotaExceeded, http.StatusForbidden, false},
	{CapacityExhausted, http.StatusTooManyRequests, true},
	{Internal, http.StatusInternalServerError, true},
	{Unavailable, http.StatusServiceUnavailable, true},
	// A write past the sandbox's disk limit: the same write fails again
	// until the sandbox frees space, so it is not retryable.
	{DiskFull, http.StatusInsufficientStorage, false},
}

// Classes returns every class of the table.
func Classes() []Class { return append([]Class(nil), classes...) }

// Lookup returns code's class; an unknown code is Internal's.
func Lookup(code Code) Class {
	for _, c := range classes {
		if c.Code == code {
			return c
		}
	}
	return Lookup(Internal)
}

// RetryableStatus reports whether status tells a client, by itself, that
// the same request may succeed later: 429 and every 5xx but 507. It is
// how the E2B and Daytona wires, which carry no retryable field, say a
// class's Retryable.
func RetryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || (status >= 500 && status != http.StatusInsufficientStorage)
}

// DaemonFault reports whether an answer with status is the daemon's
// failure, which an edge logs in full: a 5xx but 507 (a full sandbox is
// its tenant's doing, and a tenant filling its disk must not fill the
// daemon's log).
func DaemonFault(status int) bool {
	return status >= 500 && status != http.StatusInsufficientStorage
}

// Messages of the classes whose answer is fixed.
const (
	MsgUnauthenticated      = "missing or invalid API token"
	MsgIdempotencyKeyReused = "this Idempotency-Key was used with a different request body"
	MsgDiskFull             = "the sandbox's disk is full (its disk limit, or the host's file system): free space in it first"
	MsgCapacityExhausted    = "the host is out of capacity; retry later"
	MsgUnavailable          = "temporarily unavailable; retry later"
	MsgInternal             = "internal error"
)

// Classify returns err's class and a message safe to send: the error's
// own text for the client errors the service words for users, a fixed
// text otherwise (the caller logs the error itself). An edge checks its
// own errors (a bad query parameter, a route it does not serve) before it
// asks; a client that went away (context.Canceled) is the edge's to
// notice too, and classifies as Internal.
func Classify(err error) (Class, string) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return Lookup(PayloadTooLarge), fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)
	case errors.Is(err, auth.ErrUnauthenticated):
		// One answer for every way a credential can be wrong (see package auth).
		return Lookup(Unauthenticated), MsgUnauthenticated
	case isFault(err):
		cause, _ := service.Fault(err)
		return Lookup(Unavailable), service.FaultMessage(cause)
	case service.Is(err, service.ErrIdempotencyKeyReused):
		return Lookup(IdempotencyKeyReused), MsgIdempotencyKeyReused
	case service.Is(err, service.ErrInvalidArgument):
		return Lookup(InvalidArgument), err.Error()
	case errors.Is(err, service.ErrDiskFull):
		return Lookup(DiskFull), MsgDiskFull
	case service.Is(err, service.ErrNotFound), errors.Is(err, auth.ErrTokenNotFound):
		return Lookup(NotFound), err.Error()
	case service.Is(err, service.ErrPermissionDenied):
		return Lookup(PermissionDenied), err.Error()
	case service.Is(err, service.ErrNameConflict):
		return Lookup(NameConflict), err.Error()
	case service.Is(err, service.ErrHostnameConflict):
		return Lookup(HostnameConflict), err.Error()
	case service.Is(err, service.ErrConflict):
		return Lookup(Conflict), err.Error()
	case errors.Is(err, service.ErrQuotaExceeded):
		return Lookup(QuotaExceeded), err.Error() // names the caller's own quota
	case errors.Is(err, service.ErrCapacityExhausted):
		return Lookup(CapacityExhausted), MsgCapacityExhausted
	case errors.Is(err, service.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		if why := service.UnavailableReason(err); why != "" {
			return Lookup(Unavailable), why + "; retry later"
		}
		return Lookup(Unavailable), MsgUnavailable
	}
	return Lookup(Internal), MsgInternal
}

// RetryAfter is the Retry-After value, in whole seconds and at least 1,
// of an answer 429: err's hint (a *service.RetryAfterError), else 1. The
// E2B SDK retries a 429 only with an integer Retry-After.
func RetryAfter(err error) string {
	var ra *service.RetryAfterError
	if !errors.As(err, &ra) || ra.After <= 0 {
		return "1"
	}
	return strconv.Itoa(max(1, int(math.Ceil(ra.After.Seconds()))))
}

// isFault reports whether a dependency failed under the call (service.Fault).
func isFault(err error) bool {
	_, ok := service.Fault(err)
	return ok
}
