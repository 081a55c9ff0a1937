package sandboxd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// UploadFile writes the bytes of r to path in a sandbox, creating or
// replacing the file. The body is streamed as it is read, never held in
// memory whole. Its length is sent when known — r is a regular *os.File,
// or has a Len() int method reporting the bytes left, as *bytes.Reader,
// *strings.Reader and *bytes.Buffer do — and the upload is chunked
// otherwise. UploadFile does not close r.
//
// An upload is not retried: r cannot be rewound. Repeat the call with a
// fresh reader to retry; writing the same bytes again is harmless.
func (c *Client) UploadFile(ctx context.Context, id, path string, r io.Reader) error {
	req := &request{
		method: http.MethodPut,
		segs:   []string{"v1", "sandboxes", id, "files"},
		query:  url.Values{"path": {path}},
		stream: r,
		size:   readerSize(r),
		retry:  retryNever,
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return fmt.Errorf("upload %s to sandbox %q: %w", path, id, err)
	}
	resp.Body.Close()
	return nil
}

// readerSize returns the number of bytes left in r when that is cheap to
// know, or -1.
func readerSize(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }: // bytes.Reader, strings.Reader, bytes.Buffer
		return int64(v.Len())
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return -1
		}
		return fi.Size() - off
	}
	return -1
}

// FileReader is the content of a file being downloaded. Close it when done.
type FileReader struct {
	io.ReadCloser
	// Size is the file's length in bytes, or -1 when the daemon did not
	// say.
	Size int64
}

// DownloadFile opens path in a sandbox for reading. The content streams
// from the daemon as it is read. The request is retried on transient
// failures until the answer starts; a connection lost afterwards shows up
// as an error from Read.
func (c *Client) DownloadFile(ctx context.Context, id, path string) (*FileReader, error) {
	req := &request{
		method: http.MethodGet,
		segs:   []string{"v1", "sandboxes", id, "files"},
		query:  url.Values{"path": {path}},
		header: http.Header{"Accept": {"application/octet-stream"}},
		retry:  retrySafe,
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("download %s from sandbox %q: %w", path, id, err)
	}
	return &FileReader{ReadCloser: resp.Body, Size: resp.ContentLength}, nil
}

// FileType is the kind of a directory entry.
type FileType string

// The kinds of directory entries.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
)

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Mode is the entry's mode as the daemon reports it (permission bits).
	Mode       uint32    `json:"mode"`
	ModifiedAt time.Time `json:"modified_at"`
}

// ListFiles returns the entries of the directory at path in a sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileEntry, error) {
	var out struct {
		Entries []FileEntry `json:"entries"`
	}
	req := &request{
		method: http.MethodGet,
		segs:   []string{"v1", "sandboxes", id, "files", "list"},
		query:  url.Values{"path": {path}},
		retry:  retrySafe,
	}
	if err := c.do(ctx, req, nil, &out); err != nil {
		return nil, fmt.Errorf("list %s in sandbox %q: %w", path, id, err)
	}
	return out.Entries, nil
}

// RemoveFile removes the file or directory at path in a sandbox. Removing
// a path that does not exist succeeds, so the call is retried on transient
// failures.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	req := &request{
		method: http.MethodDelete,
		segs:   []string{"v1", "sandboxes", id, "files"},
		query:  url.Values{"path": {path}},
		retry:  retrySafe,
	}
	if err := c.do(ctx, req, nil, nil); err != nil {
		return fmt.Errorf("remove %s in sandbox %q: %w", path, id, err)
	}
	return nil
}

// UploadArchive unpacks the tar stream r beneath the directory dir in a
// sandbox; dir and its parents are made when missing. Entries keep their
// names relative to dir, their permission bits (setuid and setgid are
// dropped) and symbolic links; owners are the sandbox user's. The daemon
// refuses (invalid_argument) an archive with an entry outside dir (an
// absolute name, ".."), one reached through a symbolic link, a hard link
// out, or a device node; past the sandbox's disk limit it is disk_full.
// The body streams as it is read; UploadArchive does not close r and, like
// UploadFile, is not retried (repeat it with a fresh reader: unpacking the
// same archive again writes the same tree).
func (c *Client) UploadArchive(ctx context.Context, id, dir string, r io.Reader) error {
	req := &request{
		method: http.MethodPut,
		segs:   []string{"v1", "sandboxes", id, "files", "archive"},
		query:  url.Values{"path": {dir}},
		header: http.Header{"Content-Type": {"application/x-tar"}},
		stream: r,
		size:   readerSize(r),
		retry:  retryNever,
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return fmt.Errorf("upload archive to %s in sandbox %q: %w", dir, id, err)
	}
	resp.Body.Close()
	return nil
}

// DownloadArchive opens path in a sandbox (a directory tree, a file or a
// symbolic link) as a tar stream whose entries are named under path's base
// name, as docker cp's archives are. No symbolic link below path is
// followed: links are archived as links. The request is retried on
// transient failures until the answer starts; a stream cut short by a
// failure afterwards is an error from Read, never a clean end.
func (c *Client) DownloadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	req := &request{
		method: http.MethodGet,
		segs:   []string{"v1", "sandboxes", id, "files", "archive"},
		query:  url.Values{"path": {path}},
		header: http.Header{"Accept": {"application/x-tar"}},
		retry:  retrySafe,
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("download archive of %s from sandbox %q: %w", path, id, err)
	}
	return resp.Body, nil
}
