package files

import (
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
)

// download serves GET /files: the file's bytes, streamed by
// http.ServeContent (Range, If-Modified-Since; memory bounded by its copy
// buffer).
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	_, p, err := h.target(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is then
	// rejected as not regular. Regular files ignore the flag.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if fi.IsDir() {
		h.fail(w, r, &fs.PathError{Op: "read", Path: p, Err: syscall.EISDIR})
		return
	}
	if !fi.Mode().IsRegular() { // a FIFO or device would block or never end
		h.fail(w, r, fmt.Errorf("%w: %s is not a regular file", errBadRequest, p))
		return
	}
	if onPseudoFS(p) { // its size is not its length; it may not seek
		h.serveKernelFile(w, r, f, p)
		return
	}
	setAttachment(w, p)
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func setAttachment(w http.ResponseWriter, p string) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition",
		mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
}
