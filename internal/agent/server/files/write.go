package files

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filemeta"
)

// copyBufferSize bounds the memory one upload uses.
const copyBufferSize = 64 << 10

// newFileMode is what a new file gets: envd's 0666 less the usual umask.
const newFileMode = 0o644

// writeFile writes src to path as u: missing parents are created and owned
// by u, the file is created (or truncated) and written in place, and owned
// by u. An existing file keeps its permission bits; a symlink at path is
// written through to its target. The file's metadata becomes meta, none
// kept from before (filemeta.Replace). Errors reading src are *bodyError.
//
// Writing in place, as envd does, is what file watchers expect to see: a
// create and a write of path. (A temporary file renamed over path would be
// atomic, but watchers would see only a create of path, and clients that
// wait for the write event — the E2B SDK's watchDir — would never see it.)
// The cost: a failed upload that was replacing a file leaves it truncated
// or partial; a failed upload of a new file removes it, leaving nothing.
func writeFile(u account.User, path string, src io.Reader, meta map[string]string) (err error) {
	path, mode, existed, err := destination(path)
	if err != nil {
		return err
	}
	if err := account.MkdirAll(u, filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			if !existed {
				os.Remove(path)
			}
		}
	}()
	if !existed {
		// Ownership and mode before the content, so the file is never
		// readable with the wrong owner.
		if err := f.Chmod(mode); err != nil {
			return err
		}
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			return err
		}
	}
	if cb, ok := src.(*connBody); ok { // spliced from the socket (splice.go)
		if err := cb.writeTo(f, make([]byte, copyBufferSize)); err != nil {
			return err
		}
	} else if _, err := io.CopyBuffer(onlyWriter{f}, bodyReader{src}, make([]byte, copyBufferSize)); err != nil {
		return err
	}
	if err := filemeta.Replace(f, meta); err != nil {
		return err
	}
	return f.Close()
}

// destination returns the file to write (path, or the target of a symlink
// at path), the mode new content gets, and whether the file exists. A
// directory is EISDIR; anything else but a plain file is refused (see
// writableTarget).
func destination(path string) (string, fs.FileMode, bool, error) {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path, newFileMode, false, nil
	case err != nil:
		return "", 0, false, err
	case fi.IsDir():
		return "", 0, false, &fs.PathError{Op: "write", Path: path, Err: syscall.EISDIR}
	}
	if err := writableTarget(path, fi); err != nil {
		return "", 0, false, err
	}
	return path, fi.Mode().Perm(), true, nil
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
