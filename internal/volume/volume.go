// Package volume keeps named volumes: directories under the daemon's data
// directory that sandboxes bind-mount and that outlive any one sandbox.
// Volumes belong to an owner: <root>/<hash of owner>/<name>, so a tenant
// can never mount another tenant's volume by naming it.
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
	"sync"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Dir keeps volumes under one root directory.
type Dir struct {
	root string

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
}

// New returns a Dir rooted at root (created 0700 when missing).
func New(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("volume root: %w", err)
	}
	return &Dir{root: root, made: map[string][]string{}, users: map[string]int{}, binds: map[string][]string{}}, nil
}

// Prepare creates every named volume of owner that does not exist yet and
// returns the binds for the runtime, in the order of mounts. It is
// idempotent. What it creates is undone by Abandon if the create fails.
func (d *Dir) Prepare(_ context.Context, owner, sandboxID string, mounts []service.Mount) (_ []runtime.Mount, err error) {
	sum := sha256.Sum256([]byte(owner))
	ownerDir := filepath.Join(d.root, hex.EncodeToString(sum[:8]))
	d.mu.Lock()
	defer d.mu.Unlock()
	var made, used []string
	defer func() {
		if err != nil {
			removeEmpty(made)
			return
		}
		d.made[sandboxID] = append(d.made[sandboxID], made...)
		for _, p := range used {
			d.users[p]++
		}
		d.binds[sandboxID] = append(d.binds[sandboxID], used...)
	}()
	binds := make([]runtime.Mount, 0, len(mounts))
	for _, m := range mounts {
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
		binds = append(binds, runtime.Mount{HostPath: host, Path: m.Path, ReadOnly: m.ReadOnly})
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

// Abandon undoes Prepare for a sandbox whose create failed: it removes the
// directories that sandbox's Prepare created, unless another sandbox of
// this process has prepared them since or they are no longer empty (a
// volume holding data is never removed). It is idempotent.
func (d *Dir) Abandon(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
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

// Release forgets a sandbox that is gone. Volumes persist beyond their
// sandboxes, and the bind mounts go away with the container.
func (d *Dir) Release(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropUsers(sandboxID)
	delete(d.made, sandboxID)
	return nil
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
