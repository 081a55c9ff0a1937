package sandboxd

import (
	"context"
	"time"
)

// WithSleep replaces the wait between retries, so that tests observe the
// waits instead of sitting through them.
func WithSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.sleep = f }
}
