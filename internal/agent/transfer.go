package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Upload writes the content of r to path inside the sandbox, as user (root
// when empty), through POST /files with a raw octet-stream body: nothing is
// buffered, whatever the size. Missing parent directories are created.
//
// When r has a Len() int method (the bytes left, as *bytes.Reader has) the
// request carries that Content-Length instead of being chunked, which lets
// the agent splice the body from the socket into the file.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, user string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, filesURL(path, user), r)
	if err != nil {
		return err
	}
	if l, ok := r.(interface{ Len() int }); ok && req.ContentLength == 0 {
		if req.ContentLength = int64(l.Len()); req.ContentLength == 0 {
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent: upload %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent: upload %s: %w", path, httpError(resp))
	}
	// The answer is a short JSON list of what was written; read it to the
	// end so that the connection is reused, but never more than that.
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return fmt.Errorf("agent: upload %s: read answer: %w", path, err)
	}
	if n > maxReplyBytes {
		return fmt.Errorf("agent: upload %s: %w", path, ErrReplyTooLarge)
	}
	return nil
}

// Download streams the file at path inside the sandbox, read as user (root
// when empty). The caller closes the reader. A missing file is an error for
// which errors.Is(err, fs.ErrNotExist) holds.
func (c *Client) Download(ctx context.Context, path, user string) (io.ReadCloser, error) {
	rc, _, err := c.DownloadSized(ctx, path, user)
	return rc, err
}

// DownloadSized is Download that also returns the length the agent
// declared, or -1 when it streams without one (a kernel file whose stat
// size is not its length).
func (c *Client) DownloadSized(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesURL(path, user), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("agent: download %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, 0, fmt.Errorf("agent: download %s: %w", path, httpError(resp))
	}
	return resp.Body, resp.ContentLength, nil
}

func filesURL(path, user string) string {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return baseURL + "/files?" + q.Encode()
}

// pathArchive is the agent's route for directory trees as tar streams
// (files.PathArchive).
const pathArchive = "/sandboxd/archive"

// UploadArchive unpacks the tar stream r beneath dir inside the sandbox,
// as user (root when empty); dir and its parents are made when missing.
// Nothing is buffered. A hostile entry (a path out of dir, through a
// symbolic link, a device) is an *HTTPError 400; a full disk 507.
func (c *Client) UploadArchive(ctx context.Context, dir string, r io.Reader, user string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, archiveURL(dir, "", user), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent: upload archive %s: %w", dir, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent: upload archive %s: %w", dir, httpError(resp))
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxReplyBytes)); err != nil {
		return fmt.Errorf("agent: upload archive %s: read answer: %w", dir, err)
	}
	return nil
}

// DownloadArchive streams path inside the sandbox (a directory tree, a
// file or a symbolic link, never followed below path) as a tar whose
// entries are named under name (path's base name when empty), read as
// user. The caller closes the reader; a stream cut short by a failure in
// the sandbox ends in an error, never in a clean end of the archive.
func (c *Client) DownloadArchive(ctx context.Context, path, name, user string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, archiveURL(path, name, user), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent: download archive %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("agent: download archive %s: %w", path, httpError(resp))
	}
	return resp.Body, nil
}

func archiveURL(path, name, user string) string {
	q := url.Values{"path": {path}}
	if name != "" {
		q.Set("name", name)
	}
	if user != "" {
		q.Set("username", user)
	}
	return baseURL + pathArchive + "?" + q.Encode()
}
