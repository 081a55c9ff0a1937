package filesystem

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// cleanAll returns the absolute, symlink-free forms of paths.
func cleanAll(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if p == "" {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

// systemRoots are the kernel's and the engine's trees in every sandbox:
// device nodes (/dev/null is every process's stdin: removing it breaks
// each later exec until the sandbox restarts), and the kernel file systems.
// Nothing in them is the user's to remove or rename; the exception is
// /dev/shm's content (sharedMemory), a tmpfs for the user's files.
var systemRoots = []string{"/dev", "/proc", "/sys"}

// sharedMemory is the one directory under /dev whose entries are the
// user's (POSIX shared memory, semaphores).
const sharedMemory = "/dev/shm"

// guard refuses p when removing or renaming it (or renaming something onto
// it) would take what the sandbox itself needs with it. It is the one rule
// for Remove and Move, which the daemon's REST files API and the facades'
// deletes all reach. Refused: an agent path (Options.Protected: its socket
// directory, its binary) or a system root (systemRoots) that p is, lies
// under or contains, but for the entries of /dev/shm, and any character or
// block device node wherever it is. p's parent is resolved first, so a
// symlink to a protected directory does not get past (p itself is not:
// removing a symlink leaves its target).
func (s *Service) guard(p string) error {
	real := p
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		real = filepath.Join(dir, filepath.Base(p))
	}
	for _, prot := range s.protected {
		if within(real, prot) || within(prot, real) {
			return fmt.Errorf("%w: %s is or holds the agent's %s", ErrInvalid, p, prot)
		}
	}
	for _, root := range systemRoots {
		if within(real, sharedMemory) && real != sharedMemory {
			break
		}
		if within(real, root) || within(root, real) {
			return fmt.Errorf("%w: %s is or holds the system's %s", ErrInvalid, p, root)
		}
	}
	if fi, err := os.Lstat(real); err == nil && fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
		return fmt.Errorf("%w: %s is a device node", ErrInvalid, p)
	}
	return nil
}

// within reports whether clean absolute path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
