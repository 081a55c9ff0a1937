package runtimetest

import (
	"context"
	"net"
	"sync"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Method names a runtime.Runtime method for Faulty.
type Method string

// The runtime.Runtime methods.
const (
	Create         Method = "Create"
	Start          Method = "Start"
	Stop           Method = "Stop"
	Pause          Method = "Pause"
	Resume         Method = "Resume"
	Destroy        Method = "Destroy"
	Inspect        Method = "Inspect"
	ListOurs       Method = "ListOurs"
	DialAgent      Method = "DialAgent"
	WaitAgentReady Method = "WaitAgentReady"
	Stats          Method = "Stats"
	// Checkpoint and Restore are runtime.Checkpointer's, which Faulty
	// passes on when the wrapped runtime is one.
	Checkpoint Method = "Checkpoint"
	Restore    Method = "Restore"
)

// Fault is what Faulty does to calls of one method.
type Fault struct {
	// Err is returned by the call.
	Err error
	// After makes the wrapped call happen first, with its side effects, and
	// then returns Err in place of its result: the "it worked but the
	// answer was lost" case (a timeout after the engine acted). By default
	// the wrapped runtime is not called.
	After bool
	// Times is how many calls fail before the fault clears itself;
	// 0 means every call until Clear.
	Times int
	// Hook, when set, runs before the call (to block it, count it, or act
	// in its window); its error fails the call. With a nil Err the call
	// then goes ahead.
	Hook func() error
}

// Faulty wraps a runtime.Runtime and fails chosen methods on demand. It is
// safe for concurrent use. The zero value is not usable; use NewFaulty.
type Faulty struct {
	inner runtime.Runtime

	mu     sync.Mutex
	faults map[Method]*Fault
	calls  map[Method]int
}

var (
	_ runtime.Runtime      = (*Faulty)(nil)
	_ runtime.Checkpointer = (*Faulty)(nil)
)

// NewFaulty wraps inner; until Inject it behaves exactly like inner.
func NewFaulty(inner runtime.Runtime) *Faulty {
	return &Faulty{inner: inner, faults: make(map[Method]*Fault), calls: make(map[Method]int)}
}

// Inject makes calls of m fail as f says, replacing any fault on m.
func (f *Faulty) Inject(m Method, flt Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[m] = &flt
}

// Clear removes the fault on m.
func (f *Faulty) Clear(m Method) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.faults, m)
}

// Calls reports how many times m was called, failed calls included.
func (f *Faulty) Calls(m Method) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[m]
}

// fault counts a call of m and returns the fault to apply to it, if any.
func (f *Faulty) fault(m Method) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[m]++
	flt, ok := f.faults[m]
	if !ok {
		return Fault{}, false
	}
	if flt.Times > 0 {
		flt.Times--
		if flt.Times == 0 {
			delete(f.faults, m)
		}
	}
	return *flt, true
}

// do runs call under m's fault: Err instead of the call, or after it.
func do[T any](f *Faulty, m Method, call func() (T, error)) (T, error) {
	flt, ok := f.fault(m)
	if !ok {
		return call()
	}
	var zero T
	if flt.Hook != nil {
		if err := flt.Hook(); err != nil {
			return zero, err
		}
		if flt.Err == nil {
			return call()
		}
	}
	if flt.After {
		v, err := call()
		if err != nil {
			return v, err
		}
		if c, isConn := any(v).(net.Conn); isConn && c != nil {
			_ = c.Close() // the caller will never see it
		}
	}
	return zero, flt.Err
}

func do0(f *Faulty, m Method, call func() error) error {
	_, err := do(f, m, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// Create implements runtime.Runtime.
func (f *Faulty) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	return do(f, Create, func() (runtime.Instance, error) { return f.inner.Create(ctx, spec) })
}

// Start implements runtime.Runtime.
func (f *Faulty) Start(ctx context.Context, id string) error {
	return do0(f, Start, func() error { return f.inner.Start(ctx, id) })
}

// Stop implements runtime.Runtime.
func (f *Faulty) Stop(ctx context.Context, id string) error {
	return do0(f, Stop, func() error { return f.inner.Stop(ctx, id) })
}

// Pause implements runtime.Runtime.
func (f *Faulty) Pause(ctx context.Context, id string) error {
	return do0(f, Pause, func() error { return f.inner.Pause(ctx, id) })
}

// Resume implements runtime.Runtime.
func (f *Faulty) Resume(ctx context.Context, id string) error {
	return do0(f, Resume, func() error { return f.inner.Resume(ctx, id) })
}

// Destroy implements runtime.Runtime.
func (f *Faulty) Destroy(ctx context.Context, id string) error {
	return do0(f, Destroy, func() error { return f.inner.Destroy(ctx, id) })
}

// Inspect implements runtime.Runtime.
func (f *Faulty) Inspect(ctx context.Context, id string) (runtime.Status, error) {
	return do(f, Inspect, func() (runtime.Status, error) { return f.inner.Inspect(ctx, id) })
}

// ListOurs implements runtime.Runtime.
func (f *Faulty) ListOurs(ctx context.Context) ([]runtime.Instance, error) {
	return do(f, ListOurs, func() ([]runtime.Instance, error) { return f.inner.ListOurs(ctx) })
}

// DialAgent implements runtime.Runtime.
func (f *Faulty) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	return do(f, DialAgent, func() (net.Conn, error) { return f.inner.DialAgent(ctx, id) })
}

// WaitAgentReady implements runtime.Runtime.
func (f *Faulty) WaitAgentReady(ctx context.Context, id string) error {
	return do0(f, WaitAgentReady, func() error { return f.inner.WaitAgentReady(ctx, id) })
}

// Stats implements runtime.Runtime.
func (f *Faulty) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	return do(f, Stats, func() (runtime.Stats, error) { return f.inner.Stats(ctx, id) })
}

// CanCheckpoint implements runtime.Checkpointer: the wrapped runtime's
// answer (runtime.CanCheckpoint).
func (f *Faulty) CanCheckpoint(iso runtime.Isolation) runtime.CheckpointSupport {
	return runtime.CanCheckpoint(f.inner, iso)
}

// Checkpoint implements runtime.Checkpointer; a wrapped runtime that is
// none refuses with runtime.ErrCheckpointUnsupported.
func (f *Faulty) Checkpoint(ctx context.Context, id, dir string) error {
	return do0(f, Checkpoint, func() error {
		c, ok := f.inner.(runtime.Checkpointer)
		if !ok {
			return runtime.ErrCheckpointUnsupported
		}
		return c.Checkpoint(ctx, id, dir)
	})
}

// SealCheckpoint implements runtime.CheckpointSealer: the wrapped
// runtime's, or nothing when it seals none.
func (f *Faulty) SealCheckpoint(dir string) error {
	if s, ok := f.inner.(runtime.CheckpointSealer); ok {
		return s.SealCheckpoint(dir)
	}
	return nil
}

// Restore implements runtime.Checkpointer.
func (f *Faulty) Restore(ctx context.Context, id, dir string) error {
	return do0(f, Restore, func() error {
		c, ok := f.inner.(runtime.Checkpointer)
		if !ok {
			return runtime.ErrCheckpointUnsupported
		}
		return c.Restore(ctx, id, dir)
	})
}
