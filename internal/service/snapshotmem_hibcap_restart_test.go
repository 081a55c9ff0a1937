package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestSnapshotWithMemory_MemoryImagesCountAfterARestart: a snapshot's
// memory image (<hibernate dir>/.forkmem/<template id>) counts in the
// hibernate storage cap as its owner's after a restart too: the startup
// counts what .forkmem keeps (sweepForkMemory), as it counts the
// hibernate images. With a 520 MB cap (an owner's share 260 MB), one
// 60 MB image of alice's leaves no room in her share for a 256 MB
// sandbox's hibernate on the restarted daemon, which stops it for her
// share; once the snapshot is deleted its room is hers again. Fails on
// the code before: the restarted daemon counted nothing of .forkmem (nor
// did the one before it) and hibernated the sandbox.
func TestSnapshotWithMemory_MemoryImagesCountAfterARestart(t *testing.T) {
	t.Parallel()
	const memMB, capMB = 256, 520
	h := newHibernateHarness(t, harnessOptions{hibernateMaxMB: capMB})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	var ids, snaps []string
	svc := h.svc
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, id := range ids {
			_ = svc.Destroy(cctx, alice, id)
		}
		for _, id := range snaps {
			_ = svc.DeleteTemplate(cctx, alice, id)
		}
	})
	gvisor := func() string {
		t.Helper()
		sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: memMB})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		return sb.ID
	}
	src, other := gvisor(), gvisor()
	if got := r.run(src, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=60 2>/dev/null; du -m /dev/shm/fill"); !strings.HasPrefix(got, "60\t") {
		t.Fatalf("fill /dev/shm: %q", got)
	}
	snap, err := h.svc.Snapshot(ctx, alice, src, "", service.SnapshotWithMemory)
	if err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, snap.ID)

	svc = restartedHibernating(t, h, capMB)
	if err := svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	hb, err := svc.Hibernate(ctx, alice, other)
	if err != nil {
		t.Fatal(err)
	}
	if !hb.Stopped || !strings.Contains(hb.Reason, "share of --hibernate-storage-max") {
		t.Fatalf("after the restart, a hibernate of alice's with her snapshot's memory image (60 MB) in the directory: stopped %v (%q); want stopped for her share of the cap",
			hb.Stopped, hb.Reason)
	}

	if err := svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	snaps = nil
	if _, err := svc.Start(ctx, alice, other); err != nil {
		t.Fatal(err)
	}
	if hb, err := svc.Hibernate(ctx, alice, other); err != nil || hb.Stopped {
		t.Fatalf("a hibernate once the snapshot is deleted = stopped %v (%q), %v; want hibernated", hb.Stopped, hb.Reason, err)
	}
	for _, id := range ids {
		if err := svc.Destroy(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	ids = nil
	nothingLeft(t, h)
}

// TestSnapshotWithMemory_SourceLeftHibernatedKeepsItsImageCounted: a
// kept memory image takes its source's hibernate image's files over in
// the ledger (they are the same files, hard-linked); when the source's
// resume fails after the capture, the capture drops its template and the
// source stays hibernated holding them alone, and they count as its
// again (reclaimShared): a hibernate of the same owner's past her share
// is still stopped, and once the source resumed it fits. Guards the
// hand-over of keepForkMemory: fails with reclaimShared taken out (the
// source's image then counts nothing and the hibernate is let in).
func TestSnapshotWithMemory_SourceLeftHibernatedKeepsItsImageCounted(t *testing.T) {
	t.Parallel()
	const memMB, capMB = 256, 520
	h := newHibernateHarness(t, harnessOptions{hibernateMaxMB: capMB})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	var ids []string
	t.Cleanup(func() {
		h.rt.Clear(runtimetest.Restore)
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, id := range ids {
			_ = h.svc.Destroy(cctx, alice, id)
		}
	})
	gvisor := func() string {
		t.Helper()
		sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: memMB})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		return sb.ID
	}
	src, other := gvisor(), gvisor()
	if got := r.run(src, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=60 2>/dev/null; du -m /dev/shm/fill"); !strings.HasPrefix(got, "60\t") {
		t.Fatalf("fill /dev/shm: %q", got)
	}
	h.rt.Inject(runtimetest.Restore, runtimetest.Fault{Times: 1, Err: errors.New("injected: restore failed")})
	if _, err := h.svc.Snapshot(ctx, alice, src, "", service.SnapshotWithMemory); err == nil || !strings.Contains(err.Error(), "stays hibernated") {
		t.Fatalf("snapshot with memory whose source's resume fails = %v; want refused, the source hibernated", err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Fatalf("memory images left by the failed capture: %v", mem)
	}
	hb, err := h.svc.Hibernate(ctx, alice, other)
	if err != nil {
		t.Fatal(err)
	}
	if !hb.Stopped || !strings.Contains(hb.Reason, "share of --hibernate-storage-max") {
		t.Fatalf("a hibernate of alice's with her source's image (60 MB) still hibernated: stopped %v (%q); want stopped for her share of the cap",
			hb.Stopped, hb.Reason)
	}

	if _, err := h.svc.Resume(ctx, alice, src); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Start(ctx, alice, other); err != nil {
		t.Fatal(err)
	}
	if hb, err := h.svc.Hibernate(ctx, alice, other); err != nil || hb.Stopped {
		t.Fatalf("a hibernate once the source resumed = stopped %v (%q), %v; want hibernated", hb.Stopped, hb.Reason, err)
	}
	for _, id := range ids {
		if err := h.svc.Destroy(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	ids = nil
	nothingLeft(t, h)
}

// restartedHibernating is restarted's daemon with h's hibernate
// directory, gVisor and a hibernate storage cap of capMB.
func restartedHibernating(t *testing.T, h *harness, capMB int64) *service.Service {
	t.Helper()
	router, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: &lateDialer{svc: h.svc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	deps := h.svc.Deps
	deps.Runtime, deps.Router = runtimetest.NewFaulty(h.rt), router
	deps.Admission = admission.New(admission.Budget{MilliCPU: 64_000, MemoryMB: 64 * 1024})
	svc, err := service.New(service.Config{
		NodeID: h.nodeID, DefaultImage: busybox, AgentBinary: agentBinary, Domain: "localhost",
		HibernateDir: h.hibDir, GVisor: true, HibernateStorageMaxMB: capMB,
	}, deps)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
