package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Images stay the engine's: it pulls, builds and commits them. The first
// create of an image unpacks it, once, into a read-only lower directory
// under the runtime's directory, named by the image's id:
//
//	<dir>/images/<id hex>/       the image's root file system
//	<dir>/images/<id hex>.json   what of its configuration a sandbox uses
//
// An unpack goes to a temporary directory that is renamed into place
// when complete, so a crash leaves a temporary directory (swept by New)
// and never a partial image. Concurrent creates of one image share one
// unpack. It is done from `docker export` of a container created (never
// started) from the image: one flattened tar stream, no layers and no
// whiteouts to apply (measured for the base image, 355 MB: export 1.8 s,
// save 2.7 s); the container is removed at once.

// imageConfig is what a sandbox takes from its image.
type imageConfig struct {
	Env        []string `json:"env"`
	WorkingDir string   `json:"working_dir"`
	User       string   `json:"user"`
}

// image is an unpacked image.
type image struct {
	dir string // its root file system (the overlay's lower directory)
	cfg imageConfig
}

// imageCache is a runtime's unpack bookkeeping (inflight shares them).
type imageCache struct {
	unpacks atomic.Int64 // unpacks started (tests)
	swept   atomic.Bool  // sweepExports ran once
}

type unpackCall struct {
	done chan struct{}
	err  error
}

func (r *Runtime) imagesDir() string { return filepath.Join(r.opts.Dir, "images") }

// image resolves ref with the engine and returns its unpacked root file
// system, unpacking it first if no create did before. A reference the
// engine does not have is runtime.ErrImageNotFound. On success the image
// is leased (imagegc.go): the caller calls release once the sandbox's
// meta.json names the image, or its create failed.
func (r *Runtime) image(ctx context.Context, ref string) (_ image, release func(), err error) {
	// release stays nil on failure: the lease is dropped here then.
	res, err := r.inspectImage(ctx, ref) // shared by concurrent creates (inspect.go)
	if cerrdefs.IsNotFound(err) {
		return image{}, nil, fmt.Errorf("%w: %s (create does not pull: the service pulls before it)", runtime.ErrImageNotFound, ref)
	}
	if err != nil {
		return image{}, nil, engineErr(fmt.Errorf("inspect image %s: %w", ref, err))
	}
	id := strings.TrimPrefix(res.ID, "sha256:")
	if id == "" || strings.ContainsAny(id, "/.") {
		return image{}, nil, fmt.Errorf("image %s: unexpected id %q", ref, res.ID)
	}
	dir := filepath.Join(r.imagesDir(), id)
	// Leased before it is looked for: a collection either saw the lease
	// and keeps the image, or removed it before and it is unpacked again.
	lease := leaseImage(dir)
	defer func() {
		if err != nil {
			lease()
		}
	}()
	if img, err := readImage(dir); err == nil {
		return img, lease, nil
	}
	cfg := imageConfig{}
	if c := res.Config; c != nil {
		cfg = imageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User}
	}
	if err := r.unpackOnce(ctx, ref, dir, cfg); err != nil {
		return image{}, nil, err
	}
	img, err := readImage(dir)
	if err != nil {
		return image{}, nil, err
	}
	return img, lease, nil
}

func readImage(dir string) (image, error) {
	b, err := os.ReadFile(dir + ".json")
	if err != nil {
		return image{}, err
	}
	img := image{dir: dir}
	if err := json.Unmarshal(b, &img.cfg); err != nil {
		return image{}, fmt.Errorf("image config %s.json: %w", dir, err)
	}
	return img, nil
}

// inflight are the unpacks under way in this process, by directory:
// shared by every Runtime of the process (tests run several on one
// directory).
var inflight = struct {
	mu     sync.Mutex
	calls  map[string]*unpackCall
	leases map[string]*imageLease // by directory (imagegc.go)
}{calls: map[string]*unpackCall{}, leases: map[string]*imageLease{}}

