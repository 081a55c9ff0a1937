package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Captures: Snapshot and Fork turn a sandbox's filesystem into a
// template's image (capture, under the sandbox's transition lock); a fork
// then creates sandboxes from it through CreateSandbox.

// SnapshotMemory says whether a snapshot holds the sandbox's running
// processes too.
type SnapshotMemory int

const (
	// SnapshotFiles captures the file system only.
	SnapshotFiles SnapshotMemory = iota
	// SnapshotWithMemory captures the running processes too, or fails
	// saying why it cannot.
	SnapshotWithMemory
	// SnapshotMemoryIfAble captures them when the sandbox runs and its
	// runtime can (with room and within the quotas and caps), and the
	// file system only otherwise (E2B's snapshots, which hold the
	// processes wherever they can).
	SnapshotMemoryIfAble
)

// Snapshot captures a sandbox's filesystem (running, paused or stopped)
// as a template of its owner's; a name given moves name:latest to it. It
// holds the sandbox's transition lock: no
// pause, resume, stop or start runs during the capture. With memory, the
// running sandbox's processes are captured too (forkmem.go): every
// sandbox created from the snapshot starts with them, where they were.
func (s *Service) Snapshot(ctx context.Context, c Caller, idOrName, name string, memory SnapshotMemory) (Template, error) {
	if name != "" && !validTemplateName(name) {
		return Template{}, invalid("name", msgTemplateName)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Template{}, err
	}
	defer unlock()
	if memory == SnapshotMemoryIfAble {
		// Where it cannot (not running, a runtime that does not
		// checkpoint, no room, a quota, the cap), the files: nothing of
		// the sandbox was touched to find out.
		memory = SnapshotFiles
		if s.memoryPrecheck(ctx, c, row, "snapshot") == nil {
			memory = SnapshotWithMemory
		}
	}
	var t store.Template
	if memory == SnapshotWithMemory {
		t, err = s.captureWithMemory(ctx, c, row, name, store.TemplateSnapshot)
	} else {
		t, err = s.capture(ctx, row, name, store.TemplateSnapshot, nil)
	}
	if err != nil {
		return Template{}, err
	}
	return s.withTags(ctx, fromTemplateRow(t)), nil
}

// capture captures row's sandbox as a template of kind, under its
// transition lock (the caller's). With mem (a capture with memory, the
// source hibernated: forkmem.go), the template's spec keeps what a
// restore needs (captureSpec) and, once the template's row exists and
// before the commit, the source's memory image is kept with it; the
// template's size counts it, and a failed capture removes it with the
// template (dropTemplate).
func (s *Service) capture(ctx context.Context, row store.Sandbox, name string, kind store.TemplateKind, mem *memoryCapture) (store.Template, error) {
	imgs, err := s.images()
	if err != nil {
		return store.Template{}, err
	}
	switch {
	case row.Owner == store.PoolOwner || row.Owner == buildOwner:
		return store.Template{}, fmt.Errorf("sandbox %q: %w", row.ID, ErrNotFound)
	case row.State == store.StateCreating || row.State == store.StateError:
		return store.Template{}, fmt.Errorf("sandbox %s is %s: %w", row.ID, row.State, ErrConflict)
	}
	// One capture of an owner's at a time: the storage check and the
	// capture it allows are not raced by another.
	unlockOwner, err := s.captures.lock(ctx, row.Owner)
	if err != nil {
		return store.Template{}, err
	}
	defer unlockOwner()
	if err := s.checkStorage(ctx, row.Owner); err != nil {
		return store.Template{}, err
	}
	// A sandbox made from a template keeps the template's start command.
	var spec json.RawMessage
	baseImage := row.Image
	if from, ok := s.templateOfImage(ctx, row.Image); ok {
		spec, baseImage = from.Spec, from.BaseImage
	}
	base, err := imgs.InspectImage(ctx, row.Image)
	if err != nil {
		return store.Template{}, fmt.Errorf("the image of sandbox %s: %w", row.ID, err)
	}
	id := NewTemplateID()
	if spec, err = s.captureSpec(spec, id, row, mem); err != nil {
		return store.Template{}, err
	}
	t, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: id, Owner: row.Owner, Name: name, Kind: kind, Image: templateRef(id),
		BaseImage: baseImage, SourceID: row.ID, Spec: spec,
	})
	if err != nil {
		return store.Template{}, mapTemplateErr(err, name)
	}
	cfg := base.Config
	cfg.Env = mergeEnvList(cfg.Env, row.Env) // what the container has of it: the engine would copy it anyway
	cfg.Labels = s.templateLabels(cfg.Labels, id)
	// The engine finishes a commit whatever the caller does, so the
	// caller's going away does not cut it short here either: its image
	// is then either recorded or removed.
	cctx := context.WithoutCancel(ctx)
	var memBytes int64
	if mem != nil {
		if memBytes, err = s.keepForkMemory(row.ID, t.ID); err != nil {
			s.dropTemplate(cctx, imgs, t)
			return store.Template{}, err
		}
	}
	img, err := imgs.Commit(cctx, row.ID, t.Image, cfg)
	if err == nil {
		t, err = s.finishTemplate(cctx, t, img.Size+memBytes, recipeTags(Recipe{Name: name}))
	}
	if err != nil {
		// The caller hears why; a failed capture is not kept.
		s.dropTemplate(context.WithoutCancel(ctx), imgs, t)
		if errors.Is(err, runtime.ErrInvalidSpec) {
			// What the sandbox holds cannot be an image (the oci
			// runtime's commit: a tree nested too deep); its message
			// says why and names no host path.
			return store.Template{}, fmt.Errorf("capture %s: %w: %v", row.ID, ErrConflict, err)
		}
		return store.Template{}, s.engineErr(ctx, "capture", row.ID, err)
	}
	return t, nil
}

