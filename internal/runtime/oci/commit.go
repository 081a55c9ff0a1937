package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Commit captures a sandbox's file system as an image in the engine
// (templates, snapshots and forks, runtime.Images.Commit), as the engine
// commits a container: the sandbox's image's layers and one layer more,
// what the sandbox wrote (its overlay's upper directory, layer.go), with
// cfg as the image's whole configuration (the sandbox's env, labels and
// entrypoint are not the image's). Not the bind mounts (the agent, its
// socket directory, volumes, which live in the sandbox's mount namespace
// only), nor the /etc files the runtime writes.
//
// The layer is written to an unlinked temporary file while the sandbox is
// frozen (a running one) and under its lock; then the sandbox runs on and
// the image is handed to the engine with `docker load` of an archive that
// lists the base image's layers and carries only the new one: the engine
// loads no layer whose chain it has (moby's image/tarexport/load.go), so
// a commit moves what the sandbox wrote, not its whole file system, and
// the image shares the base's layers on disk and in a registry.
//
// A sandbox whose image the engine no longer has (removed since the
// create), or an overlay the layer cannot be read from (redirected
// directories, metadata-only copies), is captured as before: one layer,
// the whole file system as the sandbox sees it.
func (r *Runtime) Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (_ runtime.Image, err error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Image{}, err
	}
	// The caller may pass a context that never ends (the service's
	// capture outlives its request): a commit's time is bounded here.
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	fail := func(err error) (runtime.Image, error) {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s as %s: %w", sandboxID, ref, err)
	}
	meta, unlock, err := r.lockedMeta(sandboxID, "commit")
	if err != nil {
		return runtime.Image{}, err
	}
	var unlockOnce sync.Once
	release := func() { unlockOnce.Do(unlock) }
	defer release()
	base, err := r.commitBase(ctx, meta)
	if err != nil {
		return fail(err)
	}
	lyr, err := r.captureLayer(ctx, meta, base)
	if err != nil {
		return fail(err)
	}
	defer lyr.file.Close()
	// The layer is ours now: the sandbox may stop, start or go.
	release()
	if base != nil && lyr.flat {
		base = nil
	}
	id, err := r.loadImage(ctx, base, lyr, cfg)
	if err != nil {
		if base != nil {
			if _, ierr := r.cli.ImageInspect(ctx, base.id); cerrdefs.IsNotFound(ierr) {
				// Removed from the engine since the capture: a retry
				// captures the whole file system.
				return fail(fmt.Errorf("%w: the sandbox's image was removed from the engine during the commit; retry", runtime.ErrUnavailable))
			}
		}
		return fail(err)
	}
	if _, err := r.cli.ImageTag(ctx, client.ImageTagOptions{Source: id, Target: ref}); err != nil {
		r.removeLoaded(ctx, id)
		return fail(engineErr(fmt.Errorf("tag: %w", err)))
	}
	if err := r.step("commit-tagged"); err != nil {
		return fail(err)
	}
	// Inspected by its id, not by ref: another commit to ref at once
	// may have tagged its own image since.
	ins, err := r.cli.ImageInspect(ctx, id)
	if err != nil {
		return fail(engineErr(err))
	}
	if ins.ID != id {
		return fail(fmt.Errorf("the engine answers for %s with image %s", id, ins.ID))
	}
	if !hasRef(ins.RepoTags, ref) {
		// Another commit to ref tagged its image after this one did:
		// this image is nobody's now.
		r.removeLoaded(ctx, id)
		return fail(fmt.Errorf("%w: another commit to %s tagged its image at the same time; retry", runtime.ErrUnavailable, ref))
	}
	img := runtime.Image{ID: ins.ID, Refs: slices.Concat(ins.RepoTags, ins.RepoDigests)}
	if ins.Size > 0 {
		img.Size = ins.Size
	}
	if c := ins.Config; c != nil {
		img.Config = runtime.ImageConfig{Env: c.Env, Cmd: c.Cmd, Entrypoint: c.Entrypoint, WorkingDir: c.WorkingDir, User: c.User, Labels: c.Labels}
	}
	return img, nil
}

