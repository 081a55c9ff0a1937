package service

import (
	"context"
	"slices"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Unpacked images (a runtime's own copies of the engine's images: the oci
// runtime's lower directories) are collected once nothing uses them
// (runtime.ImageCollector): at start, once the startup repair is done,
// and after every image the service removes from the engine (a template
// or snapshot deleted, a pull undone). Passes run one at a time in the
// background (runImageGC); requests made during a pass are coalesced
// into one more pass. The pool's images and the default image are kept
// even while no sandbox uses them: the next create of them would pay the
// unpack again.

// maxImageGCPasses bounds the passes one request runs (each removes at
// most the runtime's bound, runtime.CollectResult.More asks for more).
const maxImageGCPasses = 8

// kickImageGC asks for a collection pass; it never blocks.
func (s *Service) kickImageGC() {
	if s.ImageCollector == nil {
		return
	}
	select {
	case s.imageGC <- struct{}{}:
	default: // one is pending already
	}
}

// runImageGC runs the collection passes asked for (the first at once)
// until ctx ends.
func (s *Service) runImageGC(ctx context.Context) {
	if s.ImageCollector == nil {
		return
	}
	for {
		s.collectImages(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.imageGC:
		}
	}
}

// collectImages runs passes until the runtime has nothing more to remove.
func (s *Service) collectImages(ctx context.Context) {
	keep := s.keptImages()
	for range maxImageGCPasses {
		res, err := s.ImageCollector.CollectImages(ctx, keep)
		if err != nil {
			if ctx.Err() == nil {
				s.Logger.Warn("unused unpacked images not collected; the next image removal or start retries", "err", err)
			}
			return
		}
		if !res.More {
			return
		}
	}
}

// keptImages are the images kept unpacked while unused: the pool's
// classes' and the default image.
func (s *Service) keptImages() []string {
	keep := []string{s.cfg.DefaultImage}
	for _, c := range s.pool.Status() {
		if !slices.Contains(keep, c.Class.Image) {
			keep = append(keep, c.Class.Image)
		}
	}
	return keep
}

// collectingImages are the service's Images, which ask for a collection
// pass after each image they remove.
type collectingImages struct {
	runtime.Images
	kick func()
}

// RemoveImage implements runtime.Images.
func (c collectingImages) RemoveImage(ctx context.Context, ref string) error {
	err := c.Images.RemoveImage(ctx, ref)
	if err == nil {
		c.kick()
	}
	return err
}
