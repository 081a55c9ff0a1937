package sandboxd

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrorCode is the machine-readable code of an API error, as sent in
// {"error": {"code": …}}.
type ErrorCode string

// The error codes of API v1 (docs/api-v1.md, "Errors").
const (
	CodeInvalidArgument      ErrorCode = "invalid_argument"       // 400
	CodeUnauthenticated      ErrorCode = "unauthenticated"        // 401
	CodePermissionDenied     ErrorCode = "permission_denied"      // 403
	CodeNotFound             ErrorCode = "not_found"              // 404
	CodeConflict             ErrorCode = "conflict"               // 409
	CodeNameConflict         ErrorCode = "name_conflict"          // 409
	CodeHostnameConflict     ErrorCode = "hostname_conflict"      // 409
	CodePayloadTooLarge      ErrorCode = "payload_too_large"      // 413
	CodeDiskFull             ErrorCode = "disk_full"              // 507: a write past the sandbox's disk limit
	CodeIdempotencyKeyReused ErrorCode = "idempotency_key_reused" // 422
	CodeQuotaExceeded        ErrorCode = "quota_exceeded"         // 403: the caller's own quota; never retried
	CodeCapacityExhausted    ErrorCode = "capacity_exhausted"     // 429, with Retry-After
	CodeInternal             ErrorCode = "internal"               // 500
	CodeUnavailable          ErrorCode = "unavailable"            // 503
)

// Sentinel errors, one per code. Match them with errors.Is:
//
//	if errors.Is(err, sandboxd.ErrNotFound) { … }
//
// ErrConflict matches every 409 code (conflict, name_conflict and
// hostname_conflict); the others match their own code only. Use errors.As
// with *APIError for the status, message and Retry-After.
var (
	ErrInvalidArgument      error = &sentinel{CodeInvalidArgument}
	ErrUnauthenticated      error = &sentinel{CodeUnauthenticated}
	ErrPermissionDenied     error = &sentinel{CodePermissionDenied}
	ErrNotFound             error = &sentinel{CodeNotFound}
	ErrConflict             error = &sentinel{CodeConflict}
	ErrNameConflict         error = &sentinel{CodeNameConflict}
	ErrHostnameConflict     error = &sentinel{CodeHostnameConflict}
	ErrPayloadTooLarge      error = &sentinel{CodePayloadTooLarge}
	ErrDiskFull             error = &sentinel{CodeDiskFull}
	ErrIdempotencyKeyReused error = &sentinel{CodeIdempotencyKeyReused}
	ErrQuotaExceeded        error = &sentinel{CodeQuotaExceeded}
	ErrCapacityExhausted    error = &sentinel{CodeCapacityExhausted}
	ErrInternal             error = &sentinel{CodeInternal}
	ErrUnavailable          error = &sentinel{CodeUnavailable}
)

// sentinel is the type of the Err* values. It is a pointer to an unexported
// struct so that callers can neither construct nor modify one.
type sentinel struct{ code ErrorCode }

func (s *sentinel) Error() string { return string(s.code) }

// APIError is a non-2xx answer from the daemon (or an error frame on an
// exec stream), decoded from the API's error body.
type APIError struct {
	// Status is the HTTP status code; 0 for an error frame on an exec stream.
	Status int
	// Code is the API error code. When the body was not an API error (a
	// proxy's HTML page, say), Code is derived from Status.
	Code ErrorCode
	// Message is the server's human-readable explanation.
	Message string
	// Retryable reports whether the server says the same request may
	// succeed later. Statuses 429, 500, 502, 503 and 504 count as retryable
	// even when the body does not say so.
	Retryable bool
	// RetryAfter is the server's Retry-After, or 0 when it sent none.
	RetryAfter time.Duration
}

// Error returns "<code>: <message>" (or the status text when there is no
// message).
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	if msg == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, msg)
}

// Is reports whether target is the sentinel for e's code; ErrConflict
// matches every 409 code.
func (e *APIError) Is(target error) bool {
	s, ok := target.(*sentinel)
	if !ok {
		return false
	}
	if s.code == CodeConflict {
		return isConflictCode(e.Code) || e.Status == http.StatusConflict
	}
	return s.code == e.Code
}

func isConflictCode(c ErrorCode) bool {
	return c == CodeConflict || c == CodeNameConflict || c == CodeHostnameConflict
}

// errorBody is the wire form of an error.
type errorBody struct {
	Error struct {
		Code      ErrorCode `json:"code"`
		Message   string    `json:"message"`
		Retryable bool      `json:"retryable"`
	} `json:"error"`
}

// codeForStatus is the code assumed when an error body is missing or is
// not an API error.
func codeForStatus(status int) ErrorCode {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusInsufficientStorage:
		return CodeDiskFull
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return CodeIdempotencyKeyReused
	case http.StatusTooManyRequests:
		return CodeCapacityExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// transientStatus reports whether a status means "try again later"
// whatever the body says.
func transientStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP
// date. It returns 0 when the header is absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Cap absurd values rather than overflow time.Duration.
		return time.Duration(min(secs, 24*60*60)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
