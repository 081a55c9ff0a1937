package admission

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// retryAfter is the wait suggested to a caller refused for lack of
// capacity. Capacity returns when a sandbox is destroyed or times out, which
// we cannot predict; a few seconds is long enough not to hammer a full host
// and short enough that a client notices freed capacity soon.
const retryAfter = 5 * time.Second

var (
	// ErrCapacityExhausted matches every [*ExhaustedError].
	ErrCapacityExhausted = errors.New("capacity exhausted")
	// ErrExceedsBudget means a request is larger than the whole budget and
	// can never be admitted.
	ErrExceedsBudget = errors.New("request exceeds the host budget")
	// ErrInvalidRequest means an empty id or a negative amount.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrQuotaExceeded matches every [*QuotaError].
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrExceedsQuota means a request is larger than its owner's whole
	// quota and can never be admitted under it.
	ErrExceedsQuota = errors.New("request exceeds the quota")
)

// Budget is the capacity a host offers to sandboxes.
type Budget struct {
	MilliCPU int64 // 1000 per core
	MemoryMB int64
}

func (b Budget) request() Request { return Request{MilliCPU: b.MilliCPU, MemoryMB: b.MemoryMB} }

// Validate reports a negative dimension. A zero dimension is valid: it
// admits only requests of zero in that dimension.
func (b Budget) Validate() error {
	if b.MilliCPU < 0 || b.MemoryMB < 0 {
		return fmt.Errorf("admission: budget must not be negative: %s", b.request())
	}
	return nil
}

// Request is the capacity one sandbox holds.
type Request struct {
	MilliCPU int64
	MemoryMB int64
	// DiskMB is the sandbox's disk limit. It counts against its owner's
	// quota only: the host has no disk budget here (the engine's file
	// system is the host's bound, each sandbox's limit the kernel's).
	DiskMB int64
	// Owner is the tenant the capacity counts against for quotas; it
	// takes no part in sums.
	Owner string
}

func (r Request) String() string {
	if r.DiskMB != 0 {
		return fmt.Sprintf("%dm CPU, %d MB, %d MB disk", r.MilliCPU, r.MemoryMB, r.DiskMB)
	}
	return fmt.Sprintf("%dm CPU, %d MB", r.MilliCPU, r.MemoryMB)
}

func (r Request) add(o Request) Request {
	return Request{MilliCPU: r.MilliCPU + o.MilliCPU, MemoryMB: r.MemoryMB + o.MemoryMB, DiskMB: r.DiskMB + o.DiskMB}
}
func (r Request) sub(o Request) Request {
	return Request{MilliCPU: r.MilliCPU - o.MilliCPU, MemoryMB: r.MemoryMB - o.MemoryMB, DiskMB: r.DiskMB - o.DiskMB}
}

// fits reports whether r fits within free in the host's dimensions (CPU
// and memory; disk is a quota dimension only).
func (r Request) fits(free Request) bool {
	return r.MilliCPU <= free.MilliCPU && r.MemoryMB <= free.MemoryMB
}

// ExhaustedError reports a request refused because the host is full now.
type ExhaustedError struct {
	Requested Request
	// Free is the most the id could have held when refused: the budget
	// less every other id's reservation. It is never negative, even when
	// the host is overcommitted after a Reset.
	Free Request
	// RetryAfter suggests how long to wait before trying again.
	RetryAfter time.Duration
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("capacity exhausted: requested %s, free %s", e.Requested, e.Free)
}

// Unwrap returns [ErrCapacityExhausted].
func (e *ExhaustedError) Unwrap() error { return ErrCapacityExhausted }

// Controller holds reservations against a budget. It is safe for
// concurrent use.
type Controller struct {
	budget Budget

	mu     sync.Mutex
	held   map[string]Request
	used   Request             // the sum of held
	owners map[string]ownerUse // held, summed per owner
	// elsewhere is what owners hold outside this controller (SetElsewhere).
	elsewhere func(owner string) Holding
}

// Holding is what one owner holds: how many reservations, and their sum
// (its Owner unset).
type Holding struct {
	Sandboxes int64
	Request
}

