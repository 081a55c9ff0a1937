package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// gVisor mounts a tmpfs of its own, in the sandbox's memory, on an empty
// /tmp that the bundle mounts nothing on (runsc's mountTmp): what a
// sandbox kept in /tmp was gone after a stop and start, left out of its
// commits (templates, snapshots, forks) and outside its disk limit, as it
// is not under runc, the engine's runc or E2B's and Daytona's own
// sandboxes. So a gVisor sandbox's bundle binds the /tmp of its own root
// file system (the overlay, under the disk limit) onto /tmp.
//
// The bind's source is resolved by runsc on the host, and /tmp is the
// image's and the sandbox's to make: a symbolic link there (an image
// committed from a hostile sandbox) would bind whatever it names on the
// host. So the source is used only while rootfs/tmp is a directory
// reached without a symbolic link or a mount crossing (openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), checked at
// create and again at every boot, when none of the sandbox's processes
// run: while it runs, /tmp is a mount point the sandbox cannot replace.

// tmpDestination is where gVisor mounts its own tmpfs.
const tmpDestination = "/tmp"

// tmpSource is the bind source of a gVisor sandbox's /tmp: its root file
// system's own.
func (r *Runtime) tmpSource(id string) string {
	return filepath.Join(r.sandboxDir(id), "rootfs", "tmp")
}

// safeTmp reports whether rootfs/tmp of sandbox id may be bound: a
// directory beneath the mounted root file system, reached without a
// symbolic link or a mount crossing. A root file system without /tmp
// gets one (mode 1777, as images have it), in its upper directory.
func (r *Runtime) safeTmp(id string) (bool, error) {
	root, err := unix.Open(filepath.Join(r.sandboxDir(id), "rootfs"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open the root file system: %w", err)
	}
	defer unix.Close(root)
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(root, "tmp", how)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(root, "tmp", 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return false, fmt.Errorf("make /tmp: %w", noSpace(err))
		}
		// 1777 past the umask, through the directory just made (a
		// path would follow a link put in its place).
		if fd, err = unix.Openat2(root, "tmp", &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: how.Resolve}); err == nil {
			if err := unix.Fchmod(fd, 0o1777); err != nil {
				unix.Close(fd)
				return false, fmt.Errorf("chmod /tmp: %w", err)
			}
		}
	}
	switch {
	case err == nil:
		unix.Close(fd)
		return true, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
		return false, nil // a link, a file or a mount: not bound
	default:
		return false, fmt.Errorf("open /tmp: %w", err)
	}
}

// checkTmpBind is the boot's check of a gVisor sandbox whose config.json
// binds its root file system's /tmp: the source must still be safe.
func (r *Runtime) checkTmpBind(id string) error {
	b, err := os.ReadFile(filepath.Join(r.sandboxDir(id), "config.json"))
	if err != nil {
		return err
	}
	var cfg struct {
		Mounts []ociMount `json:"mounts"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	for _, m := range cfg.Mounts {
		if m.Destination != tmpDestination || m.Type != "bind" {
			continue
		}
		if m.Source != r.tmpSource(id) {
			return fmt.Errorf("config.json binds %s onto /tmp", m.Source)
		}
		ok, err := r.safeTmp(id)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("the root file system's /tmp is no longer a directory: it is not bound")
		}
	}
	return nil
}
