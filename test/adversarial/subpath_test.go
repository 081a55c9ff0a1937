package adversarial_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// hostMarker makes a directory on the host, outside every volume, holding
// MARKER and x/MARKER: what a subpath that escaped the volume would show.
func hostMarker(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"MARKER", "x/MARKER"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// refusedByTheRequest reports whether err is a 4xx answer (the create's
// refusal) and fails t for any other error.
func refusedByTheRequest(t *testing.T, sub string, err error) bool {
	t.Helper()
	var apiErr *sandboxd.APIError
	if !errors.As(err, &apiErr) || apiErr.Status/100 != 4 {
		t.Fatalf("subpath %q: %v, want a 4xx refusal or a sandbox", sub, err)
	}
	return true
}

// TestSubpath_LinkSwapNeverMountsTheHost is the attack subpath mounts
// invite: sandbox A of the same owner mounts the whole volume and plants
// links to the host (/, /etc, a host directory with a marker) where
// sandbox B's subpath points, first still, then swapped in a loop while B
// is created again and again. Every create of B is refused (4xx) or mounts
// a real directory of the volume: B never sees the host's marker, and
// what B writes never lands on the host.
func TestSubpath_LinkSwapNeverMountsTheHost(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "subpath-swap")
	c := tenant(t, d, "alice")
	a := sandbox(t, c, sandboxd.CreateRequest{Mounts: []sandboxd.Mount{{Volume: "shared", Path: "/vol"}}})
	host := hostMarker(t)
	ctx := testContext(t, 5*time.Minute)

	sh(t, c, a.ID, "ln -s / /vol/root && ln -s /etc /vol/etc && ln -s "+host+" /vol/host && mkdir -p /vol/real && ln -s "+host+" /vol/real/host && ln -s ../../.. /vol/real/up")
	for _, sub := range []string{"root", "root/etc", "etc", "host", "host/x", "real/host", "real/up", "real/up/etc"} {
		_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Mounts: []sandboxd.Mount{{Volume: "shared", Path: "/data", Subpath: sub}}})
		if err == nil {
			t.Fatalf("subpath %q through a planted link was mounted", sub)
		}
		var apiErr *sandboxd.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != "invalid_argument" {
			t.Errorf("subpath %q through a link: %v, want 400 invalid_argument", sub, err)
		}
	}

	// The loop: A turns /vol/sw into a directory, then into a link to the
	// host, as fast as it can, in the background until A is destroyed.
	// Bursts of flips as fast as a shell goes, each followed by a moment
	// as a directory, so that creates meet both the race and a directory.
	flip := "rm -rf /vol/sw; mkdir -p /vol/sw/x; rm -rf /vol/sw; ln -s " + host + " /vol/sw"
	sh(t, c, a.ID, "setsid sh -c 'while :; do i=0; while [ $i -lt 100 ]; do "+flip+"; i=$((i+1)); done; rm -rf /vol/sw; mkdir -p /vol/sw/x; sleep 0.2; done' </dev/null >/dev/null 2>&1 &")
	testenv.WaitFor(t, "the swap loop runs", func() error {
		out := sh(t, c, a.ID, "a=$(ls -ld /vol/sw 2>&1); sleep 0.05; b=$(ls -ld /vol/sw 2>&1); [ \"$a\" != \"$b\" ] && echo moving")
		if strings.TrimSpace(string(out.Stdout)) != "moving" {
			return errors.New("/vol/sw does not change")
		}
		return nil
	})
	const creates = 24
	refused, mounted := 0, 0
	for i := range creates {
		sub := "sw"
		if i%2 == 1 {
			sub = "sw/x"
		}
		b, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Mounts: []sandboxd.Mount{{Volume: "shared", Path: "/data", Subpath: sub}}})
		if err != nil {
			refusedByTheRequest(t, sub, err)
			refused++
			continue
		}
		mounted++
		res := sh(t, c, b.ID, "if [ -e /data/MARKER ]; then echo HOST; fi; echo pwned > /data/pwned-"+b.ID+" || true; ls -A /data")
		if strings.Contains(string(res.Stdout), "HOST") || strings.Contains(string(res.Stdout), "MARKER") {
			t.Errorf("subpath %q mounted the host directory: %q", sub, res.Stdout)
		}
		if err := c.DestroySandbox(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d creates during the swap loop: %d refused, %d mounted a directory of the volume", creates, refused, mounted)
	left, _ := os.ReadDir(host)
	for _, e := range left {
		if e.Name() != "MARKER" && e.Name() != "x" {
			t.Errorf("a sandbox wrote %s into the host directory", e.Name())
		}
	}
	if m := daemontest.MountsUnder(filepath.Join(d.DataDir(), "mounts")); len(m) != 0 {
		t.Errorf("staged mounts left after the creates were destroyed: %v", m)
	}
}