// templateOfImage returns the template whose image ref is, if any.
func (s *Service) templateOfImage(ctx context.Context, ref string) (store.Template, bool) {
	if !isTemplateImage(ref) {
		return store.Template{}, false
	}
	t, err := s.Store.GetTemplate(ctx, templateIDOf(ref))
	return t, err == nil && t.Image == ref
}

// Fork makes n sandboxes (1 to 16) from a sandbox's current filesystem,
// each with its own id, token and ports and the source's size, env,
// secret env, tags, network and runtime (not its volumes). All or none:
// when one cannot be made, those made are destroyed. The capture they
// are made from is removed once none of them is left.
func (s *Service) Fork(ctx context.Context, c Caller, idOrName string, n int) ([]*Created, error) {
	if n < 1 || n > maxForks {
		return nil, invalid("count", "must be from 1 to %d", maxForks)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	t, err := s.capture(ctx, row, "", store.TemplateFork, nil)
	unlock()
	if err != nil {
		return nil, err
	}
	req, err := s.forkRequest(ctx, row, t, c)
	if err != nil {
		return nil, err
	}
	return s.makeForks(ctx, req, n)
}

// makeForks creates n sandboxes of req, all or none.
func (s *Service) makeForks(ctx context.Context, req CreateRequest, n int) ([]*Created, error) {
	out := make([]*Created, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = s.createAs(ctx, req, "", nil, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, cr := range out {
			if cr != nil {
				s.destroyDetached(ctx, cr.ID, "another sandbox of its fork failed")
			}
		}
		return nil, err
	}
	return out, nil
}

// forkRequest is the create of one sandbox of a fork of row from t.
func (s *Service) forkRequest(ctx context.Context, row store.Sandbox, t store.Template, c Caller) (CreateRequest, error) {
	var spec sandboxSpec
	_ = json.Unmarshal(row.Spec, &spec) // written by us
	req := CreateRequest{
		Owner: row.Owner, MilliCPU: row.CPUMillis, MemoryMB: row.MemoryMB, DiskMB: spec.DiskMB, Env: row.Env, Tags: row.Tags,
		Network: spec.Network, Runtime: spec.Runtime, Annotations: spec.Annotations, Quota: c.Quota,
		PauseOnTimeout: spec.PauseOnTimeout, Template: t.ID,
	}
	var err error
	if req.SecretEnv, err = s.openSecretEnv(row); err != nil {
		return CreateRequest{}, err
	}
	if !row.ExpiresAt.IsZero() {
		req.Timeout = max(time.Minute, row.ExpiresAt.Sub(s.Clock()))
	}
	return req, nil
}

// openSecretEnv is row's secret env in clear (nil when it has none).
func (s *Service) openSecretEnv(row store.Sandbox) (map[string]string, error) {
	if len(row.SealedSecrets) == 0 {
		return nil, nil
	}
	plain, err := s.Keyring.Open(row.SealedSecrets, secretEnvAD(row.ID))
	if err != nil {
		return nil, fmt.Errorf("open the secret env of %s: %w", row.ID, err)
	}
	var env map[string]string
	if err := json.Unmarshal(plain, &env); err != nil {
		return nil, fmt.Errorf("decode the secret env of %s: %w", row.ID, err)
	}
	return env, nil
}
