package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// Event is one change of a sandbox's lifecycle, as Subscribe delivers it.
type Event struct {
	// Sandbox is the sandbox after the change; for Gone, its last view.
	Sandbox Sandbox
	// OldState is the state before the change; "" for a new sandbox or
	// when it is not known.
	OldState State
	// Created: the sandbox was just recorded (state creating).
	Created bool
	// Gone: the sandbox was destroyed (or its create rolled back).
	Gone bool
	// ConnectionsClosed, on a resume (paused → running): the sandbox was
	// restored from hibernation, and the connections from outside it had
	// were closed (Resumed.ConnectionsClosed): clients reconnect.
	ConnectionsClosed bool
}

// Subscription limits: a subscriber that falls EventBuffer events behind is
// dropped (its channel closed) rather than slowing the service; an owner
// holds at most MaxSubscriptions at once.
const (
	EventBuffer      = 64
	MaxSubscriptions = 64
)

// ErrTooManySubscriptions refuses a Subscribe past MaxSubscriptions for one
// owner.
var ErrTooManySubscriptions = errors.New("too many event subscriptions for this owner")

// Subscription is one subscriber's view of its owner's sandbox events.
type Subscription struct {
	hub   *eventHub
	owner string
	all   bool // SubscribeAll's: every owner's local events
	c     chan Event
	// dropped is set when the hub closed c because the subscriber fell
	// behind.
	dropped atomic.Bool
	closed  bool // under hub.mu
}

// Events delivers the events, in the order the store recorded them. It is
// closed by Close, or when the subscriber fell behind (Dropped).
func (s *Subscription) Events() <-chan Event { return s.c }

// Dropped reports whether the subscription ended because its subscriber
// fell more than EventBuffer events behind.
func (s *Subscription) Dropped() bool { return s.dropped.Load() }

// Close ends the subscription; repeating it is harmless.
func (s *Subscription) Close() { s.hub.remove(s, false) }

// Subscribe returns a subscription to the lifecycle events of owner's
// sandboxes (creates, state changes, destroys), and of no other owner's:
// an admin subscribes to the owner it acts as, like a Daytona
// organization room. Publishing never blocks the service: a subscriber
// whose buffer is full is dropped. Close it when done.
func (s *Service) Subscribe(owner string) (*Subscription, error) {
	return s.events.add(owner)
}

// SubscribeAll returns a subscription to the events of every sandbox of
// this node, whoever owns it, and of none relayed from other nodes: what
// a cluster node streams to another that has subscribers. Close it when
// done; it is dropped, like any, when it falls behind.
func (s *Service) SubscribeAll() *Subscription {
	return s.events.addAll()
}

// Relay hands ev, an event of another node's sandbox, to this node's
// subscribers of its owner.
func (s *Service) Relay(ev Event) { s.events.deliver(ev, false) }

// Subscribed reports whether this node has subscribers (SubscribeAll's
// left out), and returns a channel that is closed when that changes.
func (s *Service) Subscribed() (bool, <-chan struct{}) { return s.events.subscribed() }

// eventHub fans events out per owner. Its lock is held only for map
// updates and non-blocking sends.
type eventHub struct {
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
	all  map[*Subscription]struct{} // SubscribeAll's
	// n counts the subscriptions: with none, publishing costs nothing
	// (no extra reads of old states).
	n atomic.Int64
	// owners counts the subscriptions of owners (not SubscribeAll's);
	// changed is closed, and replaced, when owners goes from or to zero.
	owners  int
	changed chan struct{}
}

func (h *eventHub) subscribed() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.owners > 0, h.changed
}

// countOwnersLocked adds d to owners and signals a change from or to zero.
func (h *eventHub) countOwnersLocked(d int) {
	before := h.owners
	h.owners += d
	if (before == 0) != (h.owners == 0) && h.changed != nil {
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

func (h *eventHub) add(owner string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string]map[*Subscription]struct{}{}
	}
	if len(h.subs[owner]) >= MaxSubscriptions {
		return nil, fmt.Errorf("%w (%d)", ErrTooManySubscriptions, MaxSubscriptions)
	}
	sub := &Subscription{hub: h, owner: owner, c: make(chan Event, EventBuffer)}
	if h.subs[owner] == nil {
		h.subs[owner] = map[*Subscription]struct{}{}
	}
	h.subs[owner][sub] = struct{}{}
	h.n.Add(1)
	h.countOwnersLocked(1)
	return sub, nil
}

// addAll adds a SubscribeAll subscription (never refused: one per other
// node of a cluster).
func (h *eventHub) addAll() *Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.all == nil {
		h.all = map[*Subscription]struct{}{}
	}
	sub := &Subscription{hub: h, all: true, c: make(chan Event, EventBuffer)}
	h.all[sub] = struct{}{}
	h.n.Add(1)
	return sub
}

func (h *eventHub) remove(sub *Subscription, dropped bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(sub, dropped)
}

