package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// A Daytona volume is a native volume of the caller's owner (internal/volume:
// a directory the daemon keeps, bind-mounted into sandboxes). Its id is its
// name, so the SDK's volume.get(name) and a sandbox's volumes[].volumeId
// both name it; names are DNS labels. Volumes are ready as soon as they are
// created and gone as soon as they are deleted (Daytona's pending states
// never show).

// volumeDTO is Daytona's VolumeDto.
type volumeDTO struct {
	ID             string  `json:"id"`
	Name           string  `json:"name"`
	OrganizationID string  `json:"organizationId"`
	State          string  `json:"state"`
	CreatedAt      string  `json:"createdAt"`
	UpdatedAt      string  `json:"updatedAt"`
	LastUsedAt     *string `json:"lastUsedAt"`
	ErrorReason    *string `json:"errorReason"`
}

// sandboxVolume is Daytona's SandboxVolume.
type sandboxVolume struct {
	VolumeID  string `json:"volumeId"`
	MountPath string `json:"mountPath"`
	Subpath   string `json:"subpath,omitempty"`
}

type createVolumeBody struct {
	Name string `json:"name"`
}

// volumeOf renders v. Daytona's createdAt is not kept: both times are the
// volume directory's last change.
func volumeOf(owner string, v service.Volume) volumeDTO {
	t := v.ModTime.UTC().Format(time.RFC3339Nano)
	return volumeDTO{ID: v.Name, Name: v.Name, OrganizationID: owner, State: "ready", CreatedAt: t, UpdatedAt: t}
}

// createVolume is POST /volumes {name}: an empty volume, ready. A name in
// use is 400, as on Daytona.
func (f *Facade) createVolume(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body createVolumeBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	v, err := f.svc.CreateVolume(r.Context(), c, body.Name)
	if errors.Is(err, service.ErrConflict) {
		return badRequest("Volume with name %s already exists", body.Name)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeOf(c.Owner, v))
	return nil
}

// listVolumes is GET /volumes: the caller's volumes.
func (f *Facade) listVolumes(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	vs, err := f.svc.ListVolumes(r.Context(), c)
	if err != nil {
		return err
	}
	out := make([]volumeDTO, 0, len(vs))
	for _, v := range vs {
		out = append(out, volumeOf(c.Owner, v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVolume is GET /volumes/{vid} and GET /volumes/by-name/{name} (the
// same: the id is the name); unknown is 404.
func (f *Facade) getVolume(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	name := r.PathValue("vid")
	v, err := f.svc.GetVolume(r.Context(), c, name)
	if errors.Is(err, service.ErrNotFound) {
		return errorf(http.StatusNotFound, "Volume with name %s not found", name)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeOf(c.Owner, v))
	return nil
}

// deleteVolume is DELETE /volumes/{vid}: the volume and its data are gone
// when it answers. One a sandbox mounts (running or stopped) is 409, as on
// Daytona; unknown is 404.
func (f *Facade) deleteVolume(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	name := r.PathValue("vid")
	err := f.svc.DeleteVolume(r.Context(), c, name)
	var inUse *service.VolumeInUseError
	switch {
	case errors.As(err, &inUse):
		return errorf(http.StatusConflict, "Volume cannot be deleted because it is in use by one or more sandboxes (e.g. %s)", inUse.Sandbox)
	case errors.Is(err, service.ErrNotFound):
		return errorf(http.StatusNotFound, "Volume with ID %s not found", name)
	case err != nil:
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// maxSandboxVolumes bounds a create's volumes (the service allows 8 mounts).
const maxSandboxVolumes = 8

// volumeMounts turns a create's volumes into mounts. Each volume must
// exist (404 "Volume '<id>' not found") and its mountPath be absolute; a
// subpath mounts only that directory of the volume (the service checks
// its text and internal/volume opens it without following links: see
// service.CheckSubpath).
func (f *Facade) volumeMounts(ctx context.Context, c service.Caller, raw []json.RawMessage) ([]service.Mount, error) {
	if len(raw) > maxSandboxVolumes {
		return nil, badRequest("volumes: at most %d", maxSandboxVolumes)
	}
	var mounts []service.Mount
	for i, m := range raw {
		var v sandboxVolume
		if err := json.Unmarshal(m, &v); err != nil {
			return nil, badRequest("volumes[%d]: %v", i, err)
		}
		switch {
		case v.VolumeID == "":
			return nil, badRequest("volumes[%d]: volumeId is required", i)
		case !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) == "/":
			return nil, badRequest("volumes[%d]: mountPath must be an absolute path other than /", i)
		}
		if v.Subpath != "" {
			if err := service.CheckSubpath(v.Subpath); err != nil {
				return nil, badRequest("volumes[%d]: %v", i, err)
			}
		}
		if _, err := f.svc.GetVolume(ctx, c, v.VolumeID); err != nil {
			if errors.Is(err, service.ErrNotFound) {
				return nil, errorf(http.StatusNotFound, "Volume '%s' not found", v.VolumeID)
			}
			return nil, err
		}
		mounts = append(mounts, service.Mount{Volume: v.VolumeID, Path: path.Clean(v.MountPath), Subpath: v.Subpath})
	}
	return mounts, nil
}

// volumesOf is a sandbox's volumes as its DTO reports them.
func volumesOf(sb service.Sandbox) []sandboxVolume {
	var out []sandboxVolume
	for _, m := range sb.Mounts {
		out = append(out, sandboxVolume{VolumeID: m.Volume, MountPath: m.Path, Subpath: m.Subpath})
	}
	return out
}