// TestSubpath_BadSubpathIs400AndCreatesNothing: a subpath that is
// absolute, climbs with .., is not clean or is too long is a 400
// invalid_argument and makes no container, no volume, no staging.
func TestSubpath_BadSubpathIs400AndCreatesNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "subpath-bad")
	c := tenant(t, d, "alice")
	ctx := testContext(t, 2*time.Minute)
	for _, sub := range []string{"..", "../etc", "a/../..", "/etc", "/", ".", "a//b", "a/", strings.Repeat("a/", 600) + "a", strings.Repeat("n", 256)} {
		_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Mounts: []sandboxd.Mount{{Volume: "fresh", Path: "/data", Subpath: sub}}})
		var apiErr *sandboxd.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != "invalid_argument" {
			t.Errorf("subpath %q: %v, want 400 invalid_argument", sub, err)
		}
	}
	page, err := c.ListSandboxes(ctx, sandboxd.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 0 {
		t.Errorf("sandboxes after refused creates: %d", len(page.Items))
	}
	for _, dir := range []string{"volumes", "mounts"} {
		if left, _ := os.ReadDir(filepath.Join(d.DataDir(), dir)); len(left) != 0 {
			t.Errorf("%s/ after refused creates: %v", dir, left)
		}
	}
}

// TestSubpath_DestroyAndRestartLeaveNoMount: a subpath sandbox survives a
// SIGKILL of its daemon with its staged mount, its destroy detaches it,
// and the restart sweeps a staged mount whose sandbox is gone.
func TestSubpath_DestroyAndRestartLeaveNoMount(t *testing.T) {
	d := startDaemon(t, "subpath-restart")
	c := tenant(t, d, "alice")
	ctx := testContext(t, 3*time.Minute)
	staging := filepath.Join(d.DataDir(), "mounts")
	b := sandbox(t, c, sandboxd.CreateRequest{Mounts: []sandboxd.Mount{{Volume: "v", Path: "/data", Subpath: "p/q"}}})
	sh(t, c, b.ID, "echo kept > /data/f")
	if m := daemontest.MountsUnder(staging); len(m) != 1 || !strings.Contains(m[0], b.ID) {
		t.Fatalf("staged mounts: %v, want one of %s", m, b.ID)
	}

	// The daemon dies; a staged mount of a sandbox that no longer exists
	// is there when it starts again (planted, as a daemon killed between
	// a destroy's teardown and its unmount leaves it).
	d.Kill()
	stale := filepath.Join(staging, "sb-00000000000000ee", "0")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := syscall.Mount(src, stale, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(stale, syscall.MNT_DETACH) })
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m := daemontest.MountsUnder(staging)
	if len(m) != 1 || !strings.Contains(m[0], b.ID) {
		t.Errorf("after the restart: %v, want only %s's", m, b.ID)
	}
	if _, err := os.Stat(filepath.Dir(stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale staging directory is still there: %v", err)
	}
	if got := string(sh(t, c, b.ID, "cat /data/f").Stdout); got != "kept\n" {
		t.Errorf("after the restart the sandbox reads %q", got)
	}
	if err := c.DestroySandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if m := daemontest.MountsUnder(staging); len(m) != 0 {
		t.Errorf("staged mounts after the destroy: %v", m)
	}
}
