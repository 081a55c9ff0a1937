package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

var _ runtime.DiskLimiter = (*Runtime)(nil)

// diskProbeMB is the size the probe of an overlay2 engine asks for: any
// size will do, the engine refuses the option itself where it cannot
// enforce it.
const diskProbeMB = 16

// diskState is what DiskLimits learnt from the engine.
type diskState struct {
	limits runtime.DiskLimits
	// addsImage: the engine's size counts the image's own bytes too
	// (btrfs with full qgroups: the qgroup limits the container
	// subvolume's referenced bytes, which include the image's shared
	// extents), so the image's size is added to Spec.DiskMB. Simple
	// quotas and overlay2 count what the container writes only.
	addsImage bool
	// qgroups repairs the btrfs qgroups the engine's removals leave
	// inconsistent (qgroup.go); nil elsewhere.
	qgroups *qgroups
}

// DiskLimits implements runtime.DiskLimiter. It reads the engine's
// storage driver once (Info) and latches the answer:
//
//   - btrfs: enforced by a qgroup per container (Docker's btrfs driver),
//     counted by simple quotas or by full qgroups (qgroup.go);
//   - overlay2 on xfs: enforced when the file system is mounted with
//     pquota, which only the engine knows: a container is created (not
//     started) from Options.DiskProbeImage with a size and removed again;
//     the engine refuses the size where it cannot enforce it;
//   - anything else: not enforced (Spec.DiskMB is then ignored).
//
// An engine that does not answer is an error and nothing is latched.
func (r *Runtime) DiskLimits(ctx context.Context) (runtime.DiskLimits, error) {
	if r.diskLatched.Load() {
		return r.disk.limits, nil
	}
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	if r.diskLatched.Load() {
		return r.disk.limits, nil
	}
	st, err := r.probeDisk(ctx)
	if err != nil {
		return runtime.DiskLimits{}, err
	}
	r.disk = st
	r.diskLatched.Store(true)
	return st.limits, nil
}

func (r *Runtime) probeDisk(ctx context.Context) (diskState, error) {
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return diskState{}, fmt.Errorf("engine info: %w", err)
	}
	driver := info.Info.Driver
	var backing string
	for _, kv := range info.Info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	switch {
	case driver == "btrfs":
		q, err := newQgroups(info.Info.DockerRootDir)
		if err != nil {
			// Not on this host's file systems (a remote engine): its
			// qgroups cannot be repaired from here, so a limit would stop
			// holding at the engine's first removal.
			return diskState{limits: runtime.DiskLimits{How: "btrfs qgroups the daemon cannot repair: " + err.Error()}}, nil
		}
		if q.simple {
			return diskState{limits: runtime.DiskLimits{Enforced: true, How: "btrfs qgroup per container, simple quotas"}}, nil
		}
		if err := q.repair(); err != nil {
			return diskState{}, err
		}
		return diskState{limits: runtime.DiskLimits{Enforced: true, How: "btrfs qgroup per container, full qgroups"}, addsImage: true, qgroups: q}, nil
	case driver == "overlay2" && backing == "xfs":
		if r.opts.DiskProbeImage == "" {
			return diskState{limits: runtime.DiskLimits{How: "overlay2 on xfs, not probed (no probe image)"}}, nil
		}
		ok, err := r.probeStorageOpt(ctx)
		if err != nil {
			return diskState{}, err
		}
		if ok {
			return diskState{limits: runtime.DiskLimits{Enforced: true, How: "overlay2 size on xfs with pquota"}}, nil
		}
		return diskState{limits: runtime.DiskLimits{How: "overlay2 on xfs without pquota: the engine refuses a size"}}, nil
	}
	return diskState{limits: runtime.DiskLimits{How: fmt.Sprintf("storage driver %q on %q cannot limit a container's size", driver, backing)}}, nil
}

// probeStorageOpt creates (never starts) a container with a size and
// removes it: true when the engine accepted the size.
func (r *Runtime) probeStorageOpt(ctx context.Context) (bool, error) {
	name := "sandboxd-disk-probe-" + newAttemptID()
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     &container.Config{Image: r.opts.DiskProbeImage, Labels: map[string]string{runtime.LabelNode: r.opts.NodeID}},
		HostConfig: &container.HostConfig{NetworkMode: "none", StorageOpt: map[string]string{"size": strconv.Itoa(diskProbeMB) + "M"}},
	})
	if err != nil {
		if cerrdefs.IsInvalidArgument(err) || cerrdefs.IsNotImplemented(err) {
			return false, nil
		}
		return false, fmt.Errorf("disk limit probe: %w", err)
	}
	if err := r.remove(context.WithoutCancel(ctx), created.ID); err != nil {
		r.log.Warn("disk limit probe: remove", "container", name, "err", err)
	}
	return true, nil
}

// storageOpt is the engine's storage options for spec: nil without a
// disk limit or where the engine cannot enforce one, else the size. On
// btrfs with full qgroups the size is the image's size, plus a sixteenth of it for the
// file system's own metadata over the image's bytes (measured here:
// sandboxd/base's 338 MiB are 349 MiB referenced), plus Spec.DiskMB: one
// ImageInspect, ~0.5 ms against a local engine.
func (r *Runtime) storageOpt(ctx context.Context, spec runtime.Spec) (map[string]string, error) {
	if spec.DiskMB <= 0 {
		return nil, nil
	}
	lim, err := r.DiskLimits(ctx)
	if err != nil {
		return nil, err
	}
	if !lim.Enforced {
		return nil, nil
	}
	// Counting may have stopped at another daemon's removal: a sysfs read,
	// and a rescan only then.
	if err := r.disk.qgroups.repair(); err != nil {
		return nil, err
	}
	size := spec.DiskMB << 20
	if r.disk.addsImage {
		img, err := r.cli.ImageInspect(ctx, spec.Image)
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				return nil, fmt.Errorf("%w: %s (create does not pull: the service pulls before it)", runtime.ErrImageNotFound, spec.Image)
			}
			return nil, fmt.Errorf("inspect image %s for its size: %w", spec.Image, err)
		}
		if img.Size < 0 {
			return nil, errors.New("engine reported a negative image size")
		}
		size += img.Size + img.Size/16
	}
	return map[string]string{"size": strconv.FormatInt(size, 10)}, nil
}

// repairQgroups is run after the runtime removed a container or an image:
// see qgroup.go. Before the disk limits are known there is nothing to
// repair; a failure is the caller's to log.
func (r *Runtime) repairQgroups() error {
	if !r.diskLatched.Load() {
		return nil
	}
	return r.disk.qgroups.repair()
}
