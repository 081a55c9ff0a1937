package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

var _ runtime.Images = (*Runtime)(nil)

// Commit implements runtime.Images.
//
// The engine merges the container's configuration into the one it is
// given: every env variable and label the container has and cfg lacks
// would be copied into the image (the agent token among them), and its
// entrypoint (the agent's path) too when cfg has none. So each such key
// is set explicitly, to an empty value, and the entrypoint to an empty
// list: the image's configuration carries cfg and nothing of the
// sandbox's.
//
// The engine also records the committed container's whole configuration
// in the image, beside it ("container_config", shown by docker image
// inspect as ContainerConfig and pushed to registries): the agent token
// and the sandbox's env in clear. So the sandbox is committed to an
// untagged intermediate image, a container that never runs is created
// from that image, and the image ref is committed from it: the config
// recorded then is the intermediate's, cfg's. The intermediate stays as
// the image's parent (untagged, in the engine's store only, as the
// sandbox's own container config is) and goes with it (RemoveImage).
// This costs a container create, an empty commit and a remove.
func (r *Runtime) Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (_ runtime.Image, err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return runtime.Image{}, err
	}
	ins, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{})
	if err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s: %w", sandboxID, notFound(err))
	}
	c := &container.Config{
		Env:        slices.Clone(cfg.Env),
		Cmd:        cfg.Cmd,
		Entrypoint: cfg.Entrypoint,
		WorkingDir: cfg.WorkingDir,
		User:       cfg.User,
		Labels:     maps.Clone(cfg.Labels),
	}
	if c.Entrypoint == nil {
		c.Entrypoint = []string{}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if old := ins.Container.Config; old != nil {
		have := make(map[string]bool, len(c.Env))
		for _, kv := range c.Env {
			k, _, _ := strings.Cut(kv, "=")
			have[k] = true
		}
		for _, kv := range old.Env {
			if k, _, _ := strings.Cut(kv, "="); !have[k] {
				c.Env = append(c.Env, k+"=")
				have[k] = true
			}
		}
		for k := range old.Labels {
			if _, ok := c.Labels[k]; !ok {
				c.Labels[k] = ""
			}
		}
	}
	// The intermediate container's labels are blanked like the sandbox's.
	c.Labels[labelCommit] = ""
	paused := ins.Container.State != nil && ins.Container.State.Status == container.StatePaused
	mid, err := r.cli.ContainerCommit(ctx, ins.Container.ID, client.ContainerCommitOptions{
		Config:  c,
		NoPause: paused, // the engine cannot pause a paused container again
	})
	if err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s as %s: %w", sandboxID, ref, notFound(err))
	}
	id, err := r.recommit(ctx, mid.ID, ref, c)
	if err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s as %s: %w", sandboxID, ref, err)
	}
	img, err := r.InspectImage(ctx, id)
	if err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s as %s: %w", sandboxID, ref, err)
	}
	return img, nil
}

// labelCommit marks the short-lived container Commit makes (recommit), so
// that one a crash left is recognisable: it never runs, and the daemon's
// node label lets the node's cleanup find it.
const labelCommit = runtime.LabelPrefix + "commit"

// recommit commits the image mid again, through a container of its own
// that never runs, as ref with the configuration c; mid (untagged)
// becomes the result's parent, or is removed when this fails. It returns
// the new image's id.
func (r *Runtime) recommit(ctx context.Context, mid, ref string, c *container.Config) (_ string, err error) {
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if _, rmErr := r.cli.ImageRemove(ctx, mid, client.ImageRemoveOptions{}); rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
				err = errors.Join(err, fmt.Errorf("undo: remove intermediate image: %w", rmErr))
			}
		}
	}()
	tmp, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: mid,
			// Never run. An entrypoint of its own keeps the image's Cmd
			// off the container, so the merge below adds none.
			Entrypoint: []string{"true"},
			Labels:     map[string]string{runtime.LabelNode: r.opts.NodeID, labelCommit: "1"},
		},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return "", fmt.Errorf("intermediate container: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rmErr := r.remove(ctx, tmp.ID); rmErr != nil {
			// The image is made either way; the container never runs.
			r.log.Warn("commit: remove the intermediate container", "container", tmp.ID, "err", rmErr)
		}
	}()
	res, err := r.cli.ContainerCommit(ctx, tmp.ID, client.ContainerCommitOptions{Reference: ref, Config: c, NoPause: true})
	if err != nil {
		return "", err
	}
	return res.ID, nil
}

// InspectImage implements runtime.Images.
func (r *Runtime) InspectImage(ctx context.Context, ref string) (_ runtime.Image, err error) {
	defer func() { err = engineErr(err) }()
	res, err := r.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) {
		// A reference the engine cannot parse names no image either.
		return runtime.Image{}, fmt.Errorf("image %s: %w: %w", ref, runtime.ErrImageNotFound, err)
	}
	if err != nil {
		return runtime.Image{}, fmt.Errorf("inspect image %s: %w", ref, err)
	}
	img := runtime.Image{ID: res.ID, Size: res.Size, Refs: append(slices.Clone(res.RepoTags), res.RepoDigests...)}
	if cfg := res.Config; cfg != nil {
		img.Config = runtime.ImageConfig{
			Env: cfg.Env, Cmd: cfg.Cmd, Entrypoint: cfg.Entrypoint,
			WorkingDir: cfg.WorkingDir, User: cfg.User, Labels: cfg.Labels,
		}
	}
	return img, nil
}

// RemoveImage implements runtime.Images.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) (err error) {
	defer func() { err = engineErr(err) }()
	_, err = r.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	if err != nil && strings.Contains(err.Error(), "unrecognized image ID") {
		// The engine resolved ref to an image that another removal (of
		// another reference of the same image) took from under it: once
		// more, on what ref names now.
		_, err = r.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	}
	switch {
	case err == nil:
		if err := r.repairQgroups(); err != nil { // its layers' subvolumes went: qgroup.go
			r.log.Warn("disk limits: rescan the qgroups after an image removal", "err", err)
		}
		return nil
	case cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("remove image %s: %w: %w", ref, runtime.ErrImageInUse, err)
	}
	return fmt.Errorf("remove image %s: %w", ref, err)
}

// TagImage implements runtime.Images.
func (r *Runtime) TagImage(ctx context.Context, src, dst string) (err error) {
	defer func() { err = engineErr(err) }()
	_, err = r.cli.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: dst})
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("tag image %s as %s: %w: %w", src, dst, runtime.ErrImageNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("tag image %s as %s: %w", src, dst, err)
	}
	return nil
}
