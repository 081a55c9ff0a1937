package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/archive"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// uploadTree copies a local tree (or a tar on stdin) into a sandbox: the
// tree is archived as it is sent, never held whole. With docker cp's rule:
// an existing remote directory DST receives SRC under its own name, else
// DST is the copy (made, with its parents).
func (c *cli) uploadTree(ctx context.Context, cl *sandboxd.Client, from, to endpoint) (int64, error) {
	id, err := resolve(ctx, cl, to.ref)
	if err != nil {
		return 0, err
	}
	if from.stdio() { // a tar made by the caller, unpacked beneath DST
		cr := &progressReader{r: c.stdin, size: -1}
		err := cl.UploadArchive(ctx, id, to.path, cr)
		return cr.bytes(), err
	}
	if _, err := os.Lstat(from.path); err != nil {
		return 0, err
	}
	dir, name, err := remoteTarget(ctx, cl, id, to.path, from.path)
	if err != nil {
		return 0, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := archive.Write(pw, from.path, name, archive.WriteOptions{})
		pw.CloseWithError(err)
	}()
	cr := &progressReader{r: pr, size: -1}
	err = cl.UploadArchive(ctx, id, dir, cr)
	pr.CloseWithError(errors.New("upload ended")) // stops the archiver if the upload did
	return cr.bytes(), err
}

// remoteTarget says where a tree from src lands for a remote dst: the
// directory to unpack in and the name the tree gets there.
func remoteTarget(ctx context.Context, cl *sandboxd.Client, id, dst, src string) (dir, name string, err error) {
	_, err = cl.ListFiles(ctx, id, dst)
	switch {
	case err == nil: // an existing directory: inside it
		return dst, filepath.Base(filepath.Clean(src)), nil
	case errors.Is(err, sandboxd.ErrNotFound):
		trimmed := strings.TrimRight(dst, "/")
		if trimmed == "" || path.Base(trimmed) == ".." || path.Base(trimmed) == "." {
			return "", "", fmt.Errorf("%s: cannot name a copy so", dst)
		}
		parent := path.Dir(trimmed)
		if !strings.Contains(trimmed, "/") {
			parent = "~" // relative: under the user's home, as the file routes resolve it
		}
		return parent, path.Base(trimmed), nil
	default:
		return "", "", fmt.Errorf("%s: %w", dst, err)
	}
}

// downloadTree copies a tree out of a sandbox (or writes its tar to
// stdout). Everything the sandbox sends is checked as a hostile archive
// would be (package archive): nothing lands outside DST or goes through a
// link, and modes are cut by the umask, sticky bit included, as tar does
// for a user who is not root. An existing local directory DST receives the tree under its own
// name; otherwise the tree is unpacked in a temporary directory beside
// DST and renamed to DST once whole, so a failure leaves nothing.
func (c *cli) downloadTree(ctx context.Context, cl *sandboxd.Client, from, to endpoint) (n int64, err error) {
	id, err := resolve(ctx, cl, from.ref)
	if err != nil {
		return 0, err
	}
	rc, err := cl.DownloadArchive(ctx, id, from.path)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	cr := &progressReader{r: rc, size: -1}
	if to.stdio() {
		_, err = io.Copy(c.stdout, cr)
		return cr.bytes(), err
	}
	if fi, err := os.Stat(to.path); err == nil && fi.IsDir() {
		// Only the tree's own name may appear in DST: a sandbox that sent
		// a sibling (DST/.bashrc beside DST/app) is refused.
		root := remoteBase(from.path)
		if root == "" {
			return 0, fmt.Errorf("%s: name the directory (not ~ or .) to copy it into an existing directory", from)
		}
		_, err = archive.Extract(to.path, cr, archive.Limits{Root: root, Mask: archive.LocalMask()})
		return cr.bytes(), err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(to.path)), ".sbx-cp-*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if _, err = archive.Extract(tmp, cr, archive.Limits{Mask: archive.LocalMask()}); err != nil {
		return cr.bytes(), err
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return cr.bytes(), err
	}
	if len(ents) != 1 {
		return cr.bytes(), fmt.Errorf("the sandbox sent %d top-level entries, want one", len(ents))
	}
	if err := os.Rename(filepath.Join(tmp, ents[0].Name()), to.path); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, os.ErrExist) {
			return cr.bytes(), fmt.Errorf("%s exists and is not a directory", to.path)
		}
		return cr.bytes(), err
	}
	return cr.bytes(), nil
}

// remoteBase is the name the daemon gives the root of p's archive (its
// base name, "root" for /), or "" when only the sandbox knows it (~, .).
func remoteBase(p string) string {
	if strings.Trim(p, "/") == "" {
		return "root"
	}
	switch b := path.Base(strings.TrimRight(p, "/")); b {
	case ".", "..", "~":
		return ""
	default:
		return b
	}
}
