// Package admission decides whether the host has room for one more
// sandbox. It keeps one reservation per sandbox id against a fixed budget
// of CPU (millicores) and memory (MB), in memory only.
//
// The create chain reserves before it creates anything and releases in its
// undo; destroy releases. Because reservations are not persisted, the daemon
// rebuilds them from its live rows at start, and the reconciler does the
// same to repair drift ([Controller.Reset]).
//
// A request that does not fit now is [ErrCapacityExhausted] (HTTP 429 with
// Retry-After): capacity comes back as sandboxes end. A request that could
// never fit, being larger than the whole budget, is [ErrExceedsBudget]
// (HTTP 400): retrying would not help.
//
// Each reservation names its owner, and [Controller.ReserveWithin] also
// holds it to the owner's [Quota] (count, CPU, memory) in the same locked
// step, so concurrent requests of one owner never pass the quota together.
// Past the quota is a [*QuotaError] ([ErrQuotaExceeded], 403 quota_exceeded at the edges); larger
// than the whole quota is [ErrExceedsQuota] (400).
package admission
