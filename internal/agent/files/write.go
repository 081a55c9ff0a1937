package files

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/account"
)

// copyBufferSize bounds the memory one upload uses.
const copyBufferSize = 64 << 10

// newFileMode is what a new file gets: envd's 0666 less the usual umask.
const newFileMode = 0o644

// writeFile writes src to path as u: missing parents are created and owned
// by u, the content goes to a temporary file in the same directory that is
// then renamed over path, and the file is owned by u. An existing file keeps
// its permission bits; a symlink at path is written through to its target.
// On failure the temporary file is removed and path is untouched. Errors
// reading src are *bodyError.
func writeFile(u account.User, path string, src io.Reader) (err error) {
	path, mode, err := destination(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := account.MkdirAll(u, dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".upload-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.CopyBuffer(onlyWriter{tmp}, bodyReader{src}, make([]byte, copyBufferSize)); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Chown(int(u.UID), int(u.GID)); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// destination returns the file to replace (path, or the target of a symlink
// at path) and the mode the new content gets. A directory is EISDIR.
func destination(path string) (string, fs.FileMode, error) {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path, newFileMode, nil
	case err != nil:
		return "", 0, err
	case fi.IsDir():
		return "", 0, &fs.PathError{Op: "write", Path: path, Err: syscall.EISDIR}
	default:
		return path, fi.Mode().Perm(), nil
	}
}

// bodyReader tags read errors as the client's, so a dropped connection is a
// 400 and a full disk a 507.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyError{err}
	}
	return n, err
}

// onlyWriter hides *os.File's ReadFrom so io.CopyBuffer uses our buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
