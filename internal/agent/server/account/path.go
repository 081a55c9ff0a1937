package account

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Resolve turns p, as a request for u names it, into an absolute clean path:
// "" and "~" are u's home, "~/x" and relative paths are under u's home,
// absolute paths stay as they are. "~name" is not expanded (it is a relative
// path). A NUL byte anywhere is [ErrInvalid]: the kernel would truncate the
// path there. Resolve does not touch the filesystem and does not confine the
// path to the home directory; the sandbox is the boundary.
func Resolve(u User, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: path contains a NUL byte", ErrInvalid)
	}
	switch {
	case p == "~":
		p = ""
	case strings.HasPrefix(p, "~/"):
		p = p[2:]
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	home := u.Home
	if home == "" {
		home = "/"
	}
	return filepath.Join(home, p), nil
}
