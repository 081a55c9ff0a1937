package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestWriteError_EveryDomainError: each facade, domain, store and auth
// error reaches the Daytona wire as NestJS's body {statusCode, message,
// error, code?, source?} with its status, and Retry-After on 429.
func TestWriteError_EveryDomainError(t *testing.T) {
	wrap := func(sentinel error) error { return fmt.Errorf("sandbox \"web\": %w", sentinel) }
	body := func(status int, msg string) errorBody {
		return errorBody{StatusCode: status, Message: msg, Error: http.StatusText(status)}
	}
	for _, tc := range []struct {
		name       string
		err        error
		want       errorBody
		retryAfter string
	}{
		{"FieldError", &service.FieldError{Field: "memory_mb", Reason: "must be between 64 and 65536"},
			body(400, "memory_mb: must be between 64 and 65536"), ""},
		{"ServiceInvalid", wrap(service.ErrInvalidArgument), body(400, `sandbox "web": invalid argument`), ""},
		{"StoreInvalid", wrap(store.ErrInvalidArgument), body(400, `sandbox "web": invalid argument`), ""},
		{"ServiceNotFound", wrap(service.ErrNotFound), body(404, `sandbox "web": not found`), ""},
		{"StoreNotFound", wrap(store.ErrNotFound), body(404, `sandbox "web": not found`), ""},
		{"ServicePermissionDenied", wrap(service.ErrPermissionDenied), body(403, `sandbox "web": permission denied`), ""},
		{"ServiceNameConflict", wrap(service.ErrNameConflict), body(409, `sandbox "web": name conflict`), ""},
		{"ServiceConflict", wrap(service.ErrConflict), body(409, `sandbox "web": conflict`), ""},
		{"StoreStateConflict", wrap(store.ErrStateConflict), body(409, `sandbox "web": sandbox state conflict`), ""},
		{"Unauthenticated", fmt.Errorf("key dtn_x: %w", auth.ErrUnauthenticated), body(401, "missing or invalid API token"), ""},
		{"CapacityWithHint", &service.RetryAfterError{Err: wrap(service.ErrCapacityExhausted), After: 4 * time.Second},
			body(429, "the host is out of capacity; retry later"), "4"},
		{"Quota", &service.RetryAfterError{Err: &service.QuotaError{Reason: "quota exceeded: x"}, After: 5 * time.Second},
			body(403, "quota exceeded: x"), ""},
		{"CapacityWithoutHint", wrap(service.ErrCapacityExhausted), body(429, "the host is out of capacity; retry later"), "1"},
		{"Unavailable", wrap(service.ErrUnavailable), body(503, "temporarily unavailable; retry later"), ""},
		{"DeadlineExceeded", wrap(context.DeadlineExceeded), body(503, "temporarily unavailable; retry later"), ""},
		{"EngineDown", fmt.Errorf("create sandbox sb-1: %w: dial unix /var/run/docker.sock", runtime.ErrUnavailable), body(503, service.FaultMessage(service.CauseEngine)), ""},
		{"DiskFull", wrap(store.ErrDiskFull), body(503, service.FaultMessage(service.CauseDisk)), ""},
		{"StoreReadOnly", wrap(store.ErrUnwritable), body(503, service.FaultMessage(service.CauseStore)), ""},
		{"FacadeError", badRequest("snapshot %q is not known", "x"), body(400, `snapshot "x" is not known`), ""},
		{"FileNotFound", fileError(wrap(service.ErrNotFound), "/home/user/a.txt"),
			errorBody{StatusCode: 404, Message: "file not found: /home/user/a.txt", Error: "Not Found", Code: codeFileNotFound, Source: sourceDaemon}, ""},
		{"FileErrorOtherPassesThrough", fileError(wrap(service.ErrInvalidArgument), "/x"), body(400, `sandbox "web": invalid argument`), ""},
		{"ExecTimeout", daemonError(http.StatusRequestTimeout, codeExecTimeout, "command timed out after %ds", 5),
			errorBody{StatusCode: 408, Message: "command timed out after 5s", Error: "Request Timeout", Code: codeExecTimeout, Source: sourceDaemon}, ""},
		{"Unknown", errors.New("dial /run/secret.sock: refused"), body(500, "internal error"), ""},
		{"CancelledServerSide", wrap(context.Canceled), body(500, "internal error"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{})
			t.Cleanup(func() { f.Close() })
			r := httptest.NewRequest(http.MethodPost, Prefix+"/sandbox", nil)
			w := httptest.NewRecorder()
			f.writeError(w, r, tc.err)
			if w.Code != tc.want.StatusCode {
				t.Errorf("status = %d, want %d", w.Code, tc.want.StatusCode)
			}
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
			var got errorBody
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}
