// Package volume keeps named volumes: directories under the daemon's data
// directory that sandboxes bind-mount and that outlive any one sandbox.
// Volumes belong to an owner: <root>/<hash of owner>/<name>, so a tenant
// can never mount another tenant's volume by naming it. Where the daemon
// can, each volume is a file system of its own, of a fixed size, so that
// no sandbox fills the host's disk through one (fs.go). A mount of a
// subpath of a volume is staged by the daemon (stage.go) so that no
// sandbox sharing the volume can turn it into a mount of the host.
package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Dir keeps volumes under one root directory.
type Dir struct {
	root string
	// sizeMB is the size of each new volume's file system (fs.go); 0:
	// volumes are plain directories, with no limit, and noLimit says why.
	sizeMB  int64
	noLimit string
	// Dropped, when set, is told of every volume Dir removes (RemoveVolume,
	// Abandon), under Dir's lock: the daemon releases the disk the volume
	// held in its owner's quota.
	Dropped func(owner, name string)
	// staging holds the staged mounts of subpaths (stage.go):
	// <staging>/<sandbox id>/<mount index>.
	staging string

	// mu serializes Prepare and Abandon, so that a directory Abandon
	// removes is never one another Prepare is about to hand out.
	mu sync.Mutex
	// made lists, per sandbox whose create is in flight or alive, the
	// directories its Prepare created (parents first).
	made map[string][]string
	// users counts, per directory, the sandboxes of this process that
	// prepared it and were not yet released or abandoned.
	users map[string]int
	// binds remembers each sandbox's directories, to drop its users.
	binds map[string][]string
	// subdirs lists, per sandbox whose create is in flight, the
	// directories its subpaths made inside volumes, for Abandon.
	subdirs map[string][]madeSubdir
	// staged lists, per sandbox of this process, the directories its
	// subpath mounts staged (<volume dir>/<subpath>), so that a failed
	// create never removes a directory it made that another sandbox has
	// staged since.
	staged map[string][]string
}

// madeSubdir is a directory a subpath mount made inside a volume.
type madeSubdir struct {
	vol string   // the volume's directory
	rel []string // made, relative to vol, parents first
}

// New returns a Dir rooted at root (created 0700 when missing). Subpath
// mounts are staged in "mounts" beside root (<data-dir>/mounts for the
// daemon's <data-dir>/volumes), also 0700.
//
// With sizeMB > 0 every new volume is a file system of that size where
// this process can make one (a probe, ~30 ms); where it cannot, volumes
// are plain directories and Limits says why. Volumes whose mount is gone
// (a reboot) are mounted again.
func New(root string, sizeMB int64) (*Dir, error) {
	staging := filepath.Join(filepath.Dir(filepath.Clean(root)), "mounts")
	for _, dir := range []string{root, staging} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("volume root: %w", err)
		}
	}
	d := &Dir{
		root: root, staging: staging,
		made: map[string][]string{}, users: map[string]int{}, binds: map[string][]string{},
		subdirs: map[string][]madeSubdir{}, staged: map[string][]string{},
	}
	if err := d.remount(); err != nil {
		return nil, err
	}
	switch {
	case sizeMB <= 0:
		d.noLimit = "no volume size configured"
	default:
		if err := probeFS(root); err != nil {
			d.noLimit = "cannot make a file system per volume: " + err.Error()
		} else {
			d.sizeMB = sizeMB
		}
	}
	return d, nil
}

// Limits returns the size of a new volume in MiB, or 0 and why volumes
// are not limited.
func (d *Dir) Limits() (sizeMB int64, why string) {
	return d.sizeMB, d.noLimit
}

