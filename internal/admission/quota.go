package admission

import (
	"fmt"
	"strconv"
	"time"
)

// Quota bounds what one owner may hold at once, across every sandbox of
// theirs that holds capacity (running, or being created or started). A
// zero field is unlimited; the zero Quota limits nothing.
type Quota struct {
	Sandboxes int64
	MilliCPU  int64
	MemoryMB  int64
	// DiskMB bounds the sum of the owner's sandboxes' disk limits.
	DiskMB int64
}

// IsZero reports whether q limits nothing.
func (q Quota) IsZero() bool { return q == Quota{} }

func (q Quota) String() string {
	return fmt.Sprintf("%s sandboxes, %s CPU, %s MB, %s MB disk", limit(q.Sandboxes, ""), limit(q.MilliCPU, "m"), limit(q.MemoryMB, ""), limit(q.DiskMB, ""))
}

func limit(v int64, unit string) string {
	if v == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10) + unit
}

// ownerUse is what one owner holds.
type ownerUse struct {
	sandboxes int64
	Request
}

// QuotaError reports a request refused because its owner's quota is used
// up now; it comes back as the owner stops or destroys sandboxes.
type QuotaError struct {
	Owner string
	// Dimension is what ran out: "sandboxes", "cpu", "memory" or "disk".
	Dimension string
	// Limit and Used are in the dimension's unit (count, millicores, MB);
	// Used is what the owner held when refused.
	Limit, Used int64
	// RetryAfter suggests how long to wait before trying again.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	switch e.Dimension {
	case "sandboxes":
		return fmt.Sprintf("quota exceeded: owner %q may run %d sandboxes at once and runs %d; stop or destroy one first", e.Owner, e.Limit, e.Used)
	case "cpu":
		return fmt.Sprintf("quota exceeded: owner %q may hold %g CPU cores and holds %g", e.Owner, float64(e.Limit)/1000, float64(e.Used)/1000)
	case "disk":
		return fmt.Sprintf("quota exceeded: owner %q may hold %d MB of disk (the sum of its sandboxes' disk limits and its volumes' sizes) and holds %d", e.Owner, e.Limit, e.Used)
	}
	return fmt.Sprintf("quota exceeded: owner %q may hold %d MB of memory and holds %d", e.Owner, e.Limit, e.Used)
}

// Unwrap returns [ErrQuotaExceeded].
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// admits checks that req fits in what q leaves an owner holding used.
func (q Quota) admits(used ownerUse, req Request) error {
	if (q.MilliCPU > 0 && req.MilliCPU > q.MilliCPU) || (q.MemoryMB > 0 && req.MemoryMB > q.MemoryMB) || (q.DiskMB > 0 && req.DiskMB > q.DiskMB) {
		return fmt.Errorf("%w: %s requested, owner %q's quota is %s", ErrExceedsQuota, req, req.Owner, q)
	}
	refuse := func(dim string, limit, usedNow int64) error {
		return &QuotaError{Owner: req.Owner, Dimension: dim, Limit: limit, Used: usedNow, RetryAfter: retryAfter}
	}
	switch {
	case req.runs() && q.Sandboxes > 0 && used.sandboxes+1 > q.Sandboxes: // a hold of disk alone (a volume) is no sandbox
		return refuse("sandboxes", q.Sandboxes, used.sandboxes)
	case q.MilliCPU > 0 && used.MilliCPU+req.MilliCPU > q.MilliCPU:
		return refuse("cpu", q.MilliCPU, used.MilliCPU)
	case q.MemoryMB > 0 && used.MemoryMB+req.MemoryMB > q.MemoryMB:
		return refuse("memory", q.MemoryMB, used.MemoryMB)
	case q.DiskMB > 0 && used.DiskMB+req.DiskMB > q.DiskMB:
		return refuse("disk", q.DiskMB, used.DiskMB)
	}
	return nil
}
