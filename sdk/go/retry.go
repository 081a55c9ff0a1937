package sandboxd

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// maxRetryAfterWait is the longest Retry-After the client waits out by
// itself. A server asking for more is better answered by the caller, who
// gets the *APIError with RetryAfter set.
const maxRetryAfterWait = time.Minute

// RetryPolicy bounds the retries of one call. Only calls that are safe to
// repeat are retried (see the package documentation), and only after a
// transient failure: a transport error, or an answer that is retryable
// (429, 500, 502, 503, 504, or "retryable": true in the body), never a
// quota_exceeded (the caller's own quota does not clear by waiting).
type RetryPolicy struct {
	// MaxAttempts is the number of attempts, the first included. Values
	// below 2 disable retries.
	MaxAttempts int
	// InitialBackoff is the base wait before the second attempt; it doubles
	// for each later attempt, up to MaxBackoff. Each wait is drawn from
	// [base/2, base] (equal jitter) so that clients failing together do
	// not retry together.
	InitialBackoff time.Duration
	// MaxBackoff caps the base wait.
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy of a Client made without
// WithRetryPolicy: 4 attempts, waits growing from 250 ms to at most 5 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 4, InitialBackoff: 250 * time.Millisecond, MaxBackoff: 5 * time.Second}
}

// wait returns how long to wait after the given failed attempt (1-based).
// A server's Retry-After wins when it is longer than the backoff.
func (p RetryPolicy) wait(attempt int, err error) time.Duration {
	base := max(p.InitialBackoff, 0)
	for i := 1; i < attempt && base < p.MaxBackoff; i++ {
		base *= 2
	}
	if p.MaxBackoff > 0 {
		base = min(base, p.MaxBackoff)
	}
	d := base
	if half := base / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.RetryAfter > d {
		d = apiErr.RetryAfter
	}
	return d
}

// sleepCtx waits for d or until ctx is done, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