// unpackOnce unpacks ref into dir unless another call is doing it, in
// which case it waits for that one (a failure is not shared with later
// calls: the next one tries again).
func (r *Runtime) unpackOnce(ctx context.Context, ref, dir string, cfg imageConfig) error {
	inflight.mu.Lock()
	c, ok := inflight.calls[dir]
	if !ok {
		c = &unpackCall{done: make(chan struct{})}
		inflight.calls[dir] = c
		go func() {
			// Not the caller's context: other creates wait on this unpack.
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c.err = r.unpackImage(uctx, ref, dir, cfg)
			inflight.mu.Lock()
			delete(inflight.calls, dir)
			inflight.mu.Unlock()
			close(c.done)
		}()
	}
	inflight.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unpackImage exports ref's file system from the engine into a temporary
// directory and renames it (and its configuration) into place.
func (r *Runtime) unpackImage(ctx context.Context, ref, dir string, cfg imageConfig) (err error) {
	start := time.Now()
	r.images.unpacks.Add(1)
	if err := os.MkdirAll(r.imagesDir(), 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(r.imagesDir(), tmpName(filepath.Base(dir)))
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: ref, Entrypoint: []string{"/nonexistent"}, Labels: map[string]string{labelUnpack: "1"}},
	})
	if err != nil {
		return engineErr(fmt.Errorf("unpack image %s: create a container to export: %w", ref, err))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, rerr := r.cli.ContainerRemove(rctx, created.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil {
			r.log.Warn("unpack: remove the export container", "container", created.ID, "err", rerr)
		}
	}()
	// The export ends when no byte came for exportIdle: the engine
	// blocks for ever reading an image's FIFO.
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(exportIdle, cancel)
	defer idle.Stop()
	rc, err := r.cli.ContainerExport(ectx, created.ID, client.ContainerExportOptions{})
	if err != nil {
		return engineErr(fmt.Errorf("unpack image %s: export: %w", ref, err))
	}
	defer rc.Close()
	if err := unpack(progressReader{rc, func() { idle.Reset(exportIdle) }}, tmp); err != nil {
		if ectx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("unpack image %s: %w: the engine's export sent nothing for %v (a FIFO in the image?)", ref, runtime.ErrUnavailable, exportIdle)
		}
		return fmt.Errorf("unpack image %s: %w", ref, err)
	}
	// The image's files are the lower directory of every sandbox of it:
	// read-only to them through the overlay, and to everyone else here.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgTmp := filepath.Join(r.imagesDir(), tmpName(filepath.Base(dir)+".json"))
	if err := os.WriteFile(cfgTmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		_ = os.RemoveAll(tmp) // another process's unpack came first
	}
	// The configuration last: it marks the directory complete.
	if err := os.Rename(cfgTmp, dir+".json"); err != nil {
		_ = os.Remove(cfgTmp)
		return err
	}
	r.log.Info("image unpacked", "image", ref, "dir", dir, "took", time.Since(start))
	return nil
}

// exportIdle is how long an image's export may send nothing.
var exportIdle = 2 * time.Minute

// progressReader calls progress after each read that got bytes.
type progressReader struct {
	r        io.Reader
	progress func()
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}

// labelUnpack marks the containers unpackImage creates to export images.
const labelUnpack = runtime.LabelPrefix + "oci-unpack"

// tmpPrefix starts the names of directories not yet renamed into place.
const tmpPrefix = ".tmp-"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand contract)
	return hex.EncodeToString(b)
}

// sweepTmp removes what crashed unpacks and creates left under dir:
// entries named with tmpPrefix whose owner runs no more (tmpname.go), or
// older than age.
func sweepTmp(dir string, age time.Duration, remove func(path string) error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if fi, err := e.Info(); tmpOwnerGone(e.Name()) || (err == nil && time.Since(fi.ModTime()) > age) {
			_ = remove(filepath.Join(dir, e.Name()))
		}
	}
}

// sweepExports removes the export containers unpacks that crashed left
// in the engine (never started, labelled labelUnpack), older than tmpAge.
// Once per process, from ListOurs (the daemon's startup reconcile); best
// effort.
func (r *Runtime) sweepExports(ctx context.Context) {
	if r.images.swept.Swap(true) {
		return
	}
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelUnpack+"=1"),
	})
	if err != nil {
		r.images.swept.Store(false) // the engine did not answer: next time
		return
	}
	for _, c := range res.Items {
		if time.Since(time.Unix(c.Created, 0)) < tmpAge {
			continue
		}
		if _, err := r.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			r.log.Warn("remove a crashed unpack's export container", "container", c.ID, "err", err)
		}
	}
}