// Commit's bounds. A commit's layer is written while the sandbox is
// frozen and locked, so the capture's time is bounded (a file system too
// large or too slow to read in it is refused, and the sandbox runs on),
// and so is the whole commit's (the load into the engine).
const (
	captureTimeout = 10 * time.Minute
	commitTimeout  = 30 * time.Minute
	// maxLayerBytes bounds a layer where the sandbox's disk has no limit
	// (or the commit takes its whole file system, the image's files too).
	maxLayerBytes = 16 << 30
	// layerSlack is what a layer may hold beyond its sandbox's disk
	// limit: tar headers, and what the quota does not count.
	layerSlack = 64 << 20
	// layerReserve is the free space a layer leaves on the runtime's file
	// system (other sandboxes write there too); layerFreeEvery is how
	// much is written between two looks at it.
	layerReserve   = 256 << 20
	layerFreeEvery = 64 << 20
)

// layerBound is the largest layer a commit of the sandbox writes: its
// disk limit and some slack when the kernel enforces one (what it wrote
// cannot be more, sparse files aside), maxLayerBytes otherwise.
func (r *Runtime) layerBound(meta *sandboxMeta, flat bool) int64 {
	if flat || !r.disk.enforced || meta.DiskMB <= 0 || meta.DiskMB > (maxLayerBytes-layerSlack)>>20 {
		return maxLayerBytes
	}
	return meta.DiskMB<<20 + layerSlack
}

// layerFree returns layerLimits.free for a layer written to f: an error
// (runtime.ErrNoSpace) when f's file system would have less than
// layerReserve free after need bytes more; it looks at the file system
// before the first file and then every layerFreeEvery bytes.
func layerFree(f *os.File) func(need int64) error {
	var since int64 = layerFreeEvery
	return func(need int64) error {
		if since += need; since < layerFreeEvery {
			return nil
		}
		since = 0
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
			return fmt.Errorf("statfs the layer's file system: %w", err)
		}
		free := int64(st.Bavail) * st.Bsize
		if free-need < layerReserve {
			return fmt.Errorf("%w: the runtime's file system has %d MiB free; the sandbox's layer needs %d MiB more and leaves %d MiB", runtime.ErrNoSpace, free>>20, need>>20, layerReserve>>20)
		}
		return nil
	}
}

// hasRef reports whether tags (an image's RepoTags, as the engine says
// them) hold ref.
func hasRef(tags []string, ref string) bool {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return slices.Contains(tags, ref)
	}
	want := reference.FamiliarString(reference.TagNameOnly(named))
	for _, t := range tags {
		if n, err := reference.ParseNormalizedNamed(t); err == nil && reference.FamiliarString(reference.TagNameOnly(n)) == want {
			return true
		}
	}
	return false
}

// removeLoaded removes the image id a commit loaded and gives up on (not
// found: it is gone already).
func (r *Runtime) removeLoaded(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := r.cli.ImageRemove(ctx, id, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		r.log.Warn("commit: remove an image left untagged", "image", id, "err", err)
	}
}

// commitBase is the image a commit of the sandbox goes over: the one its
// lower directory was unpacked from (named by the image's id), as the
// engine has it. nil when the engine has it no more.
func (r *Runtime) commitBase(ctx context.Context, meta *sandboxMeta) (*baseImage, error) {
	hexID := filepath.Base(meta.ImageDir)
	if len(hexID) != 64 || strings.Trim(hexID, "0123456789abcdef") != "" {
		return nil, nil // not an image's id: capture the whole file system
	}
	ins, err := r.cli.ImageInspect(ctx, "sha256:"+hexID)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, engineErr(fmt.Errorf("inspect the sandbox's image: %w", err))
	}
	if ins.RootFS.Type != "layers" || len(ins.RootFS.Layers) == 0 {
		return nil, nil
	}
	b := &baseImage{id: "sha256:" + hexID, diffIDs: ins.RootFS.Layers, os: ins.Os, arch: ins.Architecture, variant: ins.Variant}
	for _, d := range b.diffIDs {
		if _, err := digestHex(d); err != nil {
			return nil, nil
		}
	}
	return b, nil
}

