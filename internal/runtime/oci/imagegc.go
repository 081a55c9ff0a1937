package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Unpacked images are collected. An unpacked image (images/<id> and
// images/<id>.json) is in use while
//
//   - a sandbox's meta.json names it as its lower directory, whatever the
//     sandbox's state (running, paused, stopped: Start mounts it again),
//     a temporary directory of a create in progress included, and any
//     node's sandboxes sharing the directory;
//   - a create of this process holds a lease on it: from before image()
//     looks for it until the create has written its meta.json or failed
//     (leaseImage, under inflight.mu, the lock the unpacks share);
//   - an unpack of it is under way;
//   - the caller keeps it (CollectImages' keep: the pool's classes, the
//     default image).
//
// Anything else is removed by CollectImages. Its scan of the sandboxes'
// meta.json files runs without the lock; a create that took or dropped
// a lease on an image during the scan moved that image's lease
// generation (both move it: a create leased before the scan may rename
// its directory past the scan and release during it), and the image is
// left for the next pass. The removal
// itself, under the lock, takes the configuration file away first (it
// is what image() reads) and renames the directory to a temporary name,
// deleted after the lock is released: a create either leased the image
// before (and it is kept) or finds it gone and unpacks it again.
//
// Where the disk goes: unpacked images live on the file system of
// Options.Dir, outside every sandbox's qgroup (a sandbox's limit counts
// only what it writes over its image). They are bounded by the images
// sandboxes and the pool use, and the engine's own copy of an image is
// counted where the engine's data root is.

// imagesScanHook, when set (tests), runs in imagesInUse between its
// listing of the sandboxes and its reading of their meta.json files.
var imagesScanHook func()

// maxCollectPerPass bounds the images one CollectImages removes; the
// rest wait for the next pass (CollectResult.More).
const maxCollectPerPass = 16

// imageLease is what creates of this process hold on one image.
type imageLease struct {
	n   int    // leases held
	gen uint64 // leases ever taken or released
}

// leaseImage marks dir in use by a create of this process until release
// is called (once).
func leaseImage(dir string) (release func()) {
	inflight.mu.Lock()
	l := inflight.leases[dir]
	if l == nil {
		l = &imageLease{}
		inflight.leases[dir] = l
	}
	l.n++
	l.gen++
	inflight.mu.Unlock()
	var done bool
	return func() {
		if done {
			return
		}
		done = true
		inflight.mu.Lock()
		l.n--
		l.gen++ // a pass scanning now may have missed its meta.json
		inflight.mu.Unlock()
	}
}

// CollectImages implements runtime.ImageCollector: it removes unpacked
// images that nothing uses (see above), at most maxCollectPerPass, and
// images' temporary directories older than tmpAge. keep are image
// references (resolved by the engine; one it does not know keeps
// nothing) whose unpacked images stay even while unused. An engine that
// does not answer keeps every image that a keep reference might name:
// the pass then removes nothing and says so with runtime.ErrUnavailable.
func (r *Runtime) CollectImages(ctx context.Context, keep []string) (runtime.CollectResult, error) {
	var res runtime.CollectResult
	kept := map[string]bool{}
	for _, ref := range keep {
		info, err := r.cli.ImageInspect(ctx, ref)
		switch {
		case cerrdefs.IsNotFound(err):
			continue
		case err != nil:
			return res, engineErr(fmt.Errorf("collect images: inspect %s: %w", ref, err))
		}
		kept[strings.TrimPrefix(info.ID, "sha256:")] = true
	}
	sweepTmp(r.imagesDir(), tmpAge, r.removeSubvolume)
	entries, err := os.ReadDir(r.imagesDir())
	if err != nil {
		return res, fmt.Errorf("collect images: %w", err)
	}
	// Candidates: every image's name (its directory, or a configuration
	// file left without one), in directory order.
	var candidates []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() {
			var ok bool
			if name, ok = strings.CutSuffix(name, ".json"); !ok {
				continue
			}
		}
		if strings.HasPrefix(name, ".") || kept[name] || slices.Contains(candidates, name) {
			continue
		}
		candidates = append(candidates, name)
	}
	if len(candidates) == 0 {
		return res, nil
	}
	gens := map[string]uint64{}
	inflight.mu.Lock()
	for _, name := range candidates {
		if l := inflight.leases[filepath.Join(r.imagesDir(), name)]; l != nil {
			gens[name] = l.gen
		}
	}
	inflight.mu.Unlock()
	used, err := r.imagesInUse()
	if err != nil {
		return res, fmt.Errorf("collect images: %w", err)
	}
	type doomedImage struct{ name, dir string }
	var doomed []doomedImage
	inflight.mu.Lock()
	for _, name := range candidates {
		if used[name] {
			continue
		}
		if len(doomed) == maxCollectPerPass {
			res.More = true
			break
		}
		dir := filepath.Join(r.imagesDir(), name)
		if _, unpacking := inflight.calls[dir]; unpacking {
			continue
		}
		if l := inflight.leases[dir]; l != nil {
			if l.n > 0 || l.gen != gens[name] {
				continue // a create uses it, or used it since the scan began
			}
			delete(inflight.leases, dir)
		}
		// The configuration first: without it the image is not there
		// for image(), which then unpacks it again.
		if err := os.Remove(dir + ".json"); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("collect images: remove an image's configuration", "dir", dir, "err", err)
			continue
		}
		gone := filepath.Join(r.imagesDir(), tmpPrefix+"gc-"+name+"-"+randHex(4))
		if err := os.Rename(dir, gone); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				r.log.Warn("collect images: move an image aside", "dir", dir, "err", err)
			}
			continue
		}
		doomed = append(doomed, doomedImage{name, gone})
	}
	inflight.mu.Unlock()
	for _, d := range doomed {
		start := time.Now()
		if err := r.removeSubvolume(d.dir); err != nil {
			// Its temporary name has it removed by a later pass.
			r.log.Warn("collect images: remove an unused image", "dir", d.dir, "err", err)
			continue
		}
		res.Removed++
		r.log.Info("unused unpacked image removed", "image", d.name, "took", time.Since(start))
	}
	return res, nil
}

// imagesInUse are the names (ids) of the unpacked images that sandboxes'
// meta.json files name, every node's and every create's in progress
// (temporary directories) included. A meta.json that cannot be read for
// another reason than its absence is an error: the image it names is
// unknown, so nothing may be removed.
func (r *Runtime) imagesInUse() (map[string]bool, error) {
	dir := filepath.Join(r.opts.Dir, "sandboxes")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if imagesScanHook != nil {
		imagesScanHook()
	}
	used := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		var m sandboxMeta
		err := readJSON(filepath.Join(dir, e.Name(), "meta.json"), &m)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// A create's temporary directory before its meta.json (its
			// lease covers it), or a removal's remains.
			continue
		case err != nil:
			return nil, fmt.Errorf("sandbox %s: meta.json: %w", e.Name(), err)
		}
		used[filepath.Base(m.ImageDir)] = true
	}
	return used, nil
}
