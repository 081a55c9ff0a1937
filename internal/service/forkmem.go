package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Forks with memory. ForkWithMemory is Fork whose sandboxes start with
// the source's running processes (as E2B's snapshots do): each is
// restored from one checkpoint image of the source instead of booting.
//
// Under the source's transition lock: the source is hibernated
// (hibernateLocked: paused, checkpointed into its hibernate image, its
// row marked), its file system captured as a fork template while nothing
// of it runs (so the files the image's processes hold open are the
// capture's), the image hard-linked into the template's memory directory
// (<data-dir>/forkmem/<template id>, 0700: it holds the source's memory,
// its secrets among them), and the source resumed from its hibernate
// image. A daemon killed anywhere in between leaves the source
// hibernated or running, as a hibernate does, and a template that the
// next start's sweep removes with its memory directory. Then the forks
// are created from the template, each with Spec.RestoreImage naming the
// memory directory: a new id, its own root file system (the capture),
// socket directory, cgroup and network namespace; the restored agent
// still takes the source's token, so the create hands it the fork's own
// at once (startRuntime): from then on the source's token opens nothing
// in the fork. The source's env and secret env are in the restored
// processes' memory, as they are in the source's.
//
// The memory directory goes with the template (removeTemplate,
// dropTemplate): the template is removed once none of its forks is left
// (sweepForks). Its size counts in the template's, hence in the owner's
// template storage (Config.TemplateStorageMB), and the source's
// hibernate needs its usual room and disk quota for the image.
//
// Only a runtime that checkpoints the source's isolation can: --engine
// oci's gVisor sandboxes. Every other source, and one with volumes
// (their mounts are not the fork's), is refused with a FieldError on
// "memory" naming the reason; a source that is not running is a
// conflict.

// forkMemory is the memory image a fork is restored from and the token
// its restored agent takes until told its own.
type forkMemory struct {
	dir   string
	token string
}

