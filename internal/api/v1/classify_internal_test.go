package v1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestClassify_EveryDomainError: every sentinel the service, the store and
// auth return reaches the wire with its code, HTTP status, retryability and
// message. Client errors carry the error's own text; server errors a fixed
// text plus the request id.
func TestClassify_EveryDomainError(t *testing.T) {
	wrap := func(sentinel error) error { return fmt.Errorf("sandbox \"web\": %w", sentinel) }
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       Code
		retryable  bool
		message    string
		retryAfter string
	}{
		{"FieldError", &service.FieldError{Field: "cpu", Reason: "must be between 0.1 and 16 cores"},
			400, CodeInvalidArgument, false, "cpu: must be between 0.1 and 16 cores", ""},
		{"ServiceInvalid", wrap(service.ErrInvalidArgument), 400, CodeInvalidArgument, false, `sandbox "web": invalid argument`, ""},
		{"StoreInvalid", wrap(store.ErrInvalidArgument), 400, CodeInvalidArgument, false, `sandbox "web": invalid argument`, ""},
		{"ServiceNotFound", wrap(service.ErrNotFound), 404, CodeNotFound, false, `sandbox "web": not found`, ""},
		{"StoreNotFound", wrap(store.ErrNotFound), 404, CodeNotFound, false, `sandbox "web": not found`, ""},
		{"ServicePermissionDenied", wrap(service.ErrPermissionDenied), 403, CodePermissionDenied, false, `sandbox "web": permission denied`, ""},
		{"ServiceNameConflict", wrap(service.ErrNameConflict), 409, CodeNameConflict, false, `sandbox "web": name conflict`, ""},
		{"StoreNameConflict", wrap(store.ErrNameConflict), 409, CodeNameConflict, false, `sandbox "web": sandbox name already in use`, ""},
		{"ServiceHostnameConflict", wrap(service.ErrHostnameConflict), 409, CodeHostnameConflict, false, `sandbox "web": hostname conflict`, ""},
		{"StoreHostnameConflict", wrap(store.ErrHostnameConflict), 409, CodeHostnameConflict, false, `sandbox "web": hostname already bound`, ""},
		{"ServiceConflict", wrap(service.ErrConflict), 409, CodeConflict, false, `sandbox "web": conflict`, ""},
		{"StoreStateConflict", wrap(store.ErrStateConflict), 409, CodeConflict, false, `sandbox "web": sandbox state conflict`, ""},
		{"StorePortProtocolConflict", wrap(store.ErrPortProtocolConflict), 409, CodeConflict, false, `sandbox "web": port already exposed with another protocol`, ""},
		{"ServiceIdempotencyReused", wrap(service.ErrIdempotencyKeyReused), 422, CodeIdempotencyKeyReused, false,
			"this Idempotency-Key was used with a different request body", ""},
		{"StoreIdempotencyReused", wrap(store.ErrIdempotencyKeyReused), 422, CodeIdempotencyKeyReused, false,
			"this Idempotency-Key was used with a different request body", ""},
		{"Unauthenticated", fmt.Errorf("token abc: %w", auth.ErrUnauthenticated), 401, CodeUnauthenticated, false, "missing or invalid API token", ""},
		{"CapacityWithHint", &service.RetryAfterError{Err: wrap(service.ErrCapacityExhausted), After: 1500 * time.Millisecond},
			429, CodeCapacityExhausted, true, "the host is out of capacity; retry later", "2"},
		{"CapacityHintRoundsUpToOne", &service.RetryAfterError{Err: wrap(service.ErrCapacityExhausted), After: time.Millisecond},
			429, CodeCapacityExhausted, true, "the host is out of capacity; retry later", "1"},
		{"Quota", &service.RetryAfterError{Err: &service.QuotaError{Reason: `quota exceeded: owner "a" may run 2 sandboxes at once and runs 2`}, After: 5 * time.Second},
			403, CodeQuotaExceeded, false, `quota exceeded: owner "a" may run 2 sandboxes at once and runs 2`, ""},
		{"CapacityWithoutHint", wrap(service.ErrCapacityExhausted), 429, CodeCapacityExhausted, true, "the host is out of capacity; retry later", "1"},
		{"Unavailable", wrap(service.ErrUnavailable), 503, CodeUnavailable, true, "temporarily unavailable; retry later (request id rid1)", ""},
		{"DeadlineExceeded", wrap(context.DeadlineExceeded), 503, CodeUnavailable, true, "temporarily unavailable; retry later (request id rid1)", ""},
		{"DiskFull", fmt.Errorf("upload: %w: no space left on device", service.ErrDiskFull), 507, CodeDiskFull, false, "the sandbox's disk is full (its disk limit, or the host's file system): free space in it first", ""},
		{"TooLarge", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 1024}), 413, CodePayloadTooLarge, false, "request body exceeds 1024 bytes", ""},
		{"EdgeError", errorf(CodePermissionDenied, "admin only"), 403, CodePermissionDenied, false, "admin only", ""},
		{"EdgeErrorWrapped", fmt.Errorf("tokens: %w", errorf(CodeInvalidArgument, "bad role %q", "x")), 400, CodeInvalidArgument, false, `bad role "x"`, ""},
		{"Unknown", errors.New("disk on fire at /var/lib/x"), 500, CodeInternal, true, "internal error (request id rid1)", ""},
		{"StoreIDConflictIsInternal", wrap(store.ErrIDConflict), 500, CodeInternal, true, "internal error (request id rid1)", ""},
		// A cancelled request whose client is still there is the server's fault.
		{"CancelledServerSide", wrap(context.Canceled), 500, CodeInternal, true, "internal error (request id rid1)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newTestServer(t, &logs)
			r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", nil)
			r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, "rid1"))
			w := httptest.NewRecorder()
			s.writeError(w, r, tc.err)

			if w.Code != tc.status {
				t.Errorf("status = %d, want %d", w.Code, tc.status)
			}
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.retryAfter)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			var got errorBody
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			want := errorBody{Error: errorJSON{Code: tc.code, Message: tc.message, Retryable: tc.retryable}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if st := apierr.Lookup(tc.code).Status; st != tc.status {
				t.Errorf("apierr.Lookup(%s).Status = %d, the table says %d", tc.code, st, tc.status)
			}
		})
	}
}

