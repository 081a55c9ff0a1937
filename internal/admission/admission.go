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
	ErrCapacityExhausted = errors.New("admission: capacity exhausted")
	// ErrExceedsBudget means a request is larger than the whole budget and
	// can never be admitted.
	ErrExceedsBudget = errors.New("admission: request exceeds the host budget")
	// ErrInvalidRequest means an empty id or a negative amount.
	ErrInvalidRequest = errors.New("admission: invalid request")
)

// Budget is the capacity a host offers to sandboxes.
type Budget struct {
	MilliCPU int64 // 1000 per core
	MemoryMB int64
}

// Validate reports a negative dimension. A zero dimension is valid: it
// admits only requests of zero in that dimension.
func (b Budget) Validate() error {
	if b.MilliCPU < 0 || b.MemoryMB < 0 {
		return fmt.Errorf("admission: budget must not be negative: %s", Request(b))
	}
	return nil
}

// Request is the capacity one sandbox holds.
type Request struct {
	MilliCPU int64
	MemoryMB int64
}

func (r Request) String() string {
	return fmt.Sprintf("%dm CPU, %d MB", r.MilliCPU, r.MemoryMB)
}

func (r Request) add(o Request) Request {
	return Request{r.MilliCPU + o.MilliCPU, r.MemoryMB + o.MemoryMB}
}
func (r Request) sub(o Request) Request {
	return Request{r.MilliCPU - o.MilliCPU, r.MemoryMB - o.MemoryMB}
}

// fits reports whether r fits within free in every dimension.
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
	return fmt.Sprintf("admission: capacity exhausted: requested %s, free %s", e.Requested, e.Free)
}

// Unwrap returns [ErrCapacityExhausted].
func (e *ExhaustedError) Unwrap() error { return ErrCapacityExhausted }

// Controller holds reservations against a budget. It is safe for
// concurrent use.
type Controller struct {
	budget Budget

	mu   sync.Mutex
	held map[string]Request
	used Request // the sum of held
}

// New returns a Controller with no reservations. A negative dimension of
// budget is treated as zero; check it first with [Budget.Validate].
func New(budget Budget) *Controller {
	return &Controller{
		budget: Budget{max(budget.MilliCPU, 0), max(budget.MemoryMB, 0)},
		held:   make(map[string]Request),
	}
}

// Reserve holds req for id, or fails and changes nothing.
//
// It is idempotent: while id holds req, reserving the same req again
// succeeds without holding more, even on a full host. Reserving a different
// req for an id that holds one resizes it in place, as one step: the new
// size must fit beside everyone else's, and if it does not, the old
// reservation stays.
//
// Errors: [ErrInvalidRequest] for an empty id or a negative amount,
// [ErrExceedsBudget] if req is larger than the whole budget, and an
// [*ExhaustedError] (matching [ErrCapacityExhausted]) if req does not fit
// in what is free.
func (c *Controller) Reserve(id string, req Request) error {
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalidRequest)
	}
	if req.MilliCPU < 0 || req.MemoryMB < 0 {
		return fmt.Errorf("%w: negative amount %s for %s", ErrInvalidRequest, req, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()

	old, ok := c.held[id]
	if ok && old == req {
		return nil
	}
	if !req.fits(Request(c.budget)) {
		return fmt.Errorf("%w: %s requested for %s, budget %s", ErrExceedsBudget, req, id, Request(c.budget))
	}
	others := c.used.sub(old)
	free := Request(c.budget).sub(others)
	if !req.fits(free) {
		return &ExhaustedError{
			Requested:  req,
			Free:       Request{max(free.MilliCPU, 0), max(free.MemoryMB, 0)},
			RetryAfter: retryAfter,
		}
	}
	c.held[id] = req
	c.used = others.add(req)
	return nil
}

// Release drops id's reservation. Releasing an id that holds none is a
// no-op, so undo steps and retried destroys may call it freely.
func (c *Controller) Release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req, ok := c.held[id]; ok {
		delete(c.held, id)
		c.used = c.used.sub(req)
	}
}

// Reset replaces every reservation with live: one per id, as read from the
// sandboxes that exist. Live sandboxes are admitted even beyond the budget
// (it may have shrunk since they were created); new reservations then fail
// until enough are released. Negative amounts count as zero.
//
// Reset drops any reservation not in live, including those of creates in
// flight whose rows are not yet stored. Call it before serving requests, or
// include the ids of creates in flight in live.
func (c *Controller) Reset(live map[string]Request) {
	held := make(map[string]Request, len(live))
	var used Request
	for id, req := range live {
		req = Request{max(req.MilliCPU, 0), max(req.MemoryMB, 0)}
		held[id] = req
		used = used.add(req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held, c.used = held, used
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
