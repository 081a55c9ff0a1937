package service_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestHibernate_StorageCapStops: with --hibernate-storage-max such that
// one owner's share of it (half) is just above one sandbox's memory
// limit, the first hibernate fits (it reserves the limit, then holds its
// image's size); a second of the same owner's, whose limit on top of the
// first image passes that share, stops its sandbox and says why, naming
// nobody's usage; another owner's hibernate still fits (one tenant
// cannot fill the cap for all: it used to); once the first resumed (its
// image gone) a hibernate fits again.
func TestHibernate_StorageCapStops(t *testing.T) {
	t.Parallel()
	const memMB, fillMB = 256, 24
	h := newHibernateHarness(t, harnessOptions{hibernateMaxMB: 2 * (memMB + fillMB/2)})
	ctx := t.Context()
	create := func(owner string) service.Sandbox {
		t.Helper()
		sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: owner, Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: memMB})
		if err != nil {
			t.Fatal(err)
		}
		return sb.Sandbox
	}
	a, b, c := create("alice"), create("alice"), create("bob")
	// Memory the first one's image must hold: a tmpfs file of random
	// bytes (gVisor keeps /dev/shm in its memory).
	if res, err := h.svc.Exec(ctx, admin, a.ID, service.ExecRequest{Command: "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=24 2>/dev/null && echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("fill /dev/shm: %q %q, %v", res.Stdout, res.Stderr, err)
	}

	if hib, err := h.svc.Hibernate(ctx, admin, a.ID); err != nil || hib.Stopped {
		t.Fatalf("first Hibernate = %+v, %v; want hibernated", hib, err)
	}
	if got := du(t, filepath.Join(h.hibDir, a.ID)); got < fillMB/2<<20 {
		t.Fatalf("the first image holds %d bytes; the test wants more than %d MB", got, fillMB/2)
	}
	hib, err := h.svc.Hibernate(ctx, admin, b.ID)
	if err != nil || !hib.Stopped || !strings.Contains(hib.Reason, "--hibernate-storage-max") || hib.State != service.StateStopped {
		t.Fatalf("second Hibernate = stopped %v (%q), state %s, %v; want stopped for the cap", hib.Stopped, hib.Reason, hib.State, err)
	}
	if strings.Contains(hib.Reason, "held") {
		t.Errorf("the cap's refusal %q names what the images hold (every tenant's)", hib.Reason)
	}
	if hib, err := h.svc.Hibernate(ctx, admin, c.ID); err != nil || hib.Stopped {
		t.Fatalf("another owner's Hibernate = %+v, %v; want hibernated within its share", hib, err)
	}

	if _, err := h.svc.Resume(ctx, admin, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Resume(ctx, admin, b.ID); err != nil {
		t.Fatal(err)
	}
	if hib, err := h.svc.Hibernate(ctx, admin, b.ID); err != nil || hib.Stopped {
		t.Fatalf("Hibernate after the first resumed = %+v, %v; want hibernated", hib, err)
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	h.assertNothingLeft(t)
}

// du is what the files under dir hold on disk, in bytes.
func du(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	return n
}
