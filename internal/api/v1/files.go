package v1

import (
	"io"
	"mime"
	"net/http"
	"strconv"
)

// fileUser is the user file routes act as: "" is the agent's default
// (root). The wire has no user parameter for files yet.
const fileUser = ""

// uploadFile streams the raw request body to ?path= in the sandbox: no size
// cap beyond the sandbox's disk, no buffering of the whole file. 204.
func (s *server) uploadFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	var body io.Reader = r.Body
	if r.ContentLength >= 0 { // the agent gets the length too, not a chunked body
		body = &sizedBody{r: r.Body, left: r.ContentLength}
	}
	if err := s.svc.Upload(r.Context(), caller(r), r.PathValue("id"), p, fileUser, body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// downloadFile streams ?path= from the sandbox, with Content-Length when
// the size is known. An error after the first byte can only cut the
// response short (the status is out); the client sees a short body.
func (s *server) downloadFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	rc, size, err := s.svc.Download(r.Context(), caller(r), r.PathValue("id"), p, fileUser)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.WarnContext(r.Context(), "download cut short", "request_id", requestID(r), "err", err)
	}
	return nil
}

// listFiles answers the entries of the directory ?path=.
func (s *server) listFiles(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	entries, err := s.svc.ListFiles(r.Context(), caller(r), r.PathValue("id"), p, fileUser)
	if err != nil {
		return err
	}
	out := struct {
		Entries []fileEntryJSON `json:"entries"`
	}{Entries: make([]fileEntryJSON, len(entries))}
	for i, e := range entries {
		out.Entries[i] = fileEntryJSON{
			Name:       e.Name,
			Path:       e.Path,
			Type:       e.Type,
			Size:       e.Size,
			Mode:       e.Mode & 0o777,
			ModifiedAt: e.ModifiedAt.UTC(),
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// removeFile removes ?path= (recursively): 204, also when it was already
// absent, so a retried DELETE succeeds.
func (s *server) removeFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	if err := s.svc.RemoveFile(r.Context(), caller(r), r.PathValue("id"), p, fileUser); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// uploadArchive unpacks the tar body (Content-Type application/x-tar)
// beneath the directory ?path= (made when missing), streamed through to
// the agent. 204.
func (s *server) uploadArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-tar" {
		return errorf(CodeInvalidArgument, "Content-Type must be application/x-tar, not %q", ct)
	}
	if err := s.svc.UploadArchive(r.Context(), caller(r), r.PathValue("id"), p, fileUser, r.Body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// downloadArchive streams ?path= (a directory tree, a file or a link) as
// a tar named under its base name. A failure after the first byte aborts
// the response, so the client never takes a cut archive for a whole one.
func (s *server) downloadArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	rc, err := s.svc.DownloadArchive(r.Context(), caller(r), r.PathValue("id"), p, fileUser)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.WarnContext(r.Context(), "archive download cut short", "request_id", requestID(r), "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// sizedBody is a request body of known length whose Len (the bytes left)
// lets the agent client send the length on. The server already holds the
// body to its Content-Length: a short one fails its read.
type sizedBody struct {
	r    io.Reader
	left int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *sizedBody) Len() int { return int(max(b.left, 0)) }
