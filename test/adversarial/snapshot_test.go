package adversarial_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// A snapshot under --engine oci is a layer of what the sandbox wrote, and
// the sandbox owns that tree: a link to /, a link to the host's root
// through /proc where its image had a directory, a link climbing out,
// names of dots and a line break, and names the layer format reads as
// whiteouts (one that would empty /bin, one that would remove /etc). The
// snapshot commits links as links and nothing from outside the sandbox's
// tree, the whiteout-like names are left out, and a sandbox of the
// snapshot has its image whole. (The engine's own commit refuses those
// names, so under --engine docker such a snapshot fails, which harms only
// its owner: skipped there.)
func TestSnapshot_HostileTreeCommitsNothingFromOutside(t *testing.T) {
	t.Parallel()
	if os.Getenv(daemontest.EnvEngine) != "oci" {
		t.Skip("SKIP: the oci runtime's commit (" + daemontest.EnvEngine + "=oci); the engine's refuses whiteout names")
	}
	d := startDaemon(t, "snapshot-hostile")
	c := tenant(t, d, "snapper")
	ctx := testContext(t, 5*time.Minute)
	src := sandbox(t, c, sandboxd.CreateRequest{})
	if res := sh(t, c, src.ID, `set -e
		ln -s / /escape
		rm -rf /home && ln -s /proc/1/root /home
		mkdir /d && ln -s ../../../../../.. /d/up
		touch '/d/...' '/d/..x' "/d/a
b"
		touch /bin/.wh..wh..opq /.wh.etc /usr/.wh.bin /d/.wh...`); res.ExitCode != 0 {
		t.Fatalf("the hostile tree: exit %d, %s", res.ExitCode, res.Stderr)
	}
	tpl, err := c.Snapshot(ctx, src.ID, "")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteTemplate(ctx, tpl.ID); err != nil && !isNotFound(err) {
			t.Errorf("delete the snapshot: %v", err)
		}
	})
	if base, err := c.GetImage(ctx, busyboxImage); err != nil || !base.Present {
		t.Errorf("the image: %+v, %v", base, err)
	} else if tpl.SizeBytes > base.SizeBytes+1<<20 {
		t.Errorf("the snapshot is %d bytes, its image %d: something from outside the sandbox's tree", tpl.SizeBytes, base.SizeBytes)
	}
	dst, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Template: tpl.ID})
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DestroySandbox(ctx, dst.ID); err != nil && !isNotFound(err) {
			t.Errorf("destroy %s: %v", dst.ID, err)
		}
	})
	got := string(sh(t, c, dst.ID, `for l in /escape /home /d/up; do readlink $l; done; ls -a /d | tr '\n' ' '; echo; ls /bin/busybox /etc/group /usr/bin/head`).Stdout)
	if want := "/\n/proc/1/root\n../../../../../..\n. .. ... ..x a?b up \n/bin/busybox\n/etc/group\n/usr/bin/head\n"; got != want {
		t.Errorf("in a sandbox of the snapshot:\n%q\nwant\n%q", got, want)
	}

	// A tree nested deeper than a commit walks is refused with a conflict
	// that says why (not an opaque 500), and no template is left.
	if res := sh(t, c, src.ID, `cd /d && i=0; while [ $i -lt 1001 ]; do mkdir a && cd a || exit 1; i=$((i+1)); done`); res.ExitCode != 0 {
		t.Fatalf("the deep tree: exit %d, %s", res.ExitCode, res.Stderr)
	}
	_, err = c.Snapshot(ctx, src.ID, "deep")
	var apiErr *sandboxd.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || !strings.Contains(apiErr.Message, "deeper than") || strings.Contains(apiErr.Message, "/var/") {
		t.Errorf("snapshot of a tree 1001 deep: %v, want 409 saying it nests too deep", err)
	}
	if _, err := c.GetTemplate(ctx, "deep"); !isNotFound(err) {
		t.Errorf("the refused snapshot's template: %v, want not found", err)
	}
}
