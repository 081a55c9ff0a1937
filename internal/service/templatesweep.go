package service

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Sweeps: what the templates part removes on its own (the reconciler and
// the reap tick call sweepTemplates): fork captures no sandbox uses,
// builds superseded by newer ones, and at startup what a dead process
// left building.

// sweepTemplates removes the fork captures no sandbox uses any more (past
// their grace) and, at startup, fails the builds and captures a dead
// process left building and destroys its build sandboxes.
func (s *Service) sweepTemplates(ctx context.Context, startup bool) error {
	imgs, err := s.images()
	if err != nil {
		return nil // no templates without an image side
	}
	var errs []error
	if startup {
		cut, err := s.Store.FailBuildingTemplates(ctx, "cut short: the daemon stopped while it was being made")
		errs = append(errs, err)
		for _, t := range cut {
			if s.sharing() && t.Kind != store.TemplateFork {
				s.unshare(t) // its record, if it was published before the cut
			}
			if t.Kind != store.TemplateBuild {
				s.dropTemplate(ctx, imgs, t) // nobody is told of a capture cut short
				continue
			}
			errs = append(errs, imgs.RemoveImage(ctx, t.Image))
		}
		rows, _, err := s.Store.ListSandboxes(ctx, store.ListFilter{Owner: buildOwner, Limit: store.MaxListLimit})
		errs = append(errs, err)
		for _, row := range rows {
			s.destroyDetached(ctx, row.ID, "its build was cut short")
		}
	}
	if startup {
		s.sweepForkMemory(ctx)
	}
	errs = append(errs, s.sweepForks(ctx, imgs, forkGrace), s.sweepSuperseded(ctx, imgs, forkGrace), s.sweepShared(ctx))
	return errors.Join(errs...)
}

// sweepSuperseded removes the named builds no tag points to any more (a
// newer build of the name took them) and no sandbox uses, once grace has
// passed since they were last changed: what a rebuild leaves, as an
// engine's dangling images. Snapshots and builds made without a name
// stay until deleted.
func (s *Service) sweepSuperseded(ctx context.Context, imgs runtime.Images, grace time.Duration) error {
	before := s.Clock().Add(-grace)
	builds, err := s.Store.SupersededBuilds(ctx, before)
	errs := []error{err}
	for _, t := range builds {
		if s.sharing() && t.Shared {
			// A sandbox elsewhere keeps it; the catalog goes first (the
			// other nodes drop their copies).
			if s.templateUsedElsewhere(t.ID) != nil {
				continue
			}
			if err := s.dropFromCatalog(ctx, t.ID, t.Owner, true); err != nil {
				if !errors.Is(err, ErrConflict) { // in use, or tagged elsewhere: kept
					errs = append(errs, err)
				}
				continue
			}
		}
		// Deleted only if still superseded: a tag may have come back
		// since the list was read.
		deleted, err := s.Store.DeleteSupersededBuild(ctx, t.ID, before)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			if err := imgs.RemoveImage(ctx, t.Image); err != nil {
				s.Logger.Warn("template: remove the image of a superseded build", "template", t.ID, "err", err)
			}
		}
	}
	return errors.Join(errs...)
}

// sweepForks removes the fork captures no sandbox uses that are older
// than grace.
func (s *Service) sweepForks(ctx context.Context, imgs runtime.Images, grace time.Duration) error {
	forks, err := s.Store.UnusedForks(ctx)
	errs := []error{err}
	for _, t := range forks {
		if s.Clock().Sub(t.UpdatedAt) < grace {
			continue
		}
		if err := s.removeTemplate(ctx, imgs, t); err != nil && !errors.Is(err, ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DropUnusedForks removes every fork capture no sandbox uses, whatever
// its age: a daemon that stops (its forks' creates have ended) leaves
// none behind.
func (s *Service) DropUnusedForks(ctx context.Context) error {
	imgs, err := s.images()
	if err != nil {
		return nil
	}
	return s.sweepForks(ctx, imgs, 0)
}

// dropTemplate deletes a capture that failed, row and image; what it
// cannot remove the next start's sweep does.
func (s *Service) dropTemplate(ctx context.Context, imgs runtime.Images, t store.Template) {
	if _, err := s.Store.DeleteTemplate(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		// Kept (a sandbox made from it exists): so are its image and
		// memory, which that sandbox's next restore may need.
		s.Logger.Warn("template: delete a failed capture", "template", t.ID, "err", err)
		return
	}
	s.dropForkMemory(t.ID)
	if err := imgs.RemoveImage(ctx, t.Image); err != nil {
		s.Logger.Warn("template: remove the image of a failed capture", "template", t.ID, "err", err)
	}
}
