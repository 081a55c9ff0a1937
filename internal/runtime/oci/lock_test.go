package oci_test

import (
	"context"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestCreate_OtherSandboxesDoNotWait holds one create in the middle of
// its boot (its sandbox's lock held) and creates another sandbox: that
// one completes meanwhile. Its id is chosen to share a stripe with the
// first under the fixed array of 64 mutexes by FNV-32a hash the locks
// once were, which made it wait for the first's whole boot (with 50
// creates at once, about one in three did).
func TestCreate_OtherSandboxesDoNotWait(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	stripe := func(id string) uint32 {
		h := fnv.New32a()
		h.Write([]byte(id))
		return h.Sum32() % 64
	}
	held := runtimetest.NewSandboxID()
	other := runtimetest.NewSandboxID()
	for stripe(other) != stripe(held) {
		other = runtimetest.NewSandboxID()
	}
	t.Cleanup(func() {
		for _, id := range []string{held, other} {
			if err := rt.Destroy(context.Background(), id); err != nil {
				t.Errorf("Destroy %s: %v", id, err)
			}
		}
	})

	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rt.SetFault(func(step string) error {
		if step == "started" {
			first := false
			once.Do(func() { first = true })
			if first {
				close(blocked)
				<-release
			}
		}
		return nil
	})
	heldDone := make(chan error, 1)
	go func() {
		_, err := rt.Create(context.Background(), spec(held))
		heldDone <- err
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		if err := <-heldDone; err != nil {
			t.Errorf("Create %s (held): %v", held, err)
		}
	}()
	<-blocked

	otherDone := make(chan error, 1)
	go func() {
		_, err := rt.Create(context.Background(), spec(other))
		otherDone <- err
	}()
	select {
	case err := <-otherDone:
		if err != nil {
			t.Fatalf("Create %s: %v", other, err)
		}
	case <-time.After(time.Minute):
		close(release)
		<-otherDone
		t.Fatalf("Create %s waited for the boot of %s, held in its boot", other, held)
	}
}
