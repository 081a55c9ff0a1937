package service

import (
	"context"
	"io"
	"path"
	"strings"
)

// UploadArchive unpacks the tar stream r beneath the directory dir inside
// a running sandbox (dir and its parents made when missing), as user,
// streamed through to the agent: nothing is buffered here. The agent
// refuses hostile entries (package archive): a path out of dir, through a
// symbolic link, a device node; setuid bits are dropped. Repeating it
// writes the same tree. A failure part way leaves what was unpacked so far.
func (s *Service) UploadArchive(ctx context.Context, c Caller, idOrName, dir, user string, r io.Reader) error {
	if err := validPath(dir); err != nil {
		return err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return err
	}
	return agentErr(ac.UploadArchive(ctx, dir, r, user))
}

// DownloadArchive streams p (a directory tree, a file or a symbolic link)
// out of a running sandbox as a tar whose entries are named under p's base
// name; no symbolic link below p is followed. The caller closes the reader.
func (s *Service) DownloadArchive(ctx context.Context, c Caller, idOrName, p, user string) (io.ReadCloser, error) {
	if err := validPath(p); err != nil {
		return nil, err
	}
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	rc, err := ac.DownloadArchive(ctx, p, archiveName(p), user)
	if err != nil {
		return nil, agentErr(err)
	}
	return rc, nil
}

// archiveName is the root name of p's archive: its base name, "root" for /.
func archiveName(p string) string {
	b := path.Base(strings.TrimRight(p, "/"))
	if b == "" || b == "/" || b == "." || b == ".." || b == "~" {
		return ""
	}
	return b
}
