// Package volume keeps named volumes: directories under the daemon's data
// directory that sandboxes bind-mount and that outlive any one sandbox.
// Volumes belong to an owner: <root>/<hash of owner>/<name>, so a tenant
// can never mount another tenant's volume by naming it. A mount of a
// subpath of a volume is staged by the daemon (stage.go) so that no
// sandbox sharing the volume can turn it into a mount of the host.
package volume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
func New(root string) (*Dir, error) {
	staging := filepath.Join(filepath.Dir(filepath.Clean(root)), "mounts")
	for _, dir := range []string{root, staging} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("volume root: %w", err)
		}
	}
	return &Dir{
		root: root, staging: staging,
		made: map[string][]string{}, users: map[string]int{}, binds: map[string][]string{},
		subdirs: map[string][]madeSubdir{}, staged: map[string][]string{},
	}, nil
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
	sum := sha256.Sum256([]byte(owner))
	ownerDir := filepath.Join(d.root, hex.EncodeToString(sum[:8]))
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
			removeEmpty(made)
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
		for _, dir := range []string{ownerDir, host} {
			created, err := mkdir(dir)
			if err != nil {
				return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
			}
			if created {
				made = append(made, dir)
			}
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
	removeEmpty(free)
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

// removeEmpty removes the directories in dirs that are empty, children
// before parents (dirs lists parents first). A directory that is not
// empty stays: it is in use.
func removeEmpty(dirs []string) {
	for _, p := range slices.Backward(dirs) {
		_ = os.Remove(p) // ENOTEMPTY: keep it
	}
}
