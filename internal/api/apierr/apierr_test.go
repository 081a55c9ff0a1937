package apierr_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestClassify_EveryServiceSentinel: every sentinel of package service
// (internal/service/errors.go) has a class of its own, not internal: a
// sentinel that falls through to 500 is one the table forgot.
func TestClassify_EveryServiceSentinel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want apierr.Code
	}{
		{service.ErrInvalidArgument, apierr.InvalidArgument},
		{service.ErrNotFound, apierr.NotFound},
		{service.ErrNameConflict, apierr.NameConflict},
		{service.ErrHostnameConflict, apierr.HostnameConflict},
		{service.ErrPermissionDenied, apierr.PermissionDenied},
		{service.ErrConflict, apierr.Conflict},
		{service.ErrPaused, apierr.Conflict},
		{service.ErrCapacityExhausted, apierr.CapacityExhausted},
		{&service.QuotaError{Reason: "quota exceeded"}, apierr.QuotaExceeded},
		{service.ErrIdempotencyKeyReused, apierr.IdempotencyKeyReused},
		{&service.FieldError{Field: "image", Reason: "absent", Kind: service.ErrImageNotPresent}, apierr.InvalidArgument},
		{&service.FieldError{Field: "image", Reason: "too big", Kind: service.ErrImageTooLarge}, apierr.InvalidArgument},
		{service.ErrUnavailable, apierr.Unavailable},
		{service.ErrDiskFull, apierr.DiskFull},
	} {
		if got, _ := apierr.Classify(fmt.Errorf("op: %w", tc.err)); got.Code != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got.Code, tc.want)
		}
	}
}

// TestClassify_ServerErrorsSayNothingOfTheError: a 5xx's message is fixed
// (or names a fault's cause), never the error's text.
func TestClassify_ServerErrorsSayNothingOfTheError(t *testing.T) {
	const secret = "password=hunter2"
	for _, err := range []error{
		errors.New(secret),
		fmt.Errorf("%s: %w", secret, service.ErrUnavailable),
		&service.FaultError{Cause: service.CauseEngine, Err: errors.New(secret)},
		fmt.Errorf("%s: %w", secret, service.ErrDiskFull),
	} {
		class, msg := apierr.Classify(err)
		if class.Status < 500 {
			t.Errorf("Classify(%v) = %d, want a 5xx", err, class.Status)
		}
		if msg == "" || strings.Contains(msg, secret) {
			t.Errorf("Classify(%v) message %q shows the error", err, msg)
		}
	}
}

// TestRetryableStatus_MatchesTheTable: on the wires without a retryable
// field (E2B, Daytona) the status says it, for every class.
func TestRetryableStatus_MatchesTheTable(t *testing.T) {
	for _, c := range apierr.Classes() {
		if got := apierr.RetryableStatus(c.Status); got != c.Retryable {
			t.Errorf("%s: RetryableStatus(%d) = %v, the table says %v", c.Code, c.Status, got, c.Retryable)
		}
	}
	if apierr.Lookup("no such code") != apierr.Lookup(apierr.Internal) {
		t.Error("an unknown code is not internal")
	}
	if got := apierr.RetryAfter(&service.RetryAfterError{Err: service.ErrCapacityExhausted, After: 2100 * time.Millisecond}); got != "3" {
		t.Errorf("RetryAfter(2.1s) = %q, want 3", got)
	}
	if got := apierr.RetryAfter(service.ErrCapacityExhausted); got != "1" {
		t.Errorf("RetryAfter(no hint) = %q, want 1", got)
	}
}
