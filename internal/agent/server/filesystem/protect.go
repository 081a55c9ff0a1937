package filesystem

import (
	"fmt"
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

// guard refuses p when removing or renaming it would take an agent path
// with it: p is one, lies under one, or contains one. p's parent is
// resolved first, so a symlink to the socket directory does not get past
// (p itself is not: removing a symlink leaves its target).
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
	return nil
}

// within reports whether clean absolute path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