// remount mounts again every volume file system whose mount is gone.
func (d *Dir) remount() error {
	imgs, _ := filepath.Glob(filepath.Join(d.root, "*", "*"+fsSuffix))
	var errs []error
	for _, img := range imgs {
		mnt := strings.TrimSuffix(img, fsSuffix)
		if isMountRoot(mnt) || !naming.ValidLabel(filepath.Base(mnt)) {
			continue
		}
		if err := mountFS(img, mnt); err != nil {
			errs = append(errs, fmt.Errorf("mount volume %s again: %w", mnt, err))
		}
	}
	return errors.Join(errs...)
}

// ownerFile, in an owner's directory, holds the owner's name (the
// directory is named by its hash): AllVolumes reads it.
const ownerFile = ".owner"

// makeOwnerDir makes owner's directory, and reports whether it did.
func makeOwnerDir(dir, owner string) (bool, error) {
	created, err := mkdir(dir)
	if err != nil || !created {
		return created, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o600); err != nil {
		_ = os.Remove(dir)
		return false, err
	}
	return true, nil
}

// makeVolume makes the volume host (its owner directory exists): a file
// system of its own when volumes are limited, else a directory with mode.
// It reports whether it made it; one that exists is left as it is.
func (d *Dir) makeVolume(host string, mode os.FileMode) (bool, error) {
	created, err := mkdir(host)
	if err != nil || !created {
		return created, err
	}
	if d.sizeMB > 0 {
		err = makeFS(host+fsSuffix, host, d.sizeMB)
	} else {
		err = os.Chmod(host, mode)
	}
	if err != nil {
		_ = os.Remove(host)
		return false, err
	}
	return true, nil
}

// removeVolume removes the volume host of owner and tells Dropped.
func (d *Dir) removeVolume(owner, host string) error {
	if err := removeFS(host+fsSuffix, host); err != nil {
		return err
	}
	if d.Dropped != nil {
		d.Dropped(owner, filepath.Base(host))
	}
	return nil
}

// Prepare creates every named volume of owner that does not exist yet and
// returns the binds for the runtime, in the order of mounts. A mount with
// a subpath is staged (stage.go): its directory inside the volume is
// opened without following any link, made when missing, and bind-mounted
// at a staging path the runtime gets instead; a subpath that goes through
// a symbolic link, is not a directory or leaves the volume is
// service.ErrInvalidArgument. It is idempotent. What it creates is undone
// by Abandon if the create fails, and Prepare undoes its own work when it
// fails.
func (d *Dir) Prepare(_ context.Context, owner, sandboxID string, mounts []service.Mount) (_ []runtime.Mount, err error) {
	ownerDir := d.ownerDir(owner)
	d.mu.Lock()
	defer d.mu.Unlock()
	var made, used, staged []string
	var subdirs []madeSubdir
	defer func() {
		if err != nil {
			if uerr := d.unstage(sandboxID); uerr != nil {
				err = errors.Join(err, uerr)
			}
			d.removeSubdirs(sandboxID, subdirs)
			d.removeEmpty(owner, made)
			return
		}
		d.subdirs[sandboxID] = append(d.subdirs[sandboxID], subdirs...)
		d.staged[sandboxID] = append(d.staged[sandboxID], staged...)
		d.made[sandboxID] = append(d.made[sandboxID], made...)
		for _, p := range used {
			d.users[p]++
		}
		d.binds[sandboxID] = append(d.binds[sandboxID], used...)
	}()
	binds := make([]runtime.Mount, 0, len(mounts))
	for i, m := range mounts {
		if !naming.ValidLabel(m.Volume) {
			return nil, fmt.Errorf("volume %q: not a DNS label", m.Volume)
		}
		host := filepath.Join(ownerDir, m.Volume)
		created, err := makeOwnerDir(ownerDir, owner)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
		}
		if created {
			made = append(made, ownerDir)
		}
		if created, err = d.makeVolume(host, 0o755); err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
		}
		if created {
			made = append(made, host)
		}
		used = append(used, ownerDir, host)
		source := host
		if m.Subpath != "" {
			target, rel, err := d.stage(m.Volume, host, m.Subpath, sandboxID, i)
			if err != nil {
				return nil, err
			}
			subdirs = append(subdirs, madeSubdir{vol: host, rel: rel})
			staged = append(staged, filepath.Join(host, m.Subpath))
			source = target
		}
		binds = append(binds, runtime.Mount{HostPath: source, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return binds, nil
}

// mkdir makes dir (0755) and reports whether this call created it; an
// existing directory is fine.
func mkdir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return false, fmt.Errorf("%s exists and is not a directory", dir)
		}
		return false, nil
	}
	return err == nil, err
}