// SetElsewhere makes quotas count, beside an owner's reservations here,
// what f says the owner holds elsewhere: in cluster mode, on the other
// nodes, as they last published it. f is called under the controller's
// lock, so it must answer from memory, without blocking. A quota checked
// this way is as exact as f is current: creates that race on two nodes
// within one publication may pass it together.
func (c *Controller) SetElsewhere(f func(owner string) Holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elsewhere = f
}

// Holdings returns what every owner holds here, by owner.
func (c *Controller) Holdings() map[string]Holding {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]Holding, len(c.owners))
	for owner, u := range c.owners {
		out[owner] = Holding{Sandboxes: u.sandboxes, Request: Request{MilliCPU: u.MilliCPU, MemoryMB: u.MemoryMB, DiskMB: u.DiskMB}}
	}
	return out
}

// New returns a Controller with no reservations. A negative dimension of
// budget is treated as zero; check it first with [Budget.Validate].
func New(budget Budget) *Controller {
	return &Controller{
		budget: Budget{max(budget.MilliCPU, 0), max(budget.MemoryMB, 0)},
		held:   make(map[string]Request),
		owners: make(map[string]ownerUse),
	}
}

// Reserve holds req for id, or fails and changes nothing. It is
// ReserveWithin with no quota.
func (c *Controller) Reserve(id string, req Request) error {
	return c.ReserveWithin(id, req, Quota{})
}

// ReserveWithin holds req for id if it fits both in what the host has
// free and in what q leaves req.Owner, or fails and changes nothing. The
// two checks and the reservation are one step under one lock: of many
// concurrent calls for one owner, never more are admitted than q allows.
//
// It is idempotent: while id holds req, reserving the same req again
// succeeds without holding more, even on a full host or quota. Reserving
// a different req for an id that holds one resizes it in place, as one
// step: the new size must fit beside everyone else's, and if it does not,
// the old reservation stays.
//
// Errors: [ErrInvalidRequest] for an empty id or a negative amount,
// [ErrExceedsBudget] if req is larger than the whole budget,
// [ErrExceedsQuota] if it is larger than the whole quota, a
// [*QuotaError] (matching [ErrQuotaExceeded]) if it does not fit in what
// the owner's quota leaves, and an [*ExhaustedError] (matching
// [ErrCapacityExhausted]) if it does not fit in what the host has free.
func (c *Controller) ReserveWithin(id string, req Request, q Quota) error {
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalidRequest)
	}
	if req.MilliCPU < 0 || req.MemoryMB < 0 || req.DiskMB < 0 {
		return fmt.Errorf("%w: negative amount %s for %s", ErrInvalidRequest, req, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()

	old, ok := c.held[id]
	if ok && old == req {
		return nil
	}
	if !req.fits(c.budget.request()) {
		return fmt.Errorf("%w: %s requested for %s, budget %s", ErrExceedsBudget, req, id, c.budget.request())
	}
	if err := q.admits(c.quotaUseWithout(req.Owner, id, q), req); err != nil {
		return err
	}
	others := c.used.sub(old)
	free := c.budget.request().sub(others)
	if req.runs() && !req.fits(free) { // a hold of disk alone takes no room on the host
		return &ExhaustedError{
			Requested:  req,
			Free:       Request{MilliCPU: max(free.MilliCPU, 0), MemoryMB: max(free.MemoryMB, 0)},
			RetryAfter: retryAfter,
		}
	}
	c.drop(id)
	c.hold(id, req)
	return nil
}

// Release drops id's reservation. Releasing an id that holds none is a
// no-op, so undo steps and retried destroys may call it freely.
func (c *Controller) Release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(id)
}

// Park keeps, of id's reservation, only its disk: what a stopped sandbox
// still holds, since its container keeps what it wrote. Its CPU and memory
// go back to the host and the owner, and it no longer counts among the
// owner's running sandboxes; its disk counts in the owner's quota until
// the sandbox is destroyed (Release). A later ReserveWithin for id (a
// start) resizes it back. Parking an id that holds nothing is a no-op.
func (c *Controller) Park(id string) { c.ParkWith(id, 0) }

