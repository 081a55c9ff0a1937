package oci

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSafeTmp_HostileRootFileSystems: the /tmp of a gVisor sandbox's root
// file system is bound (a source runsc resolves on the host) only when it
// is a directory reached without a link; a missing one is made.
func TestSafeTmp_HostileRootFileSystems(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, rootfs string)
		want bool
	}{
		{"Directory", func(t *testing.T, rootfs string) { mkdir(t, filepath.Join(rootfs, "tmp")) }, true},
		{"Missing", func(t *testing.T, rootfs string) {}, true},
		{"SymlinkToHostDir", func(t *testing.T, rootfs string) { symlink(t, "/etc", filepath.Join(rootfs, "tmp")) }, false},
		{"RelativeSymlinkInside", func(t *testing.T, rootfs string) {
			mkdir(t, filepath.Join(rootfs, "var", "tmp"))
			symlink(t, "var/tmp", filepath.Join(rootfs, "tmp"))
		}, false},
		{"File", func(t *testing.T, rootfs string) {
			if err := os.WriteFile(filepath.Join(rootfs, "tmp"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{opts: Options{Dir: t.TempDir()}}
			rootfs := filepath.Join(r.sandboxDir("sb-1"), "rootfs")
			mkdir(t, rootfs)
			tc.make(t, rootfs)
			got, err := r.safeTmp("sb-1")
			if err != nil || got != tc.want {
				t.Fatalf("safeTmp = %v, %v; want %v", got, err, tc.want)
			}
			fi, err := os.Lstat(filepath.Join(rootfs, "tmp"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "Missing" && (!fi.IsDir() || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0) {
				t.Errorf("made /tmp: %v, want a directory 1777", fi.Mode())
			}
			// The boot's guard of a bundle that binds it: refused unless safe.
			cfg := ociSpec{Mounts: []ociMount{{Destination: tmpDestination, Type: "bind", Source: r.tmpSource("sb-1")}}}
			if err := writeJSON(filepath.Join(r.sandboxDir("sb-1"), "config.json"), cfg); err != nil {
				t.Fatal(err)
			}
			if err := r.checkTmpBind("sb-1"); (err == nil) != tc.want {
				t.Errorf("checkTmpBind = %v, want an error: %v", err, !tc.want)
			}
		})
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
