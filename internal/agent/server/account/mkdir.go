package account

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MkdirAll creates dir and any missing parents with mode perm (before umask)
// and gives every directory it created to u. Directories that already exist
// keep their owner. A path component that exists and is not a directory
// fails with [syscall.ENOTDIR]. Not atomic: a failure part
// way leaves the directories created so far, owned by u.
func MkdirAll(u User, dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, perm); err != nil {
			if errors.Is(err, fs.ErrExist) { // lost a race with another creator: theirs now
				continue
			}
			return err
		}
		if err := Chown(u, d); err != nil {
			return err
		}
	}
	return nil
}

// Chown gives path (not a symlink's target) to u. Running as u itself, or as
// root, it always succeeds on an existing path; as another unprivileged user
// it fails with EPERM, which callers report as permission denied.
func Chown(u User, path string) error {
	return os.Lchown(path, int(u.UID), int(u.GID))
}
