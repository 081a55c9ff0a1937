package service

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// VolumeCatalog is what managing an owner's volumes by name needs of
// Volumes beyond the create chain; *volume.Dir implements it. A Volumes
// that does not implement it has no volume management (ErrUnavailable).
type VolumeCatalog interface {
	// CreateVolume makes an empty volume, its size reserved first by
	// reserve; ErrConflict when it exists.
	CreateVolume(ctx context.Context, owner, name string, reserve VolumeReserve) (Volume, error)
	// StatVolume describes one volume; ErrNotFound when there is none.
	StatVolume(ctx context.Context, owner, name string) (Volume, error)
	// ListVolumes lists the owner's volumes by name.
	ListVolumes(ctx context.Context, owner string) ([]Volume, error)
	// RemoveVolume removes a volume and its data; ErrNotFound when there is
	// none, ErrConflict when a sandbox of this process is mounting it.
	RemoveVolume(ctx context.Context, owner, name string) error
	// AllVolumes lists every owner's volumes.
	AllVolumes(ctx context.Context) ([]OwnedVolume, error)
}

// VolumeReserve holds the size of an owner's new volume in the owner's
// disk quota. Volumes calls it, under its own lock, just before it makes
// a volume that does not exist (never for one that does), and tells
// Service.VolumeDropped when it removes the volume or fails to make it:
// a volume holds its size exactly while it exists. An error refuses the
// volume.
type VolumeReserve func(name string, sizeMB int64) error

// Volume is a named volume of an owner.
type Volume struct {
	Name string
	// ModTime is when the volume's top directory last changed (its
	// creation, or an entry added or removed there).
	ModTime time.Time
	// SizeMB is the volume's size limit; 0: none (a volume made where
	// volumes are not limited).
	SizeMB int64
}

// OwnedVolume is a volume and its owner.
type OwnedVolume struct {
	Owner string
	Volume
}

func (s *Service) catalog() (VolumeCatalog, error) {
	vc, ok := s.Volumes.(VolumeCatalog)
	if !ok {
		return nil, fmt.Errorf("%w: this daemon's volumes cannot be managed by name", ErrUnavailable)
	}
	return vc, nil
}

func validVolume(name string) error {
	if !naming.ValidLabel(name) {
		return invalid("name", "volume name %q must be a DNS label (lowercase letters, digits and '-', at most 63)", name)
	}
	return nil
}

// volumeHold names the admission reservation of a volume: its size held
// in its owner's disk quota from its making to its removal.
func volumeHold(owner, name string) string { return "volume:" + owner + "/" + name }

// reserveVolumes is the VolumeReserve of a caller: a new volume's size
// held in c's disk quota.
func (s *Service) reserveVolumes(c Caller) VolumeReserve {
	return func(name string, sizeMB int64) error {
		return admissionErr(s.Admission.ReserveWithin(volumeHold(c.Owner, name), admission.Request{Owner: c.Owner, DiskMB: sizeMB}, c.Quota))
	}
}

// VolumeDropped is told by Volumes of each volume it removed (or failed
// to make after its reservation): its size no longer counts in its
// owner's quota.
func (s *Service) VolumeDropped(owner, name string) {
	s.Admission.Release(volumeHold(owner, name))
}

// CreateVolume makes an empty volume of the caller's owner; its size
// counts in the owner's disk quota while it exists. A name in use is
// ErrConflict.
func (s *Service) CreateVolume(ctx context.Context, c Caller, name string) (Volume, error) {
	if err := validVolume(name); err != nil {
		return Volume{}, err
	}
	vc, err := s.catalog()
	if err != nil {
		return Volume{}, err
	}
	return vc.CreateVolume(ctx, c.Owner, name, s.reserveVolumes(c))
}

// GetVolume describes a volume of the caller's owner; ErrNotFound when
// there is none (another owner's volumes are none).
func (s *Service) GetVolume(ctx context.Context, c Caller, name string) (Volume, error) {
	if !naming.ValidLabel(name) {
		return Volume{}, fmt.Errorf("%w: volume %q", ErrNotFound, name)
	}
	vc, err := s.catalog()
	if err != nil {
		return Volume{}, err
	}
	return vc.StatVolume(ctx, c.Owner, name)
}

// ListVolumes lists the caller's owner's volumes.
func (s *Service) ListVolumes(ctx context.Context, c Caller) ([]Volume, error) {
	vc, err := s.catalog()
	if err != nil {
		return nil, err
	}
	return vc.ListVolumes(ctx, c.Owner)
}

// VolumeInUseError names a sandbox that mounts a volume being deleted.
type VolumeInUseError struct {
	Volume, Sandbox string
}

func (e *VolumeInUseError) Error() string {
	return fmt.Sprintf("volume %s is in use by sandbox %s", e.Volume, e.Sandbox)
}

func (e *VolumeInUseError) Unwrap() error { return ErrConflict }

// DeleteVolume removes a volume of the caller's owner and its data. A
// volume that a sandbox of the owner mounts (running or stopped) is a
// *VolumeInUseError (ErrConflict), and so is one a create is mounting
// right now; unknown is ErrNotFound.
func (s *Service) DeleteVolume(ctx context.Context, c Caller, name string) error {
	if _, err := s.GetVolume(ctx, c, name); err != nil {
		return err
	}
	vc, err := s.catalog()
	if err != nil {
		return err
	}
	owner := Caller{Owner: c.Owner}
	for page := ""; ; {
		sbs, next, err := s.ListLocal(ctx, owner, ListFilter{PageToken: page, Limit: 200}) // volumes are this node's
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if slices.ContainsFunc(sb.Mounts, func(m Mount) bool { return m.Volume == name }) {
				return &VolumeInUseError{Volume: name, Sandbox: cmp.Or(sb.Name, sb.ID)}
			}
		}
		if next == "" {
			break
		}
		page = next
	}
	return vc.RemoveVolume(ctx, c.Owner, name)
}