// ForkWithMemory makes n sandboxes (1 to 16) that run on with a copy of
// the running sandbox's processes and memory, each with its own id,
// token, SSH key, root file system and ports, and the source's size,
// env, secret env, tags and runtime. The source pauses for the
// checkpoint and the capture and then runs on, its connections through
// the daemon (exec streams, tunnels) closed. All or none, as Fork.
func (s *Service) ForkWithMemory(ctx context.Context, c Caller, idOrName string, n int) ([]*Created, error) {
	if n < 1 || n > maxForks {
		return nil, invalid("count", "must be from 1 to %d", maxForks)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	t, err := s.captureWithMemory(ctx, c, row)
	unlock()
	if err != nil {
		return nil, err
	}
	req, err := s.forkRequest(ctx, row, t, c)
	if err != nil {
		return nil, err
	}
	token, err := s.openToken(row)
	if err != nil {
		return nil, fmt.Errorf("open the agent token of %s: %w", row.ID, err)
	}
	return s.makeForks(ctx, req, &forkMemory{dir: s.forkMemoryDir(t.ID), token: token}, n)
}

// forkMemoryUnsupported says why row's processes cannot be forked here,
// or "".
func (s *Service) forkMemoryUnsupported(row store.Sandbox) string {
	if s.cfg.HibernateDir == "" {
		return "this daemon keeps no memory images (no hibernate directory)"
	}
	if _, ok := s.Runtime.(runtime.Checkpointer); !ok {
		return runtime.CanCheckpoint(s.Runtime, isolation(specOf(row).Runtime)).How
	}
	if sup := s.HibernateSupport(specOf(row).Runtime); !sup.OK {
		return sup.How
	}
	if len(fromRow(row).Mounts) > 0 {
		return "a sandbox with volumes cannot be forked with its memory (its mounts are not its forks')"
	}
	return ""
}

// captureWithMemory is ForkWithMemory's work under the source's
// transition lock: the checks, the hibernate, the capture with the
// image, and the resume.
func (s *Service) captureWithMemory(ctx context.Context, c Caller, row store.Sandbox) (store.Template, error) {
	switch {
	case row.Owner == store.PoolOwner || row.Owner == buildOwner:
		return store.Template{}, fmt.Errorf("sandbox %q: %w", row.ID, ErrNotFound)
	case row.State != store.StateRunning:
		return store.Template{}, fmt.Errorf("sandbox %s is %s; a fork with memory needs it running: %w", row.ID, row.State, ErrConflict)
	}
	if why := s.forkMemoryUnsupported(row); why != "" {
		return store.Template{}, &FieldError{Field: "memory", Reason: "cannot fork this sandbox with its memory: " + why}
	}
	// The hibernate would stop the source where its image has no room:
	// refused first instead.
	if why := s.imageRoom(row); why != "" {
		return store.Template{}, fmt.Errorf("fork %s with its memory: %s: %w", row.ID, strings.TrimPrefix(why, "stopped: "), ErrUnavailable)
	}
	if why := s.imageQuota(row, c.Quota); why != "" {
		return store.Template{}, &QuotaError{Reason: strings.TrimPrefix(why, "stopped: ")}
	}
	if err := s.checkStorage(ctx, row.Owner); err != nil {
		return store.Template{}, err
	}
	// 0700 whoever made it: the images hold the sources' memory.
	if err := os.MkdirAll(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("fork %s with its memory: %w: %w", row.ID, ErrUnavailable, err)
	}
	if err := os.Chmod(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("fork %s with its memory: %w: %w", row.ID, ErrUnavailable, err)
	}
	h, err := s.hibernateLocked(ctx, row, false, c.Quota)
	if err != nil {
		return store.Template{}, err
	}
	if h.Stopped {
		// Refused late (its room went meanwhile): the source runs
		// again, afresh, and the caller hears why.
		if now, gerr := s.Store.GetSandbox(ctx, row.ID); gerr == nil {
			if _, serr := s.startLocked(ctx, c, now); serr != nil {
				s.Logger.Warn("fork with memory: start the source again", "sandbox", row.ID, "err", serr)
			}
		}
		return store.Template{}, fmt.Errorf("fork %s with its memory: its checkpoint could not be made (%s): %w", row.ID, h.Reason, ErrUnavailable)
	}
	hib, err := s.Store.GetSandbox(ctx, row.ID)
	if err != nil {
		return store.Template{}, s.mapStoreErr(err, row.ID)
	}
	t, cerr := s.capture(ctx, hib, "", store.TemplateFork, func(t store.Template) (int64, error) {
		return s.keepForkMemory(row.ID, t.ID)
	})
	// The source runs again whatever the capture did.
	if _, err := s.resumeHibernated(ctx, c, hib); err != nil {
		if imgs, ierr := s.images(); cerr == nil && ierr == nil {
			s.dropTemplate(context.WithoutCancel(ctx), imgs, t)
		}
		return store.Template{}, fmt.Errorf("fork %s with its memory: the source stays hibernated (resume it): %w", row.ID, err)
	}
	if cerr != nil {
		return store.Template{}, cerr
	}
	return t, nil
}

// keepForkMemory hard-links sandbox id's hibernate image into template
// tpl's memory directory (made whole under a temporary name, then
// renamed) and returns its size.
func (s *Service) keepForkMemory(id, tpl string) (int64, error) {
	src := s.imageDir(id)
	dst := s.forkMemoryDir(tpl)
	tmp := dst + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return 0, fmt.Errorf("keep the memory image: %w: %w", ErrUnavailable, err)
	}
	entries, err := os.ReadDir(src)
	var size int64
	for _, e := range entries {
		if err != nil {
			break
		}
		if !e.Type().IsRegular() {
			continue
		}
		var fi os.FileInfo
		if fi, err = e.Info(); err == nil {
			size += fi.Size()
			err = os.Link(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name()))
		}
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("keep the memory image: %w: %w", ErrUnavailable, err)
	}
	return size, nil
}

// forkMemoryRoot holds the fork templates' memory images, beside the
// hibernate directory (the same file system: an image is hard-linked).
func (s *Service) forkMemoryRoot() string {
	return filepath.Join(filepath.Dir(s.cfg.HibernateDir), "forkmem")
}

// forkMemoryDir is template tpl's memory image directory.
func (s *Service) forkMemoryDir(tpl string) string { return filepath.Join(s.forkMemoryRoot(), tpl) }

// dropForkMemory removes template tpl's memory image, if any.
func (s *Service) dropForkMemory(tpl string) {
	if s.cfg.HibernateDir == "" {
		return
	}
	if err := os.RemoveAll(s.forkMemoryDir(tpl)); err != nil {
		s.Logger.Warn("template: remove a fork's memory image", "template", tpl, "err", err)
	}
}

// sweepForkMemory removes, at startup, the memory images no template
// names (a template deleted by a dead process, a capture cut short) and
// temporary ones.
func (s *Service) sweepForkMemory(ctx context.Context) {
	if s.cfg.HibernateDir == "" {
		return
	}
	entries, err := os.ReadDir(s.forkMemoryRoot())
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.Contains(e.Name(), ".") {
			if _, err := s.Store.GetTemplate(ctx, e.Name()); !errors.Is(err, store.ErrNotFound) {
				continue // its template's, or unknown: kept
			}
		}
		if err := os.RemoveAll(filepath.Join(s.forkMemoryRoot(), e.Name())); err != nil {
			s.Logger.Warn("reconcile: remove a stale fork memory image", "name", e.Name(), "err", err)
		}
	}
}
