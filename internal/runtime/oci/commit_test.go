package oci_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// removeImageOnCleanup removes ref from the engine when the test ends.
func removeImageOnCleanup(t *testing.T, ref string) {
	t.Cleanup(func() {
		_, _ = env.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
}

// savedLayers reads ref back from the engine (docker save): its layers'
// diff ids and the entries of its top layer.
func savedLayers(t *testing.T, ref string) (diffIDs []string, top map[string]*tar.Header) {
	t.Helper()
	ctx := t.Context()
	ins, err := env.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := env.cli.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg && (hdr.Name == "manifest.json" || strings.HasSuffix(hdr.Name, "/layer.tar")) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[hdr.Name] = b
		}
	}
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) == 0 {
		t.Fatalf("saved manifest %s: %v", files["manifest.json"], err)
	}
	top = map[string]*tar.Header{}
	lr := tar.NewReader(strings.NewReader(string(files[manifest[0].Layers[len(manifest[0].Layers)-1]])))
	for {
		hdr, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		top[strings.TrimSuffix(hdr.Name, "/")] = hdr
	}
	return ins.RootFS.Layers, top
}

// TestCommit_LayerOverTheImage: a commit is the image's layers and one
// more holding what the sandbox did (a file added, one changed, one
// deleted, a directory removed and made again, a symlink, a hard link, a
// setuid file, 1 MiB written), whiteouts as the engine's, nothing the
// runtime wrote (its /etc files, the agent's mount points), and of the
// extended attributes what the engine's commit keeps (none of user.*); a
// sandbox of the image sees exactly that.
func TestCommit_LayerOverTheImage(t *testing.T) {
	requireEnv(t)
	t.Run("runc", func(t *testing.T) { t.Parallel(); testCommitLayer(t, spec) })
	t.Run("gvisor", func(t *testing.T) {
		t.Parallel()
		testCommitLayer(t, func(id string) runtime.Spec { return gvisorSpec(t, id) })
	})
}

func testCommitLayer(t *testing.T, spec func(id string) runtime.Spec) {
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	base, err := env.cli.ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, `set -e
		echo added > /home/added
		echo 'extra:x:4242:' >> /etc/group
		rm /usr/bin/cal
		rm -rf /usr/sbin && mkdir /usr/sbin && echo only > /usr/sbin/only
		ln -s /home/added /home/link
		ln /home/added /home/hard
		echo s > /home/suid && chmod 4755 /home/suid
		head -c 1048576 /dev/urandom > /home/big`)
	// An extended attribute the engine's commit does not keep.
	if err := unix.Setxattr(filepath.Join(rt.BundleDir(id), "rootfs", "home", "suid"), "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	ref := "sandboxd/oci-commit-test:" + id
	removeImageOnCleanup(t, ref)
	img, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	layers, top := savedLayers(t, ref)
	if len(layers) != len(base.RootFS.Layers)+1 || !slices.Equal(layers[:len(base.RootFS.Layers)], base.RootFS.Layers) {
		t.Errorf("layers %v, want the image's %v and one more", layers, base.RootFS.Layers)
	}
	if added := img.Size - base.Size; added < 1<<20 || added > 1<<20+64<<10 {
		t.Errorf("the image is %d bytes beyond its base, want about the 1 MiB written", added)
	}
	for _, name := range []string{"home/added", "etc/group", "usr/bin/.wh.cal", "usr/sbin/.wh..wh..opq", "usr/sbin/only", "home/link", "home/hard", "home/suid", "home/big"} {
		if top[name] == nil {
			t.Errorf("the layer has no %s", name)
		}
	}
	for _, name := range []string{"etc/hostname", "etc/hosts", "etc/resolv.conf", "opt", "opt/sandboxd", "opt/sandboxd/toolboxd", "run/sandboxd", "run", "usr/bin/cal", "bin", "bin/busybox"} {
		if top[name] != nil {
			t.Errorf("the layer has %s (%c)", name, top[name].Typeflag)
		}
	}
	if h, a := top["home/hard"], top["home/added"]; h == nil || a == nil || !(h.Typeflag == tar.TypeLink && h.Linkname == "home/added" || a.Typeflag == tar.TypeLink && a.Linkname == "home/hard") {
		t.Errorf("home/added and home/hard are %v and %v, want a file and a hard link to it", a, h)
	}
	if h := top["home/suid"]; h != nil && (h.Mode&0o7777 != 0o4755 || len(h.PAXRecords) != 0) {
		t.Errorf("home/suid: mode %o, records %v; want 4755 and no user.* attribute", h.Mode, h.PAXRecords)
	}

	id2 := runtimetest.NewSandboxID()
	sp := spec(id2)
	sp.Image = ref
	if _, err := rt.Create(ctx, sp); err != nil {
		t.Fatalf("Create from the committed image: %v", err)
	}
	got := execIn(t, rt, id2, `cat /home/added; tail -n 1 /etc/group; ls /usr/bin/cal 2>/dev/null || echo no cal; ls /usr/sbin; readlink /home/link
		[ "$(stat -c %i /home/added)" = "$(stat -c %i /home/hard)" ] && stat -c %h /home/hard; stat -c %a /home/suid; wc -c < /home/big`)
	if want := "added\nextra:x:4242:\nno cal\nonly\n/home/added\n2\n4755\n1048576\n"; got != want {
		t.Errorf("in a sandbox of the image:\n%q\nwant\n%q", got, want)
	}
	if h1, h2 := execIn(t, rt, id, "cat /etc/hostname"), execIn(t, rt, id2, "cat /etc/hostname"); h1 == h2 || !strings.HasPrefix(h2, "sandbox-") {
		t.Errorf("the new sandbox's hostname is %q (the first's %q), want its own", h2, h1)
	}
	if _, err := unix.Getxattr(filepath.Join(rt.BundleDir(id2), "rootfs", "home", "suid"), "user.k", make([]byte, 16)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("user.k in the new sandbox: %v, want none", err)
	}
}

