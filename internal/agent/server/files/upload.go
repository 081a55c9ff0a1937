package files

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filemeta"
)

// WrittenFile is one element of the upload response.
type WrittenFile struct {
	Name string `json:"name"`
	Type string `json:"type"` // always "file"
	Path string `json:"path"`
	// Metadata is what the upload set (its X-Metadata-* headers).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload serves POST /files.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	u, err := h.users.FromRequest(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	meta, err := filemeta.FromHeader(r.Header)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []WrittenFile
	switch ct {
	case "multipart/form-data":
		written, err = h.uploadMultipart(u, r, meta)
	case "application/octet-stream", "":
		if canSplice(w, r) {
			if cr, herr := hijackBody(w, r); herr == nil {
				defer cr.send()
				w = cr
			}
		}
		written, err = h.uploadRaw(u, r, meta)
	default:
		err = fmt.Errorf("%w: unsupported Content-Type %q", errBadRequest, ct)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// uploadMultipart writes every part named "file", streaming each one, and
// gives each file meta.
func (h *Handler) uploadMultipart(u account.User, r *http.Request, meta map[string]string) ([]WrittenFile, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, &bodyError{err}
	}
	pathParam := r.URL.Query().Get("path")
	var written []WrittenFile
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return written, &bodyError{err}
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := pathParam
		if dest == "" {
			dest = partFilename(part.Header.Get("Content-Disposition"))
		}
		if dest == "" {
			return written, fmt.Errorf("%w: part has no filename and no path parameter was given", errBadRequest)
		}
		p, err := account.Resolve(u, dest)
		if err != nil {
			return written, err
		}
		err = writeFile(u, p, part, meta)
		part.Close()
		if err != nil {
			return written, err
		}
		written = append(written, writtenFile(p, meta))
	}
	if len(written) == 0 {
		return nil, fmt.Errorf("%w: no multipart part named \"file\"", errBadRequest)
	}
	return written, nil
}

// uploadRaw writes the request body to the path parameter, with meta.
func (h *Handler) uploadRaw(u account.User, r *http.Request, meta map[string]string) ([]WrittenFile, error) {
	dest := r.URL.Query().Get("path")
	if dest == "" {
		return nil, fmt.Errorf("%w: the path parameter is required for an octet-stream upload", errBadRequest)
	}
	p, err := account.Resolve(u, dest)
	if err != nil {
		return nil, err
	}
	var body io.Reader = r.Body
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, &bodyError{fmt.Errorf("gzip: %w", err)}
		}
		defer zr.Close()
		body = zr
	default:
		return nil, fmt.Errorf("%w: unsupported Content-Encoding %q", errBadRequest, enc)
	}
	if err := writeFile(u, p, body, meta); err != nil {
		return nil, err
	}
	return []WrittenFile{writtenFile(p, meta)}, nil
}

func writtenFile(p string, meta map[string]string) WrittenFile {
	return WrittenFile{Name: filepath.Base(p), Type: "file", Path: p, Metadata: meta}
}

// partFilename returns the filename parameter of a part's
// Content-Disposition verbatim. multipart.Part.FileName would strip it to
// its base name, but E2B puts the full destination path there.
func partFilename(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}
