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

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/service"
)

var _ service.VolumeCatalog = (*Dir)(nil)

// ownerDir is where owner's volumes live.
func (d *Dir) ownerDir(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(d.root, hex.EncodeToString(sum[:8]))
}

// CreateVolume makes an empty volume, writable by every account (mode
// 0777), of the Dir's size when volumes are limited (its size reserved
// first, by reserve); one that exists is service.ErrConflict.
func (d *Dir) CreateVolume(_ context.Context, owner, name string, reserve Reserve) (service.Volume, error) {
	if !naming.ValidLabel(name) {
		return service.Volume{}, fmt.Errorf("%w: volume %q is not a DNS label", service.ErrInvalidArgument, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := makeOwnerDir(d.ownerDir(owner), owner); err != nil {
		return service.Volume{}, fmt.Errorf("volume %q: %w", name, err)
	}
	// Writable by every account of the owner's sandboxes (Daytona's run
	// as an unprivileged user). Only the daemon reaches it on the host:
	// the volume root is 0700.
	created, err := d.makeVolume(owner, name, 0o777, reserve)
	if err != nil {
		return service.Volume{}, fmt.Errorf("volume %q: %w", name, err)
	}
	if !created {
		return service.Volume{}, fmt.Errorf("%w: volume with name %s already exists", service.ErrConflict, name)
	}
	return stat(filepath.Join(d.ownerDir(owner), name), name)
}

// AllVolumes lists every owner's volumes (for the daemon's start: their
// sizes count in their owners' disk quotas).
func (d *Dir) AllVolumes(ctx context.Context) ([]service.OwnedVolume, error) {
	dirs, err := os.ReadDir(d.root)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []service.OwnedVolume
	for _, e := range dirs {
		owner, err := os.ReadFile(filepath.Join(d.root, e.Name(), ownerFile))
		if !e.IsDir() || err != nil {
			continue // not an owner directory, or one from before owners were written down
		}
		vs, err := d.ListVolumes(ctx, string(owner))
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			out = append(out, service.OwnedVolume{Owner: string(owner), Volume: v})
		}
	}
	return out, nil
}

// StatVolume describes one volume; none is service.ErrNotFound.
func (d *Dir) StatVolume(_ context.Context, owner, name string) (service.Volume, error) {
	if !naming.ValidLabel(name) {
		return service.Volume{}, fmt.Errorf("%w: volume with name %s", service.ErrNotFound, name)
	}
	return stat(filepath.Join(d.ownerDir(owner), name), name)
}

func stat(host, name string) (service.Volume, error) {
	fi, err := os.Lstat(host)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()):
		return service.Volume{}, fmt.Errorf("%w: volume with name %s", service.ErrNotFound, name)
	case err != nil:
		return service.Volume{}, fmt.Errorf("volume %q: %w", name, err)
	}
	return service.Volume{Name: name, ModTime: fi.ModTime(), SizeMB: fsSizeMB(host + fsSuffix)}, nil
}

// ListVolumes lists the owner's volumes by name.
func (d *Dir) ListVolumes(_ context.Context, owner string) ([]service.Volume, error) {
	entries, err := os.ReadDir(d.ownerDir(owner))
	if errors.Is(err, fs.ErrNotExist) {
		return []service.Volume{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := make([]service.Volume, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() || !naming.ValidLabel(e.Name()) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, service.Volume{Name: e.Name(), ModTime: fi.ModTime(), SizeMB: fsSizeMB(filepath.Join(d.ownerDir(owner), e.Name()+fsSuffix))})
	}
	slices.SortFunc(out, func(a, b service.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveVolume removes a volume and everything in it (its file system,
// unmounted first). A volume a sandbox
// of this process prepared and still holds is service.ErrConflict; the
// caller checks the sandboxes the store knows. Nothing in the volume is
// followed: symbolic links are removed, not their targets.
func (d *Dir) RemoveVolume(_ context.Context, owner, name string) error {
	if !naming.ValidLabel(name) {
		return fmt.Errorf("%w: volume with name %s", service.ErrNotFound, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	host := filepath.Join(d.ownerDir(owner), name)
	if _, err := stat(host, name); err != nil {
		return err
	}
	if d.users[host] > 0 {
		return fmt.Errorf("%w: volume %s is being mounted", service.ErrConflict, name)
	}
	if err := d.removeVolume(owner, host); err != nil {
		return fmt.Errorf("remove volume %q: %w", name, err)
	}
	return nil
}
