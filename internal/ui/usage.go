package ui

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// fairSlots is the dashboard's share of metrics calls: at most total at
// once, at most perOwner of them one owner's, and a freed slot goes to
// the owners waiting in turn (round robin), not to whoever asked first.
// So an owner whose samples are slow (its sandboxes' size walks outlast
// every deadline) holds perOwner slots at most, and another owner's
// sample waits for no more than its turn.
type fairSlots struct {
	total, perOwner int

	mu     sync.Mutex
	used   int
	owners map[string]*ownerSlots
	turns  []string // owners with waiters, in the order they are served
}

type ownerSlots struct {
	used    int
	waiters []chan struct{} // closed when granted a slot
}

func newFairSlots(total, perOwner int) *fairSlots {
	return &fairSlots{total: total, perOwner: perOwner, owners: map[string]*ownerSlots{}}
}

// acquire takes one of owner's slots, waiting for its turn until ctx
// ends. Each acquire that returns nil is followed by one release.
func (f *fairSlots) acquire(ctx context.Context, owner string) error {
	f.mu.Lock()
	o := f.owners[owner]
	if o == nil {
		o = &ownerSlots{}
		f.owners[owner] = o
	}
	if f.used < f.total && o.used < f.perOwner && len(o.waiters) == 0 {
		f.used++
		o.used++
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if len(o.waiters) == 0 {
		f.turns = append(f.turns, owner)
	}
	o.waiters = append(o.waiters, ch)
	f.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	f.mu.Lock()
	select {
	case <-ch: // granted meanwhile: give it back
		f.releaseLocked(owner)
	default:
		for i, w := range o.waiters {
			if w == ch {
				o.waiters = append(o.waiters[:i], o.waiters[i+1:]...)
				break
			}
		}
		if len(o.waiters) == 0 {
			f.dropTurnLocked(owner)
		}
		f.forgetLocked(owner)
	}
	f.mu.Unlock()
	return ctx.Err()
}

// release gives back one of owner's slots.
func (f *fairSlots) release(owner string) {
	f.mu.Lock()
	f.releaseLocked(owner)
	f.mu.Unlock()
}

func (f *fairSlots) releaseLocked(owner string) {
	f.used--
	f.owners[owner].used--
	f.grantLocked()
	f.forgetLocked(owner)
}

// grantLocked hands free slots to waiting owners in turn, passing over
// those at their share.
func (f *fairSlots) grantLocked() {
	for f.used < f.total {
		granted := false
		for i, name := range f.turns {
			o := f.owners[name]
			if o.used >= f.perOwner {
				continue
			}
			ch := o.waiters[0]
			o.waiters = o.waiters[1:]
			o.used++
			f.used++
			close(ch)
			f.turns = append(f.turns[:i], f.turns[i+1:]...)
			if len(o.waiters) > 0 {
				f.turns = append(f.turns, name) // the back of the line
			}
			granted = true
			break
		}
		if !granted {
			return
		}
	}
}

func (f *fairSlots) dropTurnLocked(owner string) {
	for i, name := range f.turns {
		if name == owner {
			f.turns = append(f.turns[:i], f.turns[i+1:]...)
			return
		}
	}
}

// forgetLocked drops an owner that holds and waits for nothing, so the
// map holds only owners with calls.
func (f *fairSlots) forgetLocked(owner string) {
	if o := f.owners[owner]; o != nil && o.used == 0 && len(o.waiters) == 0 {
		delete(f.owners, owner)
	}
}

// usageKey names one sample: a sandbox, as one token sees it. Samples are
// shared between the requests of one token (its tabs, its sessions), not
// between tokens: what the API answers (a sample, 404, 401 for a revoked
// token) is the token's.
type usageKey struct {
	token [32]byte
	id    string
}

// usageFlight is one metrics call and its answer, shared by every request
// of its key until usageCacheFor after it came.
type usageFlight struct {
	done    chan struct{}
	calling atomic.Bool // past the slot wait, in the API call
	// waiting counts the requests waiting for it (under usageFlights.mu);
	// when the last leaves before the call began, stopWait ends its wait
	// for a slot, so requests that come and go leave nothing queued.
	waiting  int
	wait     context.Context
	stopWait context.CancelFunc
	u        usageJSON
	status   int
	expires  time.Time // set before done is closed
}

// usageFlights holds the flights in progress or cached.
type usageFlights struct {
	mu sync.Mutex
	m  map[usageKey]*usageFlight
	// sweepAt is the size at which a new flight first sweeps the expired
	// ones: at least minFlightSweep, and twice what a sweep left, so the
	// sweeps cost O(1) a flight however many are cached (a tenant naming
	// ids at random makes one each, as fast as its slots let it).
	sweepAt int
}

// minFlightSweep is the smallest map that is swept.
const minFlightSweep = 1024

// sample is one sandbox's usageJSON as req's token sees it: the answer of
// a call in flight or made less than usageCacheFor ago for the same token
// and sandbox, else a new call. The call itself waits for a slot of the
// session's owner (fairSlots) for at most usageWait and has
// usageCallTimeout to answer, on the dashboard's own context, not this
// request's: other requests may share it. A caller that stops waiting
// (ctx) gets a "no sample yet" that says what it was waiting for.
func (h *Handler) sample(ctx context.Context, req request, id string) (usageJSON, int) {
	key := usageKey{token: sha256.Sum256([]byte(req.sess.token)), id: id}
	now := h.now()
	h.flights.mu.Lock()
	f := h.flights.m[key]
	if f != nil {
		select {
		case <-f.done:
			if !now.Before(f.expires) {
				f = nil
			}
		default:
		}
	}
	if f == nil {
		if len(h.flights.m) >= max(h.flights.sweepAt, minFlightSweep) {
			for k, g := range h.flights.m {
				select {
				case <-g.done:
					if !now.Before(g.expires) {
						delete(h.flights.m, k)
					}
				default:
				}
			}
			h.flights.sweepAt = 2 * len(h.flights.m)
		}
		f = &usageFlight{done: make(chan struct{})}
		f.wait, f.stopWait = context.WithTimeout(h.life, usageWait)
		h.flights.m[key] = f
		go h.fly(f, key, req.api, req.sess.principal.Owner, id)
	}
	f.waiting++
	h.flights.mu.Unlock()

	select {
	case <-f.done:
		h.flights.mu.Lock()
		f.waiting--
		h.flights.mu.Unlock()
		return f.u, f.status
	case <-ctx.Done():
		h.flights.mu.Lock()
		if f.waiting--; f.waiting == 0 && !f.calling.Load() {
			f.stopWait()
		}
		h.flights.mu.Unlock()
		if f.calling.Load() {
			return usageJSON{Error: "no sample yet: its metrics have not come: asked again at the next poll"}, 0
		}
		return usageJSON{Error: "no sample yet: the dashboard is busy sampling other sandboxes"}, 0
	}
}

// fly makes flight f's call and publishes its answer; an answer that is
// not the sandbox's (no slot came, or every waiter left first) is not
// kept for others.
func (h *Handler) fly(f *usageFlight, key usageKey, api *sandboxd.Client, owner, id string) {
	keep := true
	defer func() {
		f.expires = h.now().Add(usageCacheFor)
		if !keep {
			h.flights.mu.Lock()
			if h.flights.m[key] == f {
				delete(h.flights.m, key)
			}
			h.flights.mu.Unlock()
		}
		close(f.done)
	}()
	err := h.usageSlots.acquire(f.wait, owner)
	f.stopWait()
	if err != nil {
		keep = false
		f.u = usageJSON{Error: "no sample yet: the dashboard is busy sampling other sandboxes"}
		return
	}
	defer h.usageSlots.release(owner)
	f.calling.Store(true)
	ctx, cancel := context.WithTimeout(h.life, usageCallTimeout)
	defer cancel()
	m, err := api.Metrics(ctx, id)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Where the time went is not known here (this node's engine,
			// or the node the API forwarded the call to): say only that
			// it did not come in time.
			f.u = usageJSON{Error: fmt.Sprintf("no sample yet: its metrics did not come within %v", usageCallTimeout)}
			return
		}
		if ctx.Err() != nil { // the dashboard is closing
			keep = false
			f.u = usageJSON{Error: "no sample: the dashboard is shutting down"}
			return
		}
		status, msg := apiStatus(err)
		f.u, f.status = usageJSON{Error: msg}, status
		return
	}
	u := usageJSON{
		CPUPercent: m.CPUPercent, MemoryBytes: m.MemoryBytes, MemoryLimitBytes: m.MemoryLimitBytes,
		DiskBytes: m.DiskBytes, DiskLimitBytes: m.DiskLimitBytes, NetRxBytes: m.NetRxBytes, NetTxBytes: m.NetTxBytes, Pids: m.Pids,
	}
	u.Shown = map[string]string{
		"cpu":    strconv.FormatFloat(m.CPUPercent, 'f', 1, 64) + "%",
		"memory": ofLimit(m.MemoryBytes, m.MemoryLimitBytes),
		"disk":   ofLimit(m.DiskBytes, m.DiskLimitBytes),
		"net":    "↓" + humanBytes(int64(m.NetRxBytes)) + " ↑" + humanBytes(int64(m.NetTxBytes)),
	}
	f.u, f.status = u, http.StatusOK
}
