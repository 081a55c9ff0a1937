package ingress

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// latch runs first-call work once it succeeds: an
// atomic fast path, a mutex slow path with a double check, and the latch
// closes only on success, so a failure fails that call alone and the next
// caller tries again. Nothing retries on its own.
type latch struct {
	done atomic.Bool
	mu   sync.Mutex
	slow atomic.Int64 // slow-path entries, for tests
}

func (l *latch) do(ctx context.Context, f func(context.Context) error) error {
	if l.done.Load() {
		return nil
	}
	l.slow.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done.Load() {
		return nil
	}
	if err := f(ctx); err != nil {
		return err
	}
	l.done.Store(true)
	return nil
}

// ensureL4 starts the shared L4 machinery (the SNI listener) unless it
// runs already.
func (r *Router) ensureL4(ctx context.Context) error {
	if err := r.l4.do(ctx, r.bootstrapL4); err != nil {
		return fmt.Errorf("%w: %w", ErrL4Unavailable, err)
	}
	return nil
}