// ParkWith is Park holding extraDiskMB more of the owner's disk: a
// hibernated sandbox's memory image lies on the host's disk beside its
// files (its memory's size in MB). Negative extraDiskMB counts as 0.
func (c *Controller) ParkWith(id string, extraDiskMB int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	req, ok := c.held[id]
	if !ok {
		return
	}
	c.drop(id)
	if disk := req.DiskMB + max(extraDiskMB, 0); disk > 0 {
		c.hold(id, Request{DiskMB: disk, Owner: req.Owner})
	}
}

// FitsQuota is ReserveWithin's quota check alone: whether id holding req
// (in place of what it holds) fits in what q leaves req.Owner. It holds
// nothing and changes nothing.
func (c *Controller) FitsQuota(id string, req Request, q Quota) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return q.admits(c.quotaUseWithout(req.Owner, id, q), req)
}

// runs reports whether a reservation is a running sandbox's (a parked one
// holds only disk): only those count against the owner's sandboxes.
func (r Request) runs() bool { return r.MilliCPU > 0 || r.MemoryMB > 0 }

// hold records req for id; the caller holds mu and id holds nothing.
func (c *Controller) hold(id string, req Request) {
	c.held[id] = req
	c.used = c.used.add(req)
	u := c.owners[req.Owner]
	if req.runs() {
		u.sandboxes++
	}
	u.Request = u.Request.add(req)
	c.owners[req.Owner] = u
}

// drop removes id's reservation, if any; the caller holds mu.
func (c *Controller) drop(id string) {
	req, ok := c.held[id]
	if !ok {
		return
	}
	delete(c.held, id)
	c.used = c.used.sub(req)
	u := c.owners[req.Owner]
	if req.runs() {
		u.sandboxes--
	}
	u.Request = u.Request.sub(req)
	if u.sandboxes <= 0 && u.MilliCPU <= 0 && u.MemoryMB <= 0 && u.DiskMB <= 0 {
		delete(c.owners, req.Owner)
	} else {
		c.owners[req.Owner] = u
	}
}

// ownerUseWithout is what owner holds, less id's reservation (a resize
// counts once); the caller holds mu.
func (c *Controller) ownerUseWithout(owner, id string) ownerUse {
	u := c.owners[owner]
	if old, ok := c.held[id]; ok && old.Owner == owner {
		if old.runs() {
			u.sandboxes--
		}
		u.Request = u.Request.sub(old)
	}
	return u
}

// quotaUseWithout is what owner holds for q's check: ownerUseWithout, plus
// what it holds elsewhere when q limits anything; the caller holds mu.
func (c *Controller) quotaUseWithout(owner, id string, q Quota) ownerUse {
	u := c.ownerUseWithout(owner, id)
	if c.elsewhere != nil && !q.IsZero() {
		e := c.elsewhere(owner)
		u.sandboxes += e.Sandboxes
		u.Request = u.Request.add(e.Request)
	}
	return u
}

// Reset replaces every reservation with live: one per id, as read from the
// sandboxes that exist. Live sandboxes are admitted even beyond the budget
// (it may have shrunk since they were created) or their owners' quotas;
// new reservations then fail until enough are released. Negative amounts
// count as zero.
//
// Reset drops any reservation not in live, including those of creates in
// flight whose rows are not yet stored. Call it before serving requests, or
// include the ids of creates in flight in live.
func (c *Controller) Reset(live map[string]Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held, c.used, c.owners = make(map[string]Request, len(live)), Request{}, make(map[string]ownerUse)
	for id, req := range live {
		req.MilliCPU, req.MemoryMB, req.DiskMB = max(req.MilliCPU, 0), max(req.MemoryMB, 0), max(req.DiskMB, 0)
		c.hold(id, req)
	}
}

// Usage returns the sum of all reservations and the budget. used may exceed
// budget after a [Controller.Reset].
func (c *Controller) Usage() (used Request, budget Budget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, c.budget
}

// Held returns id's reservation, and whether it holds one.
func (c *Controller) Held(id string) (Request, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	req, ok := c.held[id]
	return req, ok
}
