package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
)

// apiError is an error the facade raises itself, with its HTTP status and
// a message safe to show.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, format, args...)
}

// errorBody is E2B's error shape. The SDKs read `code` from the body, not
// the status line, so it is always the HTTP status.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// classify is the one mapping from domain, store and auth errors to the
// E2B wire: an HTTP status and a message safe to send. Client errors carry
// the domain's own text (written for users, never secret); server errors a
// fixed text, the full error going to the log only.
func classify(err error) (status int, msg string) {
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Status, apiErr.Message
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, "invalid API key"
	case isFault(err):
		cause, _ := service.Fault(err)
		return http.StatusServiceUnavailable, service.FaultMessage(cause)
	case service.Is(err, service.ErrIdempotencyKeyReused):
		return http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request body"
	case service.Is(err, service.ErrInvalidArgument):
		return http.StatusBadRequest, err.Error()
	case service.Is(err, service.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case service.Is(err, service.ErrPermissionDenied):
		return http.StatusForbidden, err.Error()
	case service.Is(err, service.ErrNameConflict), service.Is(err, service.ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, service.ErrDiskFull):
		return http.StatusInsufficientStorage, "the sandbox's disk is full: free space in it first"
	case errors.Is(err, service.ErrQuotaExceeded):
		return http.StatusTooManyRequests, err.Error() // names the caller's own quota
	case errors.Is(err, service.ErrCapacityExhausted):
		return http.StatusTooManyRequests, "the host is out of capacity; retry later"
	case errors.Is(err, service.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		if why := service.UnavailableReason(err); why != "" {
			return http.StatusServiceUnavailable, why + "; retry later"
		}
		return http.StatusServiceUnavailable, "temporarily unavailable; retry later"
	}
	return http.StatusInternalServerError, "internal error"
}

// writeError answers err in E2B's shape, with an integer Retry-After on 429
// (the SDK retries only with one). Server errors are logged in full.
func (f *Facade) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := classify(err)
	switch {
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return // the client went away
	case status >= 500:
		f.log.ErrorContext(r.Context(), "e2b: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter(err))
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// retryAfter is the Retry-After value in whole seconds, at least 1.
func retryAfter(err error) string {
	var ra *service.RetryAfterError
	if !errors.As(err, &ra) || ra.After <= 0 {
		return "1"
	}
	return strconv.Itoa(max(1, int(math.Ceil(ra.After.Seconds()))))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // our types always marshal; an error is a gone client
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// sandboxNotFoundMessage is what E2B's edge says of a sandbox it cannot
// route to; the SDKs show it (a TimeoutError "The sandbox was not found:
// This error is likely due to sandbox timeout…").
const sandboxNotFoundMessage = "The sandbox was not found"

// sandboxNotFound answers an envd request for a sandbox that does not
// exist, is not running or is not visible, as E2B's edge does: 502 with
// {"sandboxId", "message", "code": 502} (isRunning() is false); on the
// Connect paths a Connect error, code unavailable, with the same message
// and id (the SDK raises SandboxNotFoundError or TimeoutError from it).
func (f *Facade) sandboxNotFound(w http.ResponseWriter, r *http.Request, id string) {
	type body struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      any    `json:"code"`
	}
	code := any(http.StatusBadGateway)
	if isConnectPath(r.URL.Path) {
		code = "unavailable"
	}
	writeJSON(w, http.StatusBadGateway, body{SandboxID: id, Message: sandboxNotFoundMessage, Code: code})
}

// isFault reports whether a dependency failed under the call (service.Fault).
func isFault(err error) bool {
	_, ok := service.Fault(err)
	return ok
}