// baseImage is what a layered commit takes of the sandbox's image.
type baseImage struct {
	id                string
	diffIDs           []string // "sha256:…", bottom first
	os, arch, variant string
}

// capturedLayer is a layer's tar in an unlinked file, with its digest.
type capturedLayer struct {
	file   *os.File
	size   int64
	diffID string // "sha256:…" of the uncompressed tar
	flat   bool   // the whole file system, not a layer over the image
}

// captureLayer writes the sandbox's layer (over base; with base nil, or
// an upper directory the layer cannot be read from, its whole file
// system) to a new unlinked file, the sandbox frozen meanwhile if it runs.
func (r *Runtime) captureLayer(ctx context.Context, meta *sandboxMeta, base *baseImage) (_ *capturedLayer, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, captureTimeout, fmt.Errorf("%w: the sandbox's file system took longer than %v to capture; it cannot be committed", runtime.ErrInvalidSpec, captureTimeout))
	defer cancel()
	if err := r.mountRootfs(meta.ID, meta.ImageDir); err != nil {
		return nil, err
	}
	f, err := r.layerFile()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if st := r.status(meta.ID); st.State == runtime.StateRunning && !st.Paused {
		if err := r.ociRun(ctx, meta, "pause", meta.ID); err != nil {
			return nil, fmt.Errorf("freeze: %w", err)
		}
		defer func() {
			if rerr := r.ociRun(context.WithoutCancel(ctx), meta, "resume", meta.ID); rerr != nil {
				err = errors.Join(err, fmt.Errorf("thaw: %w", rerr))
			}
		}()
	}
	write := func(flat bool) (*capturedLayer, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		h := sha256.New()
		cw := &countWriter{w: io.MultiWriter(f, h)}
		lim := layerLimits{maxBytes: r.layerBound(meta, flat), free: layerFree(f), tick: func() error { return r.step("commit-walk") }}
		var werr error
		if flat {
			werr = writeLayer(ctx, cw, filepath.Join(r.sandboxDir(meta.ID), "rootfs"), "", lim)
		} else {
			werr = writeLayer(ctx, cw, filepath.Join(r.rwDir(meta.ID), "upper"), meta.ImageDir, lim)
		}
		if werr != nil {
			return nil, werr
		}
		return &capturedLayer{file: f, size: cw.n, diffID: "sha256:" + hex.EncodeToString(h.Sum(nil)), flat: flat}, nil
	}
	if base != nil {
		l, err := write(false)
		if !errors.Is(err, errLayerUnreadable) {
			return l, noSpace(err)
		}
		r.log.Info("commit: the overlay's upper directory is not a layer; the whole file system is captured", "sandbox", meta.ID, "err", err)
	}
	l, err := write(true)
	return l, noSpace(err)
}

// layerFile is a new file for a layer, unlinked (nothing to sweep after a
// crash), on the runtime's file system (not the sandbox's: its disk limit
// must not stop its own commit).
func (r *Runtime) layerFile() (*os.File, error) {
	if err := os.MkdirAll(r.imagesDir(), 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Open(r.imagesDir(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), "layer"), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) {
		return nil, noSpace(fmt.Errorf("a file for the layer: %w", err))
	}
	p := filepath.Join(r.imagesDir(), tmpName("layer"))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, noSpace(fmt.Errorf("a file for the layer: %w", err))
	}
	_ = os.Remove(p)
	return f, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// imageJSON is an image's configuration as the engine loads it (the OCI
// image specification's config, which docker load reads): cfg, and the
// layers' diff ids.
type imageJSON struct {
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Variant      string         `json:"variant,omitempty"`
	Created      time.Time      `json:"created"`
	Config       imageJSONCfg   `json:"config"`
	RootFS       imageJSONLayer `json:"rootfs"`
	History      []imageHistory `json:"history"`
}

type imageJSONCfg struct {
	Env        []string          `json:"Env,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	User       string            `json:"User,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type imageJSONLayer struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type imageHistory struct {
	Created    time.Time `json:"created"`
	CreatedBy  string    `json:"created_by,omitempty"`
	EmptyLayer bool      `json:"empty_layer,omitempty"`
}

