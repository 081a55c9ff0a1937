package ingress

import "context"

// SetL4Bootstrap replaces the L4 bootstrap; it receives the default one.
func SetL4Bootstrap(r *Router, f func(ctx context.Context, start func(context.Context) error) error) {
	start := r.startL4
	r.bootstrapL4 = func(ctx context.Context) error { return f(ctx, start) }
}

// L4SlowPathEntries counts calls that missed the latch's fast path.
func L4SlowPathEntries(r *Router) int64 { return r.l4.slow.Load() }

// ACMEDecide runs the on-demand issuance decision.
func ACMEDecide(ctx context.Context, a *ACME, name string) error {
	return a.cfg.OnDemand.DecisionFunc(ctx, name)
}