// TestClassify_ClientGone: a request cancelled by its client is not logged
// as a failure (nobody reads the answer).
func TestClassify_ClientGone(t *testing.T) {
	var logs bytes.Buffer
	s := newTestServer(t, &logs)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), requestIDKey{}, "rid1"))
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes", nil).WithContext(ctx)
	s.writeError(httptest.NewRecorder(), r, fmt.Errorf("list: %w", context.Canceled))
	if bytes.Contains(logs.Bytes(), []byte("request failed")) {
		t.Errorf("a client-cancelled request was logged as failed: %s", logs.String())
	}
}

// TestCodes_Closed: the code table is the documented one (docs/api-v1.md),
// and every code has a 4xx or 5xx status; retryable codes are exactly the
// 429 and 5xx ones but disk_full.
func TestCodes_Closed(t *testing.T) {
	want := map[Code]int{
		CodeInvalidArgument: 400, CodeUnauthenticated: 401, CodePermissionDenied: 403, CodeNotFound: 404,
		CodeConflict: 409, CodeNameConflict: 409, CodeHostnameConflict: 409, CodePayloadTooLarge: 413,
		CodeIdempotencyKeyReused: 422, CodeQuotaExceeded: 403, CodeCapacityExhausted: 429, CodeInternal: 500, CodeUnavailable: 503,
		CodeDiskFull: 507,
	}
	got := map[Code]int{}
	for _, c := range apierr.Classes() {
		got[c.Code] = c.Status
		// disk_full is the one 5xx that is not retryable: the sandbox's
		// own disk is full, and stays so until it frees space.
		if wantRetry := (c.Status == 429 || c.Status >= 500) && c.Code != CodeDiskFull; c.Retryable != wantRetry {
			t.Errorf("%s: retryable = %v, want %v", c.Code, c.Retryable, wantRetry)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
}
