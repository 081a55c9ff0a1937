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
		if _, rerr := r.cli.ImageRemove(context.WithoutCancel(ctx), id, client.ImageRemoveOptions{}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			r.log.Warn("commit: remove an image left untagged", "image", id, "err", rerr)
		}
		return fail(engineErr(fmt.Errorf("tag: %w", err)))
	}
	ins, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return fail(engineErr(err))
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
		var werr error
		if flat {
			werr = writeLayer(cw, filepath.Join(r.sandboxDir(meta.ID), "rootfs"), "")
		} else {
			werr = writeLayer(cw, filepath.Join(r.rwDir(meta.ID), "upper"), meta.ImageDir)
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
func (r *Runtime) loadImage(ctx context.Context, base *baseImage, lyr *capturedLayer, cfg runtime.ImageConfig) (string, error) {
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
	res, err := r.cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", engineErr(fmt.Errorf("load: %w", err))
	}
	defer res.Close()
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
