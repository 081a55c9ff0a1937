package service

import (
	"cmp"
	"context"
	"errors"
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
	// CreateVolume makes an empty volume; ErrConflict when it exists.
	CreateVolume(ctx context.Context, owner, name string) (Volume, error)
	// StatVolume describes one volume; ErrNotFound when there is none.
	StatVolume(ctx context.Context, owner, name string) (Volume, error)
	// ListVolumes lists the owner's volumes by name.
	ListVolumes(ctx context.Context, owner string) ([]Volume, error)
	// RemoveVolume removes a volume and its data; ErrNotFound when there is
	// none, ErrConflict when a sandbox of this process is mounting it.
	RemoveVolume(ctx context.Context, owner, name string) error
	// SizeMB is the size of a new volume: what it holds in its owner's
	// disk quota. 0: volumes have no size limit (and hold nothing).
	SizeMB() int64
	// AllVolumes lists every owner's volumes.
	AllVolumes(ctx context.Context) ([]OwnedVolume, error)
	// IfAbsent calls fn, under the catalog's lock, when owner has no
	// volume name: a volume cannot appear or go while fn runs.
	IfAbsent(owner, name string, fn func())
}

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

// holdVolume reserves, in the caller's disk quota, the size of the
// volume name, before it is made: a quota error refuses it. A volume that
// exists holds its size already (the same reservation).
func (s *Service) holdVolume(vc VolumeCatalog, c Caller, name string) error {
	size := vc.SizeMB()
	if size <= 0 {
		return nil
	}
	return admissionErr(s.Admission.ReserveWithin(volumeHold(c.Owner, name), admission.Request{Owner: c.Owner, DiskMB: size}, c.Quota))
}

// unholdVolume drops the reservation holdVolume made when the volume was
// not made after all.
func (s *Service) unholdVolume(vc VolumeCatalog, owner, name string) {
	vc.IfAbsent(owner, name, func() { s.Admission.Release(volumeHold(owner, name)) })
}

// VolumeDropped is told by the volume catalog of each volume it removed:
// its size no longer counts in its owner's quota.
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
	if err := s.holdVolume(vc, c, name); err != nil {
		return Volume{}, err
	}
	v, err := vc.CreateVolume(ctx, c.Owner, name)
	if err != nil {
		s.unholdVolume(vc, c.Owner, name)
	}
	return v, err
}

// holdNewVolumes reserves, before a create's Prepare, the size of each
// volume of its mounts that does not exist yet (Prepare makes it). It
// returns the names it reserved for.
func (s *Service) holdNewVolumes(ctx context.Context, req CreateRequest) ([]string, error) {
	vc, ok := s.Volumes.(VolumeCatalog)
	if !ok || vc.SizeMB() <= 0 {
		return nil, nil
	}
	var held []string
	for _, m := range req.Mounts {
		if _, err := vc.StatVolume(ctx, req.Owner, m.Volume); !errors.Is(err, ErrNotFound) || slices.Contains(held, m.Volume) {
			continue
		}
		if err := s.holdVolume(vc, Caller{Owner: req.Owner, Quota: req.Quota}, m.Volume); err != nil {
			s.unholdVolumes(req.Owner, held)
			return nil, err
		}
		held = append(held, m.Volume)
	}
	return held, nil
}

// unholdVolumes undoes holdNewVolumes for the volumes that were not made
// (or were removed again by Abandon).
func (s *Service) unholdVolumes(owner string, names []string) {
	vc, ok := s.Volumes.(VolumeCatalog)
	if !ok {
		return
	}
	for _, n := range names {
		s.unholdVolume(vc, owner, n)
	}
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
