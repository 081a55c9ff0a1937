package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestWriteError_EveryDomainError: each domain, store and auth error
// reaches the E2B wire with its status, E2B's body {code, message} (code
// is the status: the SDKs read it from the body) and, on 429, an integer
// Retry-After (the SDK retries only with one).
func TestWriteError_EveryDomainError(t *testing.T) {
	wrap := func(sentinel error) error { return fmt.Errorf("sandbox \"web\": %w", sentinel) }
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		message    string
		retryAfter string
	}{
		{"FieldError", &service.FieldError{Field: "timeout_s", Reason: "must be between 0 and 604800 seconds"},
			400, "timeout_s: must be between 0 and 604800 seconds", ""},
		{"ServiceInvalid", wrap(service.ErrInvalidArgument), 400, `sandbox "web": invalid argument`, ""},
		{"StoreInvalid", wrap(store.ErrInvalidArgument), 400, `sandbox "web": invalid argument`, ""},
		{"ServiceNotFound", wrap(service.ErrNotFound), 404, `sandbox "web": not found`, ""},
		{"StoreNotFound", wrap(store.ErrNotFound), 404, `sandbox "web": not found`, ""},
		{"ServicePermissionDenied", wrap(service.ErrPermissionDenied), 403, `sandbox "web": permission denied`, ""},
		{"ServiceNameConflict", wrap(service.ErrNameConflict), 409, `sandbox "web": name conflict`, ""},
		{"ServiceConflict", wrap(service.ErrConflict), 409, `sandbox "web": conflict`, ""},
		{"StoreStateConflict", wrap(store.ErrStateConflict), 409, `sandbox "web": sandbox state conflict`, ""},
		{"ServiceIdempotencyReused", wrap(service.ErrIdempotencyKeyReused), 422, "this Idempotency-Key was used with a different request body", ""},
		{"StoreIdempotencyReused", wrap(store.ErrIdempotencyKeyReused), 422, "this Idempotency-Key was used with a different request body", ""},
		{"Unauthenticated", fmt.Errorf("key e2b_x: %w", auth.ErrUnauthenticated), 401, "missing or invalid API token", ""},
		{"CapacityWithHint", &service.RetryAfterError{Err: wrap(service.ErrCapacityExhausted), After: 2100 * time.Millisecond},
			429, "the host is out of capacity; retry later", "3"},
		{"Quota", &service.RetryAfterError{Err: &service.QuotaError{Reason: "quota exceeded: x"}, After: 5 * time.Second},
			403, "quota exceeded: x", ""},
		{"CapacityWithoutHint", wrap(service.ErrCapacityExhausted), 429, "the host is out of capacity; retry later", "1"},
		{"Unavailable", wrap(service.ErrUnavailable), 503, "temporarily unavailable; retry later", ""},
		{"DeadlineExceeded", wrap(context.DeadlineExceeded), 503, "temporarily unavailable; retry later", ""},
		{"EngineDown", fmt.Errorf("create sandbox sb-1: %w: dial unix /var/run/docker.sock", runtime.ErrUnavailable), 503, service.FaultMessage(service.CauseEngine), ""},
		{"DiskFull", wrap(store.ErrDiskFull), 503, service.FaultMessage(service.CauseDisk), ""},
		{"StoreReadOnly", wrap(store.ErrUnwritable), 503, service.FaultMessage(service.CauseStore), ""},
		{"FacadeError", badRequest("template %q is not known", "nope"), 400, `template "nope" is not known`, ""},
		{"FacadeErrorWrapped", fmt.Errorf("create: %w", errorf(http.StatusNotFound, "sandbox %s not found", "sb-1")), 404, "sandbox sb-1 not found", ""},
		{"Unknown", errors.New("dial /run/secret.sock: refused"), 500, "internal error", ""},
		{"CancelledServerSide", wrap(context.Canceled), 500, "internal error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{Domain: "localhost", AccessTokenKey: []byte("k")})
			r := httptest.NewRequest(http.MethodPost, "/sandboxes", nil)
			w := httptest.NewRecorder()
			f.writeError(w, r, tc.err)
			if w.Code != tc.status {
				t.Errorf("status = %d, want %d", w.Code, tc.status)
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
			if diff := cmp.Diff(errorBody{Code: tc.status, Message: tc.message}, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteError_ClientGone: nothing is written for a client that left.
func TestWriteError_ClientGone(t *testing.T) {
	f := New(Options{Domain: "localhost", AccessTokenKey: []byte("k")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/sandboxes", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	f.writeError(w, r, fmt.Errorf("list: %w", context.Canceled))
	if w.Body.Len() != 0 {
		t.Errorf("answered %d %q to a client that left", w.Code, w.Body)
	}
}

// TestTemplateErr_ImageOverTheCap: an image refused for the host's size
// cap exists, so a create naming it is E2B's 400 with the cap in words,
// not "template not found"; an image that is not there stays a 404.
func TestTemplateErr_ImageOverTheCap(t *testing.T) {
	tooLarge := &service.FieldError{Field: "image", Kind: service.ErrImageTooLarge,
		Reason: `image "127.0.0.1:5000/t/big:v1" is 2 MB, more than this host's cap of 1 MB (--image-max-mb): refused and removed`}
	status, msg := classify(templateErr("127.0.0.1:5000/t/big:v1", tooLarge))
	if status != http.StatusBadRequest || !strings.Contains(msg, "cap of 1 MB (--image-max-mb)") {
		t.Errorf("over the cap: %d %q; want 400 naming the cap", status, msg)
	}
	missing := &service.FieldError{Field: "image", Kind: service.ErrImageNotPresent, Reason: `image "nope" is not present on this host`}
	if status, _ := classify(templateErr("nope", missing)); status != http.StatusNotFound {
		t.Errorf("not present: %d; want 404", status)
	}
}