// loadImage hands the engine, with `docker load`, an archive of one image:
// base's layers (listed, not carried: the engine has them) and lyr, with
// cfg as its configuration. It returns the image's id ("sha256:…"),
// untagged.
func (r *Runtime) loadImage(ctx context.Context, base *baseImage, lyr *capturedLayer, cfg runtime.ImageConfig) (_ string, err error) {
	now := time.Now().UTC()
	cj := imageJSON{
		Architecture: goruntime.GOARCH, OS: "linux", Created: now,
		Config: imageJSONCfg{Env: cfg.Env, Cmd: cfg.Cmd, Entrypoint: cfg.Entrypoint, WorkingDir: cfg.WorkingDir, User: cfg.User, Labels: cfg.Labels},
		RootFS: imageJSONLayer{Type: "layers"},
	}
	if base != nil {
		cj.RootFS.DiffIDs = slices.Clone(base.diffIDs)
		if base.arch != "" {
			cj.Architecture, cj.Variant = base.arch, base.variant
		}
		if base.os != "" {
			cj.OS = base.os
		}
	}
	cj.RootFS.DiffIDs = append(cj.RootFS.DiffIDs, lyr.diffID)
	// The history describes the layer this commit made (history entries
	// are optional; the base's are the base image's own).
	cj.History = []imageHistory{{Created: now, CreatedBy: "sandboxd commit"}}
	config, err := json.Marshal(cj)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(config)
	id := hex.EncodeToString(sum[:])
	layers := make([]string, len(cj.RootFS.DiffIDs))
	for i, d := range cj.RootFS.DiffIDs {
		h, _ := digestHex(d)
		layers[i] = h + "/layer.tar"
	}
	manifest, err := json.Marshal([]struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: id + ".json", RepoTags: []string{}, Layers: layers}})
	if err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := func() error {
			// The new layer only: the engine skips the base's.
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: layers[len(layers)-1], Mode: 0o644, Size: lyr.size, ModTime: now}); err != nil {
				return err
			}
			if _, err := io.Copy(tw, io.NewSectionReader(lyr.file, 0, lyr.size)); err != nil {
				return err
			}
			for _, f := range []struct {
				name string
				b    []byte
			}{{id + ".json", config}, {"manifest.json", manifest}} {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.b)), ModTime: now}); err != nil {
					return err
				}
				if _, err := tw.Write(f.b); err != nil {
					return err
				}
			}
			return tw.Close()
		}()
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	// From here the engine may have registered the image whatever the
	// answer says: an error removes it (not found: it did not).
	defer func() {
		if err != nil {
			r.removeLoaded(ctx, "sha256:"+id)
		}
	}()
	res, err := r.cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", engineErr(fmt.Errorf("load: %w", err))
	}
	defer res.Close()
	if err := r.step("commit-load-answer"); err != nil {
		return "", err
	}
	// The answer is a stream of JSON messages; an error is one of them.
	dec := json.NewDecoder(io.LimitReader(res, 1<<20))
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", engineErr(fmt.Errorf("load: %w", err))
		}
		if m.Error != "" {
			return "", noSpaceText(fmt.Errorf("load: the engine refused the image: %s", engineMessage(m.Error)), m.Error)
		}
	}
	return "sha256:" + id, nil
}

// digestHex is the hex part of a sha256 digest ("sha256:<64 hex>").
func digestHex(d string) (string, error) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("not a sha256 digest: %.80q", d)
	}
	return h, nil
}

// hostPathRE matches what looks like an absolute path in a message.
var hostPathRE = regexp.MustCompile(`(^|[\s"'(=])/[^\s"')]*`)

// engineMessage is an error message of the engine as a commit's error
// says it: bounded, and without the engine's host paths.
func engineMessage(s string) string {
	s = hostPathRE.ReplaceAllString(s, "$1<path>")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// noSpaceText marks err runtime.ErrNoSpace when the engine's message says
// its disk is full.
func noSpaceText(err error, msg string) error {
	if strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded") {
		return fmt.Errorf("%w: %w", runtime.ErrNoSpace, err)
	}
	return err
}
