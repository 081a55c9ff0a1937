package files

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filemeta"
)

// errBadRequest marks errors caused by the request itself.
var errBadRequest = errors.New("bad request")

// bodyError is a failure to read the request body: the client's fault
// (malformed multipart, bad gzip, dropped connection), never the disk's.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// statusOf maps an error to the HTTP status envd answers with. It is the
// only place that does.
func statusOf(err error) int {
	var be *bodyError
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.As(err, &be),
		errors.Is(err, errBadRequest),
		errors.Is(err, filemeta.ErrInvalid),
		errors.Is(err, account.ErrInvalid),
		errors.Is(err, account.ErrUnknownUser),
		errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.ENAMETOOLONG),
		// The path names something that cannot be written: a read-only
		// mount (the agent's binary, /sys), a mount point or running
		// binary, a socket, an argument the kernel file refuses.
		errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.EBUSY),
		errors.Is(err, syscall.ETXTBSY),
		errors.Is(err, syscall.ENXIO),
		errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ELOOP):
		return http.StatusBadRequest
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}

// fail answers r with err as envd's JSON error body.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	if code >= 500 {
		h.log.ErrorContext(r.Context(), "files", "method", r.Method, "err", err)
	}
	writeJSONError(w, code, err.Error())
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Disposition")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client is gone; nothing to do
}