// Abandon undoes Prepare for a sandbox whose create failed: it detaches
// its staged subpath mounts, and removes the directories that sandbox's
// Prepare created, unless another sandbox of this process has prepared
// them since or they are no longer empty (a volume holding data is never
// removed). It is idempotent.
func (d *Dir) Abandon(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unstage(sandboxID); err != nil {
		return err // kept: a retry of the undo (or the startup sweep) finishes it
	}
	delete(d.staged, sandboxID)
	d.removeSubdirs(sandboxID, d.subdirs[sandboxID])
	delete(d.subdirs, sandboxID)
	d.dropUsers(sandboxID)
	made := d.made[sandboxID]
	delete(d.made, sandboxID)
	var free []string
	for _, p := range made {
		if d.users[p] == 0 {
			free = append(free, p)
		}
	}
	d.removeEmpty("", free)
	return nil
}

// Release forgets a sandbox that is gone (its container destroyed) and
// detaches its staged subpath mounts. Volumes persist beyond their
// sandboxes, and the container's own bind mounts went with it. It reads
// the staging directory, so it also settles a sandbox of a process that
// died; it is idempotent.
func (d *Dir) Release(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unstage(sandboxID); err != nil {
		return err
	}
	delete(d.subdirs, sandboxID)
	delete(d.staged, sandboxID)
	d.dropUsers(sandboxID)
	delete(d.made, sandboxID)
	return nil
}

// removeSubdirs removes the directories a failed create of sandboxID made
// inside volumes (subdirs, in the order made), except those another
// sandbox of this process staged since: at or above one of its subpaths.
func (d *Dir) removeSubdirs(sandboxID string, subdirs []madeSubdir) {
	for _, m := range slices.Backward(subdirs) {
		var free []string
		for _, rel := range m.rel {
			dir := filepath.Join(m.vol, rel)
			inUse := false
			for id, paths := range d.staged {
				if id != sandboxID && slices.ContainsFunc(paths, func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }) {
					inUse = true
				}
			}
			if !inUse {
				free = append(free, rel)
			}
		}
		removeMade(m.vol, free)
	}
}

func (d *Dir) dropUsers(sandboxID string) {
	for _, p := range d.binds[sandboxID] {
		if d.users[p]--; d.users[p] <= 0 {
			delete(d.users, p)
		}
	}
	delete(d.binds, sandboxID)
}

// removeEmpty removes the owner directories and volumes in dirs (made by
// one Prepare of owner, or of an owner its owner directory names when
// owner is "") that are empty, children before parents (dirs lists
// parents first). One that is not empty stays: it is in use.
func (d *Dir) removeEmpty(owner string, dirs []string) {
	for _, p := range slices.Backward(dirs) {
		if filepath.Dir(p) == filepath.Clean(d.root) { // an owner directory
			if names, err := readNames(p); err == nil && len(names) == 1 && names[0] == ownerFile {
				_ = os.Remove(filepath.Join(p, ownerFile))
			}
			_ = os.Remove(p) // ENOTEMPTY: keep it
			continue
		}
		if names, err := readNames(p); err != nil || len(names) > 0 {
			continue
		}
		who := owner
		if who == "" {
			b, _ := os.ReadFile(filepath.Join(filepath.Dir(p), ownerFile))
			who = string(b)
		}
		_ = d.removeVolume(who, p) // a failure keeps it: still a volume
	}
}

// readNames lists the names in dir.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
