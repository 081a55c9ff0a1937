package oci

import "sync"

// keyedLocks are mutexes by sandbox id: callers of different sandboxes
// never wait for each other. (Striped mutexes, a fixed array indexed by a
// hash of the id, made creates wait for whole boots of other sandboxes:
// with 50 creates at once over 64 stripes, about one in three shared a
// stripe, and a boot holds its sandbox's lock for its whole length.) An
// id's entry exists only while a caller holds or waits for it, so the
// map is bounded by the calls in flight.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int // holders and waiters; guarded by keyedLocks.mu
}

// idLock is one sandbox's mutex in a keyedLocks: Lock, then Unlock once,
// as a sync.Mutex (it is not reusable after Unlock by another goroutine
// than the one that locked it).
type idLock struct {
	set *keyedLocks
	id  string
	e   *keyedLock
}

// of returns id's lock, not yet locked.
func (l *keyedLocks) of(id string) *idLock { return &idLock{set: l, id: id} }

// Lock locks the sandbox's mutex, waiting while another caller holds it.
func (k *idLock) Lock() {
	l := k.set
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*keyedLock{}
	}
	e := l.m[k.id]
	if e == nil {
		e = &keyedLock{}
		l.m[k.id] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	k.e = e
}

// Unlock unlocks it; the entry goes when no other caller holds or waits.
func (k *idLock) Unlock() {
	e, l := k.e, k.set
	k.e = nil
	e.mu.Unlock()
	l.mu.Lock()
	if e.refs--; e.refs == 0 {
		delete(l.m, k.id)
	}
	l.mu.Unlock()
}
