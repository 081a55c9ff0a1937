package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Forks with memory. ForkWithMemory is Fork whose sandboxes start with
// the source's running processes (as E2B's snapshots do): each is
// restored from one checkpoint image of the source instead of booting.
//
// Under the source's transition lock: the source is hibernated
// (hibernateHolding: paused, checkpointed into its hibernate image, its
// row marked, its CPU and memory still reserved), its file system
// captured as a fork template while nothing of it runs (so the files the
// image's processes hold open are the capture's), the image hard-linked
// into the template's memory directory (<hibernate dir>/.forkmem/<template
// id>, 0700: it holds the source's memory, its secrets among them), and
// the source resumed from its hibernate image. Once the source is
// hibernated, everything up to its resume runs without the caller's
// context (bounded): a client that hangs up does not leave it hibernated. A daemon killed anywhere in between leaves the source
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
// template storage (Config.TemplateStorageMB: checked before the
// hibernate with the source's memory and files, forkStorage), and the
// source's hibernate needs its usual room and disk quota for the image.
// The fork's token hand-over is bounded (forkTokenTimeout).
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
	if err := s.forkStorage(ctx, row); err != nil {
		return store.Template{}, err
	}
	// 0700 whoever made it: the images hold the sources' memory.
	if err := os.MkdirAll(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("fork %s with its memory: %w: %w", row.ID, ErrUnavailable, err)
	}
	if err := os.Chmod(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("fork %s with its memory: %w: %w", row.ID, ErrUnavailable, err)
	}
	// The source keeps its CPU and memory reserved while it is
	// hibernated here: another create taking them would leave it unable
	// to resume.
	h, err := s.hibernateHolding(ctx, row, false, c.Quota, true)
	if err != nil {
		return store.Template{}, err
	}
	// From here on, up to and including its resume, the source's fate is
	// not its caller's: a client that hangs up would leave it hibernated.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hibernateTimeout(row.MemoryMB))
	defer cancel()
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
	var t store.Template
	hib, cerr := s.Store.GetSandbox(ctx, row.ID)
	if cerr != nil {
		// Resumed all the same, from what was read before (the resume
		// needs its id, size and spec, which a hibernate leaves).
		cerr, hib = s.mapStoreErr(cerr, row.ID), row
	} else {
		t, cerr = s.capture(ctx, hib, "", store.TemplateFork, func(t store.Template) (int64, error) {
			return s.keepForkMemory(row.ID, t.ID)
		})
	}
	// The source runs again whatever the capture did.
	if _, err := s.resumeHibernated(ctx, c, hib); err != nil {
		if imgs, ierr := s.images(); cerr == nil && ierr == nil {
			s.dropTemplate(ctx, imgs, t)
		}
		if errors.Is(err, ErrNotFound) {
			return store.Template{}, fmt.Errorf("fork %s with its memory: the source was destroyed during the fork: %w", row.ID, err)
		}
		return store.Template{}, fmt.Errorf("fork %s with its memory: the source stays hibernated (resume it): %w", row.ID, err)
	}
	if cerr != nil {
		return store.Template{}, cerr
	}
	return t, nil
}

// forkStorage refuses, before anything is done, a fork with memory whose
// capture would take its owner past Config.TemplateStorageMB: what the
// owner's templates hold, plus the memory image (at most the source's
// memory) and its files (its image and what it wrote over it). A
// QuotaError; capture's own check (checkStorage) runs as for any
// capture.
func (s *Service) forkStorage(ctx context.Context, row store.Sandbox) error {
	if s.cfg.TemplateStorageMB <= 0 {
		return nil
	}
	used, err := s.Store.TemplateBytes(ctx, row.Owner)
	if err != nil {
		return fmt.Errorf("fork %s with its memory: the owner's template storage: %w: %w", row.ID, ErrUnavailable, err)
	}
	need := row.MemoryMB<<20 + s.filesEstimate(ctx, row)
	if limit := s.cfg.TemplateStorageMB << 20; used+need > limit {
		return &QuotaError{Reason: fmt.Sprintf("a fork with memory of %s needs about %d MB of template storage (its memory and its files); the owner's templates and snapshots hold %d MB of %d MB",
			row.ID, need>>20, used>>20, s.cfg.TemplateStorageMB)}
	}
	return nil
}

// filesEstimate is what a capture of row's file system will weigh at
// least: its image's size and, where the runtime says, what the sandbox
// wrote over it. What is unknown counts 0.
func (s *Service) filesEstimate(ctx context.Context, row store.Sandbox) int64 {
	var n int64
	if imgs, err := s.images(); err == nil {
		if img, err := imgs.InspectImage(ctx, row.Image); err == nil {
			n += img.Size
		}
	}
	if ur, ok := s.Runtime.(runtime.UsageReader); ok {
		if u, err := ur.Usage(ctx, row.ID); err == nil {
			n += int64(u.DiskUsed)
		}
	}
	return n
}

// forkTokenTimeout bounds the hand-over of a fork's token to its restored
// agent (one local round trip): a program of the source's, restored in
// the fork, may hold the agent's socket and never answer.
const forkTokenTimeout = 10 * time.Second

// handForkToken is the create's token step for sandbox id restored from
// m: the restored agent, which takes m's token (its source's), is handed
// token, the sandbox's own, and env, its secret env. An agent that does
// not take them within forkTokenTimeout is ErrUnavailable naming why.
func (s *Service) handForkToken(ctx context.Context, id string, m *forkMemory, token string, env map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, forkTokenTimeout)
	defer cancel()
	a := agent.NewClient(s.dialer(id), m.token)
	defer a.Close()
	if err := a.Configure(ctx, agent.Configuration{Env: env, NewToken: token}); err != nil {
		return fmt.Errorf("hand the restored agent of %s its token (bound %s): %w: %w", id, forkTokenTimeout, ErrUnavailable, err)
	}
	return nil
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

// forkMemoryName is the directory of the fork templates' memory images
// in the hibernate directory: the same file system, since an image is
// hard-linked (beside it, the hibernate directory on a file system of its
// own failed the link, EXDEV, once the source was checkpointed). Not a
// sandbox id (those are DNS labels), so no image directory is it.
const forkMemoryName = ".forkmem"

// forkMemoryRoot holds the fork templates' memory images.
func (s *Service) forkMemoryRoot() string {
	return filepath.Join(s.cfg.HibernateDir, forkMemoryName)
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
	// Where a daemon before this one kept them (beside the hibernate
	// directory): a template's memory image serves only its fork's
	// creates, so none of them is needed any more.
	_ = os.RemoveAll(filepath.Join(filepath.Dir(s.cfg.HibernateDir), "forkmem"))
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
