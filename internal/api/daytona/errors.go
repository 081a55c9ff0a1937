package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
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

// classify maps an error to Daytona's wire. The facade's own errors keep
// their status, code and source; every other error takes its class from
// the edges' one table (apierr.Classify), whose status is Daytona's too
// (the SDK picks its error class by it). Client errors carry the domain's
// own text (written for users, never secret); server errors a fixed text,
// the full error going to the log only.
func classify(err error) errorBody {
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		return errorBody{StatusCode: apiErr.Status, Message: apiErr.Message, Error: http.StatusText(apiErr.Status), Code: apiErr.Code, Source: apiErr.Source}
	}
	class, msg := apierr.Classify(err)
	return errorBody{StatusCode: class.Status, Message: msg, Error: http.StatusText(class.Status)}
}

// writeError answers err in Daytona's shape, with Retry-After on 429.
// Daemon faults (apierr.DaemonFault) are logged in full.
func (f *Facade) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	body := classify(err)
	if apierr.DaemonFault(body.StatusCode) {
		f.log.ErrorContext(r.Context(), "daytona: request failed", "method", r.Method, "path", r.URL.Path, "status", body.StatusCode, "err", err)
	}
	if body.StatusCode == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", apierr.RetryAfter(err))
	}
	writeJSON(w, body.StatusCode, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // our types always marshal; an error is a gone client
}