func (h *eventHub) removeLocked(sub *Subscription, dropped bool) {
	if sub.closed {
		return
	}
	sub.closed = true
	sub.dropped.Store(dropped)
	h.n.Add(-1)
	if sub.all {
		delete(h.all, sub)
	} else {
		delete(h.subs[sub.owner], sub)
		if len(h.subs[sub.owner]) == 0 {
			delete(h.subs, sub.owner)
		}
		h.countOwnersLocked(-1)
	}
	close(sub.c)
}

// active reports whether anyone subscribes at all.
func (h *eventHub) active() bool { return h.n.Load() > 0 }

// publish hands ev, an event of this node, to every subscriber of its
// sandbox's owner and to SubscribeAll's, without waiting; a subscriber
// with a full buffer is dropped.
func (h *eventHub) publish(ev Event) { h.deliver(ev, true) }

// deliver is publish; SubscribeAll's subscribers get ev only when it is
// local (a relayed event goes no further, so nodes never echo).
func (h *eventHub) deliver(ev Event, local bool) {
	if !h.active() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	send := func(sub *Subscription) {
		select {
		case sub.c <- ev:
		default:
			h.removeLocked(sub, true)
		}
	}
	for sub := range h.subs[ev.Sandbox.Owner] {
		send(sub)
	}
	if local && ev.Sandbox.Owner != store.PoolOwner { // the pool's are nobody's concern
		for sub := range h.all {
			send(sub)
		}
	}
}

// publishingStore is the service's Store with every lifecycle write
// published to the hub after it succeeds (outside the write transaction).
// It is the one place state changes are observed, so no code path that
// changes a state can forget to announce it.
type publishingStore struct {
	Store
	hub *eventHub
}

func (p publishingStore) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	if err := p.Store.CreateSandbox(ctx, sb); err != nil {
		return err
	}
	p.hub.publish(Event{Sandbox: fromRow(*sb), Created: true})
	return nil
}

// ClaimPooled is, to its new owner, the creation of a sandbox (the pool's
// idle sandboxes are nobody's: nobody subscribes to their owner), in the
// events of a cold create: created (creating), then creating → running,
// from its CommitCreate or, for a claim that commits in its write, here.
func (p publishingStore) ClaimPooled(ctx context.Context, c store.PoolClaim) (store.Sandbox, error) {
	row, err := p.Store.ClaimPooled(ctx, c)
	if err == nil {
		created := fromRow(row)
		created.State = StateCreating
		p.hub.publish(Event{Sandbox: created, Created: true})
		if c.Commit {
			p.hub.publish(Event{Sandbox: fromRow(row), OldState: StateCreating})
		}
	}
	return row, err
}

func (p publishingStore) CommitCreate(ctx context.Context, id string, expiresAt time.Time) (store.Sandbox, error) {
	row, err := p.Store.CommitCreate(ctx, id, expiresAt)
	if err == nil {
		p.hub.publish(Event{Sandbox: fromRow(row), OldState: StateCreating})
	}
	return row, err
}

func (p publishingStore) UpdateSandboxState(ctx context.Context, id string, from []store.SandboxState, to store.SandboxState, reason string) (store.Sandbox, error) {
	var old State
	if len(from) == 1 {
		old = from[0]
	} else if p.hub.active() {
		if before, err := p.Store.GetSandbox(ctx, id); err == nil {
			old = before.State
		}
	}
	row, err := p.Store.UpdateSandboxState(ctx, id, from, to, reason)
	if err == nil && old != row.State {
		p.hub.publish(Event{Sandbox: fromRow(row), OldState: old})
	}
	return row, err
}

func (p publishingStore) PauseSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	row, err := p.Store.PauseSandbox(ctx, id)
	if err == nil {
		p.hub.publish(Event{Sandbox: fromRow(row), OldState: StateRunning})
	}
	return row, err
}

func (p publishingStore) ResumeSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	hibernated := false
	if p.hub.active() {
		// The resume's write clears the mark: read before it whether
		// this is a restore (one read from the reader pool, only with
		// subscribers).
		if before, err := p.Store.GetSandbox(ctx, id); err == nil {
			hibernated = !before.HibernatedAt.IsZero()
		}
	}
	row, err := p.Store.ResumeSandbox(ctx, id)
	if err == nil {
		p.hub.publish(Event{Sandbox: fromRow(row), OldState: StatePaused, ConnectionsClosed: hibernated})
	}
	return row, err
}

func (p publishingStore) PauseExpiredSandbox(ctx context.Context, id string, now time.Time) (store.Sandbox, bool, error) {
	row, ok, err := p.Store.PauseExpiredSandbox(ctx, id, now)
	if ok {
		p.hub.publish(Event{Sandbox: fromRow(row), OldState: StateRunning})
	}
	return row, ok, err
}

func (p publishingStore) DeleteSandbox(ctx context.Context, id string) error {
	var before store.Sandbox
	known := false
	if p.hub.active() {
		var err error
		before, err = p.Store.GetSandbox(ctx, id)
		known = err == nil
	}
	if err := p.Store.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	if known {
		p.hub.publish(Event{Sandbox: fromRow(before), OldState: before.State, Gone: true})
	}
	return nil
}
