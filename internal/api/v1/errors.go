package v1

import (
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
)

// Code is a wire error code (docs/api-v1.md, "Errors"): the class names of
// the edges' one error table, package apierr.
type Code = apierr.Code

// The wire error codes.
const (
	CodeInvalidArgument      = apierr.InvalidArgument
	CodeUnauthenticated      = apierr.Unauthenticated
	CodePermissionDenied     = apierr.PermissionDenied
	CodeNotFound             = apierr.NotFound
	CodeConflict             = apierr.Conflict
	CodeNameConflict         = apierr.NameConflict
	CodeHostnameConflict     = apierr.HostnameConflict
	CodePayloadTooLarge      = apierr.PayloadTooLarge
	CodeDiskFull             = apierr.DiskFull
	CodeIdempotencyKeyReused = apierr.IdempotencyKeyReused
	CodeQuotaExceeded        = apierr.QuotaExceeded
	CodeCapacityExhausted    = apierr.CapacityExhausted
	CodeInternal             = apierr.Internal
	CodeUnavailable          = apierr.Unavailable
)

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
// safe to send: the edge's own errors first, then the one table of every
// edge (apierr.Classify). Client errors (4xx) carry the error's own text,
// which the domain writes for users and which never holds secrets; server
// errors carry a fixed text, and the full error only goes to the log.
func classify(err error) (Code, string) {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Code, apiErr.Message
	}
	class, msg := apierr.Classify(err)
	return class.Code, msg
}
