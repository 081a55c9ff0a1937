package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// Stat describes one entry, not following a final symlink (whose target is
// in symlink_target). A missing path is not_found.
func (s *Service) Stat(_ context.Context, req *connect.Request[rpc.StatRequest]) (*connect.Response[rpc.StatResponse], error) {
	_, p, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	e, err := statEntry(p, s.users.Names())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its missing parents, all owned by the
// user. An existing directory is already_exists (of concurrent calls for
// one path exactly one succeeds); an existing non-directory is
// invalid_argument.
func (s *Service) MakeDir(_ context.Context, req *connect.Request[rpc.MakeDirRequest]) (*connect.Response[rpc.MakeDirResponse], error) {
	u, p, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := makeDir(u, p); err != nil {
		return nil, toConnect(err)
	}
	e, err := statEntry(p, s.users.Names())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.MakeDirResponse{Entry: e}), nil
}

func makeDir(u account.User, p string) error {
	if err := account.MkdirAll(u, filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		if fi, serr := os.Stat(p); serr == nil && !fi.IsDir() {
			return fmt.Errorf("%w: %s exists and is not a directory", ErrInvalid, p)
		}
		return fmt.Errorf("%w: directory %s", ErrExists, p)
	}
	return account.Chown(u, p)
}

// Move renames source to destination, creating destination's missing
// parents (owned by the user). An existing destination file is replaced, as
// rename(2) does; a non-empty destination directory is already_exists; a
// missing source not_found; a move across filesystems failed_precondition.
func (s *Service) Move(_ context.Context, req *connect.Request[rpc.MoveRequest]) (*connect.Response[rpc.MoveResponse], error) {
	u, src, err := s.target(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, toConnect(err)
	}
	dst, err := account.Resolve(u, req.Msg.GetDestination())
	if err != nil {
		return nil, toConnect(err)
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, toConnect(err)
	}
	if err := errors.Join(s.guard(src), s.guard(dst)); err != nil {
		return nil, toConnect(err)
	}
	if err := account.MkdirAll(u, filepath.Dir(dst), 0o755); err != nil {
		return nil, toConnect(err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, toConnect(err)
	}
	e, err := statEntry(dst, s.users.Names())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.MoveResponse{Entry: e}), nil
}

// ListDir lists a directory (a symlink to one is followed) down to depth
// levels: 0 and 1 mean direct children, 2 adds grandchildren, and so on.
// Symlinks below it are not followed. Entry paths are under the path as
// requested. A missing path is not_found, a non-directory invalid_argument.
// Entries that vanish during the walk are left out.
func (s *Service) ListDir(_ context.Context, req *connect.Request[rpc.ListDirRequest]) (*connect.Response[rpc.ListDirResponse], error) {
	_, p, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	entries, err := listDir(p, int(max(req.Msg.GetDepth(), 1)), s.users.Names())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.ListDirResponse{Entries: entries}), nil
}

func listDir(p string, depth int, names *account.Names) ([]*rpc.EntryInfo, error) {
	root, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrInvalid, p)
	}
	entries := []*rpc.EntryInfo{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if path == root {
			return err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		entries = append(entries, entryInfo(filepath.Join(p, rel), fi, names))
		if d.IsDir() && strings.Count(rel, string(filepath.Separator))+1 >= depth {
			return filepath.SkipDir // listed, not entered
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// Remove deletes a file, a symlink (not its target) or a directory tree. A
// path that does not exist is success, as in envd, so retries are safe.
// Removing "/" or a path that holds the agent's (Options.Protected) is
// invalid_argument.
func (s *Service) Remove(_ context.Context, req *connect.Request[rpc.RemoveRequest]) (*connect.Response[rpc.RemoveResponse], error) {
	_, p, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	if p == "/" {
		return nil, toConnect(fmt.Errorf("%w: refusing to remove /", ErrInvalid))
	}
	if err := s.guard(p); err != nil {
		return nil, toConnect(err)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.RemoveResponse{}), nil
}
