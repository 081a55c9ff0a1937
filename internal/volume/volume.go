// Package volume keeps named volumes: directories under the daemon's data
// directory that sandboxes bind-mount and that outlive any one sandbox.
// Volumes belong to an owner: <root>/<hash of owner>/<name>, so a tenant
// can never mount another tenant's volume by naming it.
package volume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Dir keeps volumes under one root directory.
type Dir struct {
	root string
}

// New returns a Dir rooted at root (created 0700 when missing).
func New(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("volume root: %w", err)
	}
	return &Dir{root: root}, nil
}

// Prepare creates every named volume of owner that does not exist yet and
// returns the binds for the runtime, in the order of mounts. It is
// idempotent.
func (d *Dir) Prepare(_ context.Context, owner, _ string, mounts []service.Mount) ([]runtime.Mount, error) {
	sum := sha256.Sum256([]byte(owner))
	ownerDir := filepath.Join(d.root, hex.EncodeToString(sum[:8]))
	binds := make([]runtime.Mount, 0, len(mounts))
	for _, m := range mounts {
		if !naming.ValidLabel(m.Volume) {
			return nil, fmt.Errorf("volume %q: not a DNS label", m.Volume)
		}
		host := filepath.Join(ownerDir, m.Volume)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
		}
		binds = append(binds, runtime.Mount{HostPath: host, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return binds, nil
}

// Release is a no-op: volumes persist beyond their sandboxes, and the
// bind mounts go away with the container.
func (d *Dir) Release(context.Context, string) error { return nil }
