package v1

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

// Code is a wire error code (docs/api-v1.md, "Errors"). The set is closed:
// clients switch on it.
type Code string

// The wire error codes.
const (
	CodeInvalidArgument      Code = "invalid_argument"
	CodeUnauthenticated      Code = "unauthenticated"
	CodePermissionDenied     Code = "permission_denied"
	CodeNotFound             Code = "not_found"
	CodeConflict             Code = "conflict"
	CodeNameConflict         Code = "name_conflict"
	CodeHostnameConflict     Code = "hostname_conflict"
	CodePayloadTooLarge      Code = "payload_too_large"
	CodeDiskFull             Code = "disk_full"
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
	CodeCapacityExhausted    Code = "capacity_exhausted"
	CodeInternal             Code = "internal"
	CodeUnavailable          Code = "unavailable"
)

// codes maps every code to its HTTP status and retryability. The table is
// the doc's; errorsByCode is pre-initialised from it so every code shows in
// /metrics from the first scrape.
var codes = map[Code]struct {
	status    int
	retryable bool
}{
	CodeInvalidArgument:  {http.StatusBadRequest, false},
	CodeUnauthenticated:  {http.StatusUnauthorized, false},
	CodePermissionDenied: {http.StatusForbidden, false},
	CodeNotFound:         {http.StatusNotFound, false},
	CodeConflict:         {http.StatusConflict, false},
	CodeNameConflict:     {http.StatusConflict, false},
	CodeHostnameConflict: {http.StatusConflict, false},
	CodePayloadTooLarge:  {http.StatusRequestEntityTooLarge, false},
	// A write past the sandbox's disk limit: the same write fails again
	// until the sandbox frees space, so it is not retryable.
	CodeDiskFull:             {http.StatusInsufficientStorage, false},
	CodeIdempotencyKeyReused: {http.StatusUnprocessableEntity, false},
	CodeCapacityExhausted:    {http.StatusTooManyRequests, true},
	CodeInternal:             {http.StatusInternalServerError, true},
	CodeUnavailable:          {http.StatusServiceUnavailable, true},
}

// Error is an error the edge itself raises (bad JSON, a bad query
// parameter, a missing permission) with its wire code and a message that is
// safe to show.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of every non-2xx answer.
type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// classify maps any error a handler returns to its wire code and a message
// safe to send: the one mapping from domain, store and auth errors to the
// wire. Client errors (4xx) carry the error's own text, which the domain
// writes for users and which never holds secrets; server errors carry a
// fixed text, and the full error only goes to the log.
func classify(err error) (Code, string) {
	var (
		apiErr   *Error
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code, apiErr.Message
	case errors.As(err, &tooLarge):
		return CodePayloadTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)
	case errors.Is(err, auth.ErrUnauthenticated):
		// One answer for every way a credential can be wrong (see package auth).
		return CodeUnauthenticated, "missing or invalid API token"
	case isFault(err):
		cause, _ := service.Fault(err)
		return CodeUnavailable, service.FaultMessage(cause)
	case service.Is(err, service.ErrIdempotencyKeyReused):
		return CodeIdempotencyKeyReused, "this Idempotency-Key was used with a different request body"
	case service.Is(err, service.ErrInvalidArgument):
		return CodeInvalidArgument, err.Error()
	case errors.Is(err, service.ErrDiskFull):
		return CodeDiskFull, "the sandbox's disk is full (its disk limit, or the host's file system): free space in it first"
	case service.Is(err, service.ErrNotFound), errors.Is(err, auth.ErrTokenNotFound):
		return CodeNotFound, err.Error()
	case service.Is(err, service.ErrPermissionDenied):
		return CodePermissionDenied, err.Error()
	case service.Is(err, service.ErrNameConflict):
		return CodeNameConflict, err.Error()
	case service.Is(err, service.ErrHostnameConflict):
		return CodeHostnameConflict, err.Error()
	case service.Is(err, service.ErrConflict):
		return CodeConflict, err.Error()
	case errors.Is(err, service.ErrQuotaExceeded):
		return CodeCapacityExhausted, err.Error() // names the caller's own quota
	case errors.Is(err, service.ErrCapacityExhausted):
		return CodeCapacityExhausted, "the host is out of capacity; retry later"
	case errors.Is(err, service.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		if why := service.UnavailableReason(err); why != "" {
			return CodeUnavailable, why + "; retry later"
		}
		return CodeUnavailable, "temporarily unavailable; retry later"
	}
	return CodeInternal, "internal error"
}

// retryAfter is the Retry-After value in whole seconds (at least 1) for a
// capacity error, or "" when err carries no hint.
func retryAfter(err error) string {
	var ra *service.RetryAfterError
	if !errors.As(err, &ra) || ra.After <= 0 {
		return ""
	}
	return strconv.Itoa(max(1, int(math.Ceil(ra.After.Seconds()))))
}

// isFault reports whether a dependency failed under the call (service.Fault).
func isFault(err error) bool {
	_, ok := service.Fault(err)
	return ok
}
