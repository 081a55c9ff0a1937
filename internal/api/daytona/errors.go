package daytona

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

// Daytona's machine-readable error codes the SDK turns into its own classes
// when the source is the daemon (the toolbox).
const (
	sourceDaemon     = "DAYTONA_DAEMON"
	codeFileNotFound = "FILE_NOT_FOUND"
	codeExecTimeout  = "PROCESS_EXECUTION_TIMEOUT"
)

// apiError is an error the facade raises itself, with its HTTP status, a
// message safe to show and optionally Daytona's code and source.
type apiError struct {
	Status  int
	Message string
	Code    string
	Source  string
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, format, args...)
}

// daemonError is a toolbox error the SDK maps by code (DAYTONA_DAEMON).
func daemonError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...), Code: code, Source: sourceDaemon}
}

// fileError turns a not-found from a file operation on path into
// FILE_NOT_FOUND (the SDK's file error, a DaytonaNotFoundError); other
// errors pass through.
func fileError(err error, path string) error {
	if errors.Is(err, service.ErrNotFound) {
		return daemonError(http.StatusNotFound, codeFileNotFound, "file not found: %s", path)
	}
	return err
}

// errorBody is the NestJS error shape Daytona's API and daemon answer with.
// The SDK takes the message from `message` and its error class from the
// status, refined by code and source.
type errorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Error      string `json:"error"`
	Code       string `json:"code,omitempty"`
	Source     string `json:"source,omitempty"`
}

// classify is the one mapping from facade, domain, store and auth errors
// to Daytona's wire. Client errors carry the domain's own text (written
// for users, never secret); server errors a fixed text, the full error
// going to the log only.
func classify(err error) errorBody {
	status, msg := http.StatusInternalServerError, "internal error"
	var code, source string
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr):
		status, msg, code, source = apiErr.Status, apiErr.Message, apiErr.Code, apiErr.Source
	case errors.Is(err, auth.ErrUnauthenticated):
		status, msg = http.StatusUnauthorized, "invalid API key"
	case isFault(err):
		cause, _ := service.Fault(err)
		status, msg = http.StatusServiceUnavailable, service.FaultMessage(cause)
	case service.Is(err, service.ErrInvalidArgument):
		status, msg = http.StatusBadRequest, err.Error()
	case service.Is(err, service.ErrNotFound):
		status, msg = http.StatusNotFound, err.Error()
	case service.Is(err, service.ErrPermissionDenied):
		status, msg = http.StatusForbidden, err.Error()
	case service.Is(err, service.ErrNameConflict):
		status, msg = http.StatusConflict, err.Error()
	case service.Is(err, service.ErrConflict):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, service.ErrDiskFull):
		status, msg = http.StatusInsufficientStorage, "the sandbox's disk is full: free space in it first"
	case errors.Is(err, service.ErrQuotaExceeded):
		status, msg = http.StatusTooManyRequests, err.Error() // names the caller's own quota
	case errors.Is(err, service.ErrCapacityExhausted):
		status, msg = http.StatusTooManyRequests, "the host is out of capacity; retry later"
	case errors.Is(err, service.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		status, msg = http.StatusServiceUnavailable, "temporarily unavailable; retry later"
		if why := service.UnavailableReason(err); why != "" {
			msg = why + "; retry later"
		}
	}
	return errorBody{StatusCode: status, Message: msg, Error: http.StatusText(status), Code: code, Source: source}
}

// writeError answers err in Daytona's shape, with Retry-After on 429.
// Server errors are logged in full.
func (f *Facade) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	body := classify(err)
	if body.StatusCode >= 500 {
		f.log.ErrorContext(r.Context(), "daytona: request failed", "method", r.Method, "path", r.URL.Path, "status", body.StatusCode, "err", err)
	}
	if body.StatusCode == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter(err))
	}
	writeJSON(w, body.StatusCode, body)
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

// isFault reports whether a dependency failed under the call (service.Fault).
func isFault(err error) bool {
	_, ok := service.Fault(err)
	return ok
}
