package service_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestSnapshotWithMemory_PastTheHibernateCapLeavesTheSourceRunning: on a
// daemon whose hibernate storage cap (Config.HibernateStorageMaxMB) has no
// room for the source's memory image, a snapshot with memory (v1's
// memory:true) and E2B's snapshot (memory if able) must leave the source
// running its processes: the first refused before the source is touched,
// as when the disk or the disk quota has no room; the second a snapshot of
// its files. captureWithMemory checks imageRoom and imageQuota first but
// not imageCap, so hibernateHolding stops the source "instead" and
// captureWithMemory starts it afresh: its processes are killed by a
// snapshot call.
func TestSnapshotWithMemory_PastTheHibernateCapLeavesTheSourceRunning(t *testing.T) {
	t.Parallel()
	// A cap below one sandbox's memory: no image fits.
	h := newHibernateHarness(t, harnessOptions{hibernateMaxMB: 256})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	g := createGVisor(t, h)
	pid := strings.TrimSpace(r.run(g.ID, counterLoop+" echo $!"))
	r.countsTo(g.ID, 5)
	alive := func(what string) {
		t.Helper()
		if got := r.run(g.ID, "kill -0 "+pid+" 2>/dev/null && echo alive || echo gone"); got != "alive\n" {
			t.Errorf("after %s: the source's process %s is %q, want alive (its processes were killed)", what, pid, strings.TrimSpace(got))
		}
	}
	_, err := h.svc.Snapshot(ctx, alice, g.ID, "", service.SnapshotWithMemory)
	if err == nil {
		t.Error("a snapshot with memory past the hibernate cap succeeded")
	} else {
		t.Logf("snapshot with memory past the cap: %v", err)
	}
	var qe *service.QuotaError
	if !errors.As(err, &qe) && !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("snapshot with memory past the cap = %v, want a quota error or unavailable", err)
	}
	alive("a refused snapshot with memory")

	// E2B's: the files, the source untouched.
	pid = strings.TrimSpace(r.run(g.ID, counterLoop+" echo $!"))
	snap, err := h.svc.Snapshot(ctx, alice, g.ID, "", service.SnapshotMemoryIfAble)
	if err != nil {
		t.Errorf("E2B's snapshot (memory if able) past the hibernate cap = %v, want its files", err)
	} else if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Error(err)
	}
	alive("E2B's snapshot")
	if err := h.svc.Destroy(ctx, admin, g.ID); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, h)
}
