package service_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestSnapshotWithMemory_MemoryImagesCountInTheHibernateCap: the hibernate
// storage cap (Config.HibernateStorageMaxMB, hibernatecap.go) bounds the
// bytes the images in the hibernate directory hold together, and one
// owner's to half of it, "so that one tenant never fills it and stops
// everybody else's hibernates". The memory images of snapshots with
// memory live in that directory (<hibernate dir>/.forkmem) but are in no
// ledger: the source's entry goes with its resume while the hard-linked
// image stays. One owner's snapshots with memory take the directory past
// the whole cap, and its hibernates are still let in. Fails on the
// current code: ten snapshots of a 256 MB source with 60 MB in /dev/shm
// put more than the whole cap (520 MB) in the directory, and a hibernate
// of the same owner's other sandbox is then not refused by the cap.
func TestSnapshotWithMemory_MemoryImagesCountInTheHibernateCap(t *testing.T) {
	t.Parallel()
	const memMB, capMB = 256, 520 // an owner's share (260 MB) fits one 256 MB sandbox's image
	h := newHibernateHarness(t, harnessOptions{hibernateMaxMB: capMB})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	gvisor := func() string {
		t.Helper()
		sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: memMB})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	src := gvisor()
	if got := r.run(src, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=60 2>/dev/null; du -m /dev/shm/fill"); !strings.HasPrefix(got, "60\t") {
		t.Fatalf("fill /dev/shm: %q", got)
	}
	var snaps []string
	for range 10 {
		snap, err := h.svc.Snapshot(ctx, alice, src, "", service.SnapshotWithMemory)
		if err != nil {
			t.Logf("snapshot with memory refused: %v", err)
			break
		}
		snaps = append(snaps, snap.ID)
	}
	held := dirBytes(filepath.Join(h.hibDir, ".forkmem"))
	t.Logf("%d snapshots with memory hold %d MB in the hibernate directory (cap %d MB)", len(snaps), held>>20, capMB)
	if held > capMB<<20 {
		t.Errorf("one owner's memory images hold %d MB of the hibernate directory, past the whole cap (%d MB)", held>>20, capMB)
	}
	other := gvisor()
	hb, err := h.svc.Hibernate(ctx, alice, other)
	if err != nil {
		t.Fatal(err)
	}
	if total := dirBytes(h.hibDir); !hb.Stopped && total > capMB<<20 {
		t.Errorf("a hibernate let in with the hibernate directory at %d MB, past the cap (%d MB)", total>>20, capMB)
	}
	for _, id := range []string{src, other} {
		if err := h.svc.Destroy(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range snaps {
		if err := h.svc.DeleteTemplate(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	nothingLeft(t, h)
}

// dirBytes is what the regular files under dir hold.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
