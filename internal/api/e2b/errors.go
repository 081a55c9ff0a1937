package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
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

// classify maps an error to the E2B wire: an HTTP status and a message
// safe to send. The facade's own errors keep their status; every other
// error takes its class from the edges' one table (apierr.Classify), whose
// status is E2B's too (the SDKs read it as the body's code). Client errors
// carry the domain's own text (written for users, never secret); server
// errors a fixed text, the full error going to the log only.
func classify(err error) (status int, msg string) {
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		return apiErr.Status, apiErr.Message
	}
	class, msg := apierr.Classify(err)
	return class.Status, msg
}

// writeError answers err in E2B's shape, with an integer Retry-After on 429
// (the SDK retries only with one). Daemon faults (apierr.DaemonFault) are
// logged in full.
func (f *Facade) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := classify(err)
	switch {
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return // the client went away
	case apierr.DaemonFault(status):
		f.log.ErrorContext(r.Context(), "e2b: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", apierr.RetryAfter(err))
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg})
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
