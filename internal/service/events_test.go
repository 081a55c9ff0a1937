package service

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

func event(owner, id string, st State) Event {
	return Event{Sandbox: Sandbox{ID: id, Owner: owner, State: st}}
}

func TestEvents_OnlyTheOwnersSandboxes(t *testing.T) {
	var h eventHub
	alice, err := h.add("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	bob, err := h.add("bob")
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	h.publish(event("bob", "sb-b", StateRunning))
	h.publish(event("alice", "sb-a", StateStopped))
	select {
	case ev := <-alice.Events():
		if ev.Sandbox.ID != "sb-a" {
			t.Fatalf("alice got %s's event", ev.Sandbox.Owner)
		}
	default:
		t.Fatal("alice got nothing")
	}
	select {
	case ev := <-alice.Events():
		t.Fatalf("alice got a second event: %+v", ev)
	default:
	}
	if ev := <-bob.Events(); ev.Sandbox.ID != "sb-b" {
		t.Fatalf("bob got %+v", ev)
	}
}

// TestEvents_SlowSubscriberIsDroppedNotWaitedFor: a subscriber that never
// reads costs the publisher nothing: past its buffer it is dropped (its
// channel closed, Dropped set) and the others keep theirs.
func TestEvents_SlowSubscriberIsDroppedNotWaitedFor(t *testing.T) {
	var h eventHub
	slow, _ := h.add("alice")
	fast, _ := h.add("alice")
	defer fast.Close()
	got := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 * EventBuffer {
			h.publish(event("alice", "sb-a", StateRunning))
			if _, ok := <-fast.Events(); ok {
				got++
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("publish blocked on a subscriber that does not read")
	}
	n := 0
	for range slow.Events() {
		n++
	}
	if n != EventBuffer || !slow.Dropped() {
		t.Errorf("slow subscriber: %d events buffered, dropped %v; want %d, true", n, slow.Dropped(), EventBuffer)
	}
	if got != 3*EventBuffer || fast.Dropped() {
		t.Errorf("reading subscriber: %d events, dropped %v", got, fast.Dropped())
	}
	slow.Close() // after a drop: harmless
	if h.n.Load() != 1 {
		t.Errorf("%d subscriptions counted, want 1", h.n.Load())
	}
}

func TestEvents_SubscriptionsPerOwnerAreBounded(t *testing.T) {
	var h eventHub
	var subs []*Subscription
	for range MaxSubscriptions {
		s, err := h.add("alice")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := h.add("alice"); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("subscription %d: %v, want ErrTooManySubscriptions", MaxSubscriptions+1, err)
	}
	if s, err := h.add("bob"); err != nil {
		t.Fatalf("another owner: %v", err)
	} else {
		s.Close()
	}
	subs[0].Close()
	subs[0].Close()
	if s, err := h.add("alice"); err != nil {
		t.Fatalf("after a Close: %v", err)
	} else {
		s.Close()
	}
	for _, s := range subs[1:] {
		s.Close()
	}
	if h.n.Load() != 0 || len(h.subs) != 0 {
		t.Errorf("left: %d counted, %d owners", h.n.Load(), len(h.subs))
	}
}

// A node streams what SubscribeAll gets to the cluster's other nodes: the
// local events of every owner but the pool's, never the relayed ones (so
// two nodes never echo); a relayed event reaches its owner's subscribers
// only, and an owner's subscription, even one named "", never gets
// another owner's events. Subscribed changes with owners' subscriptions
// only.
func TestEvents_RelayAndSubscribeAll(t *testing.T) {
	var h eventHub
	if on, _ := h.subscribed(); on {
		t.Fatal("subscribed with no subscription")
	}
	all := h.addAll()
	defer all.Close()
	if on, _ := h.subscribed(); on {
		t.Fatal("SubscribeAll's subscription counts as an owner's")
	}
	_, changed := h.subscribed()
	alice, _ := h.add("alice")
	defer alice.Close()
	nameless, _ := h.add("")
	defer nameless.Close()
	select {
	case <-changed:
	default:
		t.Fatal("the first owner's subscription did not signal a change")
	}
	h.publish(event("alice", "sb-local", StateRunning))
	h.publish(event(store.PoolOwner, "sb-idle", StateRunning))
	h.deliver(event("alice", "sb-relayed", StateStopped), false)
	var gotAll, gotAlice []string
	for len(all.Events()) > 0 {
		gotAll = append(gotAll, (<-all.Events()).Sandbox.ID)
	}
	for len(alice.Events()) > 0 {
		gotAlice = append(gotAlice, (<-alice.Events()).Sandbox.ID)
	}
	if len(gotAll) != 1 || gotAll[0] != "sb-local" {
		t.Errorf("SubscribeAll got %v, want only the local alice event (not the pool's, not the relayed one)", gotAll)
	}
	if len(gotAlice) != 2 {
		t.Errorf("alice got %v, want her local and her relayed event", gotAlice)
	}
	if n := len(nameless.Events()); n != 0 {
		t.Errorf("a subscription of owner \"\" got %d events of alice's", n)
	}
}