// TestCommit_HostileUpperDir: what a sandbox makes to lead the commit
// out of its tree or to corrupt the image (a symlink to /, one where a
// directory was, names with dots, a line break and the layer format's
// whiteout names, an extended attribute as large as the file system takes, a tree too deep) commits
// links as links and nothing from outside, and the image stays whole.
func TestCommit_HostileUpperDir(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	base, err := env.cli.ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, `set -e
		ln -s / /escape
		rm -rf /home && ln -s /proc/1/root /home
		mkdir /d && ln -s ../../../../../.. /d/up
		touch '/d/...' '/d/..x' "/d/a
b"
		touch /bin/.wh..wh..opq /.wh.etc /usr/.wh.bin /d/.wh...
		echo big > /d/xattr`)
	// As large as the file system takes (btrfs: under its node size).
	for n := 64 << 10; ; n -= 1 << 10 {
		err := unix.Setxattr(filepath.Join(rt.BundleDir(id), "rootfs", "d", "xattr"), "user.big", []byte(strings.Repeat("x", n-100)), 0)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.E2BIG) || n <= 4<<10 {
			t.Fatal(err)
		}
	}
	ref := "sandboxd/oci-commit-test:" + id
	removeImageOnCleanup(t, ref)
	img, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if added := img.Size - base.Size; added > 64<<10 {
		t.Errorf("the image is %d bytes beyond its base: something from outside the sandbox's tree", added)
	}
	_, top := savedLayers(t, ref)
	for name, h := range top {
		if strings.HasPrefix(filepath.Base(name), ".wh.") && name != "home/.wh..wh..opq" && name != ".wh.home" {
			t.Errorf("the layer carries %q: a whiteout the sandbox did not make", name)
		}
		if len(h.PAXRecords) > 0 && name == "d/xattr" {
			t.Errorf("d/xattr carries %d records", len(h.PAXRecords))
		}
	}
	id2 := runtimetest.NewSandboxID()
	sp := spec(id2)
	sp.Image = ref
	if _, err := rt.Create(ctx, sp); err != nil {
		t.Fatalf("Create from the committed image: %v", err)
	}
	got := execIn(t, rt, id2, `for l in /escape /home /d/up; do readlink $l; done; ls -a /d | tr '\n' ' '; echo; ls /bin/busybox /etc/group /usr/bin/head`)
	want := "/\n/proc/1/root\n../../../../../..\n. .. ... ..x a?b up xattr \n/bin/busybox\n/etc/group\n/usr/bin/head\n"
	if got != want {
		t.Errorf("in a sandbox of the image:\n%q\nwant\n%q", got, want)
	}

	// A tree deeper than a commit walks is refused, and nothing is made.
	execIn(t, rt, id, `cd /d && i=0; while [ $i -lt 1001 ]; do mkdir a && cd a || exit 1; i=$((i+1)); done`)
	deep := "sandboxd/oci-commit-test:" + id + "-deep"
	removeImageOnCleanup(t, deep)
	if _, err := rt.Commit(ctx, id, deep, runtime.ImageConfig{}); !errors.Is(err, runtime.ErrInvalidSpec) || strings.Contains(err.Error(), env.dir) {
		t.Errorf("Commit of a tree 1001 deep = %v, want ErrInvalidSpec naming no host path", err)
	}
	if _, err := env.cli.ImageInspect(ctx, deep); err == nil {
		t.Errorf("a refused commit made %s", deep)
	}
	if st, _ := rt.Inspect(ctx, id); st.State != runtime.StateRunning || st.Paused {
		t.Errorf("after a refused commit the sandbox is %+v, want running", st)
	}
}

// TestCommit_ImageGoneCapturesTheWholeFileSystem: a sandbox whose image
// the engine no longer has (removed after the create: the oci runtime
// holds no container of it) commits its whole file system as one layer;
// a sandbox of that image sees the image's files and the sandbox's.
func TestCommit_ImageGoneCapturesTheWholeFileSystem(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	// An image of its own to remove: a commit of a sandbox of the test image.
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, `echo first > /home/first`)
	own := "sandboxd/oci-commit-test:" + id + "-base"
	removeImageOnCleanup(t, own)
	if _, err := rt.Commit(ctx, id, own, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}}); err != nil {
		t.Fatal(err)
	}
	id2 := runtimetest.NewSandboxID()
	sp := spec(id2)
	sp.Image = own
	if _, err := rt.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	if _, err := env.cli.ImageRemove(ctx, own, client.ImageRemoveOptions{}); err != nil {
		t.Fatalf("remove the sandbox's image: %v", err)
	}
	execIn(t, rt, id2, `echo second > /home/second; rm /etc/group`)
	ref := "sandboxd/oci-commit-test:" + id2
	removeImageOnCleanup(t, ref)
	if _, err := rt.Commit(ctx, id2, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin"}}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	layers, top := savedLayers(t, ref)
	if len(layers) != 1 || top["bin/busybox"] == nil || top["etc/hostname"] != nil {
		t.Errorf("layers %v (bin/busybox %v, etc/hostname %v): want one, the whole file system but the runtime's files", layers, top["bin/busybox"] != nil, top["etc/hostname"] != nil)
	}
	id3 := runtimetest.NewSandboxID()
	sp = spec(id3)
	sp.Image = ref
	if _, err := rt.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	if got := execIn(t, rt, id3, `cat /home/first /home/second; ls /etc/group 2>/dev/null || echo no group`); got != "first\nsecond\nno group\n" {
		t.Errorf("in a sandbox of the image: %q", got)
	}
}
