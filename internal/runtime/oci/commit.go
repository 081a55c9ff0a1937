package oci

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Commit captures a sandbox's file system as an image in the engine
// (templates, snapshots and forks, runtime.Images.Commit): a tar of its
// root file system as the host sees the overlay (the image and what the
// sandbox wrote; not the bind mounts: the agent, its socket directory,
// volumes, which live in the sandbox's mount namespace only), imported
// with `docker import` and cfg as the image's whole configuration (the
// sandbox's env, labels and entrypoint are not the image's). A running
// sandbox is frozen for the capture. One layer: each commit holds the
// whole file system, not a layer over its image.
func (r *Runtime) Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (_ runtime.Image, err error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Image{}, err
	}
	changes, err := importChanges(cfg)
	if err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s: %w", sandboxID, err)
	}
	meta, unlock, err := r.lockedMeta(sandboxID, "commit")
	if err != nil {
		return runtime.Image{}, err
	}
	defer unlock()
	if err := r.mountRootfs(sandboxID, meta.ImageDir); err != nil {
		return runtime.Image{}, fmt.Errorf("commit sandbox %s: %w", sandboxID, err)
	}
	if st := r.status(sandboxID); st.State == runtime.StateRunning && !st.Paused {
		if err := r.ociRun(ctx, meta, "pause", sandboxID); err != nil {
			return runtime.Image{}, fmt.Errorf("commit sandbox %s: freeze: %w", sandboxID, err)
		}
		defer func() {
			if rerr := r.ociRun(context.WithoutCancel(ctx), meta, "resume", sandboxID); rerr != nil {
				err = errors.Join(err, fmt.Errorf("thaw: %w", rerr))
			}
		}()
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarTree(pw, filepath.Join(r.sandboxDir(sandboxID), "rootfs"))) }()
	defer pr.Close()
	res, err := r.cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref, client.ImageImportOptions{Changes: changes})
	if err != nil {
		return runtime.Image{}, engineErr(fmt.Errorf("commit sandbox %s as %s: import: %w", sandboxID, ref, err))
	}
	defer res.Close()
	// The answer is a stream of JSON messages; an error is one of them.
	dec := json.NewDecoder(res)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return runtime.Image{}, engineErr(fmt.Errorf("commit sandbox %s as %s: import: %w", sandboxID, ref, err))
		}
		if m.Error != "" {
			return runtime.Image{}, fmt.Errorf("commit sandbox %s as %s: import: %s", sandboxID, ref, m.Error)
		}
	}
	ins, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return runtime.Image{}, engineErr(fmt.Errorf("commit sandbox %s as %s: %w", sandboxID, ref, err))
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

// importChanges says cfg as the Dockerfile instructions `docker import`
// applies. A value the instructions cannot carry (a line break) is
// refused.
func importChanges(cfg runtime.ImageConfig) ([]string, error) {
	var out []string
	quote := func(s string) (string, error) {
		if strings.ContainsAny(s, "\n\r") {
			return "", fmt.Errorf("%w: a line break in an image setting cannot be committed by this runtime", runtime.ErrInvalidSpec)
		}
		r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
		return `"` + r.Replace(s) + `"`, nil
	}
	for _, kv := range cfg.Env {
		k, v, _ := strings.Cut(kv, "=")
		// The key goes unquoted (a hostile base image's own env):
		// nothing that ends the instruction or the word.
		if k == "" || strings.ContainsAny(k, "\n\r\t \"'\\$") {
			return nil, fmt.Errorf("%w: env key %q cannot be committed by this runtime", runtime.ErrInvalidSpec, k)
		}
		q, err := quote(v)
		if err != nil {
			return nil, err
		}
		out = append(out, "ENV "+k+"="+q)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Labels)) {
		qk, err := quote(k)
		if err != nil {
			return nil, err
		}
		qv, err := quote(cfg.Labels[k])
		if err != nil {
			return nil, err
		}
		out = append(out, "LABEL "+qk+"="+qv)
	}
	for name, v := range map[string][]string{"CMD": cfg.Cmd, "ENTRYPOINT": cfg.Entrypoint} {
		if v == nil {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(string(b), "\n\r") {
			return nil, fmt.Errorf("%w: a line break in an image setting", runtime.ErrInvalidSpec)
		}
		out = append(out, name+" "+string(b))
	}
	for name, v := range map[string]string{"WORKDIR": cfg.WorkingDir, "USER": cfg.User} {
		if v == "" {
			continue
		}
		if strings.ContainsAny(v, "\n\r") {
			return nil, fmt.Errorf("%w: a line break in an image setting", runtime.ErrInvalidSpec)
		}
		out = append(out, name+" "+v)
	}
	slices.Sort(out)
	return out, nil
}

// tarTree writes the tree at root as a tar stream: owners, modes, times,
// symlinks, hard links as links, fifos; nothing followed out of root.
func tarTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // a socket or device: not part of an image
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			hdr.Uname, hdr.Gname = "", ""
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = rel
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
