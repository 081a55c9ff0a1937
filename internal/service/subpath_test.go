package service_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// exec runs a shell command in sandbox id and returns its stdout; a
// non-zero exit fails t.
func (h *harness) sh(t *testing.T, id, script string) string {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), admin, id, service.ExecRequest{Command: script})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// TestCreate_SubpathSeesOnlyItsSubtree: a sandbox that mounts a subpath
// sees that directory only; what it writes lands in the volume, where a
// sandbox mounting the whole volume reads it; its destroy detaches the
// staged mount and keeps the data.
func TestCreate_SubpathSeesOnlyItsSubtree(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	whole, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Mounts: []service.Mount{{Volume: "data", Path: "/vol"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.sh(t, whole.ID, "mkdir -p /vol/users/alice /vol/users/bob && echo mine > /vol/users/alice/f && echo theirs > /vol/users/bob/f && echo top > /vol/top")

	part, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Mounts: []service.Mount{{Volume: "data", Path: "/data", Subpath: "users/alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.sh(t, part.ID, "ls -A /data; cat /data/f"); got != "f\nmine\n" {
		t.Errorf("the subpath sandbox sees %q, want only users/alice", got)
	}
	h.sh(t, part.ID, "echo from-part > /data/new")
	if got := h.sh(t, whole.ID, "cat /vol/users/alice/new"); got != "from-part\n" {
		t.Errorf("the whole volume reads %q", got)
	}
	sb, err := h.svc.Get(ctx, admin, part.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.Mounts) != 1 || sb.Mounts[0].Subpath != "users/alice" {
		t.Errorf("the sandbox reports mounts %+v", sb.Mounts)
	}
	if got := h.stagedMounts(t); len(got) != 1 || !strings.Contains(got[0], part.ID) {
		t.Errorf("staged mounts: %v, want one of %s", got, part.ID)
	}
	if err := h.svc.Destroy(ctx, admin, part.ID); err != nil {
		t.Fatal(err)
	}
	if got := h.stagedMounts(t); len(got) != 0 {
		t.Errorf("staged mounts after the destroy: %v", got)
	}
	if _, err := os.Stat(filepath.Join(h.stagingRoot(), part.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory after the destroy: %v", err)
	}
	if got := h.sh(t, whole.ID, "cat /vol/users/alice/new"); got != "from-part\n" {
		t.Errorf("after the destroy the volume reads %q", got)
	}
	if err := h.svc.Destroy(ctx, admin, whole.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestCreate_BadSubpathIs400AndChangesNothing: subpaths that are absolute,
// climb with .., are not clean or are too long are refused before any
// side effect; a subpath through a link planted in the volume is refused
// when it is opened, and the create leaves nothing.
func TestCreate_BadSubpathIs400AndChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	for _, sub := range []string{"..", "../x", "a/../../x", "/etc", "/", ".", "a//b", "a/", "./a", strings.Repeat("a/", 600) + "a", strings.Repeat("n", 256), "a\x00b"} {
		_, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Mounts: []service.Mount{{Volume: "data", Path: "/data", Subpath: sub}}})
		var fe *service.FieldError
		if !errors.As(err, &fe) || fe.Field != "mounts" {
			t.Errorf("subpath %q: %v, want a FieldError on mounts", sub, err)
		}
	}
	h.assertNothingLeft(t)
	h.assertNoVolumes(t)

	// A link to the host's root planted in the volume (by a sandbox that
	// mounts it whole; here straight on the host).
	vol := h.volumeDir(t, "alice", "data")
	if err := os.Symlink("/", filepath.Join(vol, "root")); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"root", "root/etc"} {
		_, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Mounts: []service.Mount{{Volume: "data", Path: "/data", Subpath: sub}}})
		if !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("subpath %q through a link to /: %v, want ErrInvalidArgument", sub, err)
		}
	}
	h.assertNothingLeft(t)
}

// volumeDir makes owner's volume name (through a create that fails) and
// returns its host directory.
func (h *harness) volumeDir(t *testing.T, owner, name string) string {
	t.Helper()
	binds, err := h.vols.Dir.Prepare(t.Context(), owner, "sb-00000000000000ff", []service.Mount{{Volume: name, Path: "/v"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.vols.Dir.Release(t.Context(), "sb-00000000000000ff"); err != nil {
		t.Fatal(err)
	}
	return binds[0].HostPath
}

// TestReconcile_SweepsAStaleStagedMount: a staged mount whose sandbox has
// no row (its daemon was killed between the teardown and the undo) is
// detached by the startup pass; a live sandbox's is kept.
func TestReconcile_SweepsAStaleStagedMount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	live, err := h.svc.CreateSandbox(ctx, subpathRequest())
	if err != nil {
		t.Fatal(err)
	}
	const gone = "sb-00000000000000ee"
	if _, err := h.vols.Dir.Prepare(ctx, "alice", gone, subpathRequest().Mounts, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.stagedMounts(t); len(got) != 2 {
		t.Fatalf("staged mounts before the pass: %v", got)
	}
	if err := h.svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	got := h.stagedMounts(t)
	if len(got) != 1 || !strings.Contains(got[0], live.ID) {
		t.Errorf("after the startup pass: %v, want only %s's", got, live.ID)
	}
	if err := h.svc.Destroy(ctx, admin, live.ID); err != nil {
		t.Fatal(err)
	}
	h.vols.Release(ctx, gone)
	h.assertNothingLeft(t)
}

// TestStart_StagesAgainWhatARebootTook: the staged mount of a stopped
// sandbox is gone (a host reboot): Start stages it again, so the sandbox
// sees its data, not an empty directory; a subpath that became a link to
// the host meanwhile makes the Start fail, never mounts the host.
func TestStart_StagesAgainWhatARebootTook(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, subpathRequest())
	if err != nil {
		t.Fatal(err)
	}
	h.sh(t, sb.ID, "echo kept > /mnt/cache/f")
	reboot := func() {
		t.Helper()
		if _, err := h.svc.Stop(ctx, admin, sb.ID); err != nil {
			t.Fatal(err)
		}
		for _, m := range h.stagedMounts(t) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
		}
	}
	reboot()
	if _, err := h.svc.Start(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := h.sh(t, sb.ID, "cat /mnt/cache/f"); got != "kept\n" {
		t.Errorf("after the restage the sandbox reads %q", got)
	}

	reboot()
	vol := filepath.Join(h.volumeDir(t, "alice", "cache"), "users")
	if err := os.Rename(filepath.Join(vol, "alice"), filepath.Join(vol, "alice.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(vol, "alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Start(ctx, admin, sb.ID); !errors.Is(err, service.ErrInvalidArgument) {
		t.Errorf("start with the subpath now a link to /: %v, want ErrInvalidArgument", err)
	}
	if got := h.stagedMounts(t); len(got) != 0 {
		t.Errorf("staged after the refused start: %v", got)
	}
	if err := h.svc.Destroy(ctx, admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}
