package files

import (
	"fmt"
	"io"
	"net/http"
	"os"

	"golang.org/x/sys/unix"
)

// maxPseudoRead bounds a download of a kernel file (/proc, /sys): such a
// file has no real size, and some never end (/proc/self/pagemap spans the
// whole address space). Status and configuration files are far smaller.
const maxPseudoRead = 8 << 20

// pseudoFS are the kernel file systems whose "regular" files are views
// of kernel state: their sizes are 0 or a page whatever they hold, they
// do not seek to their end, and reading or writing them can fail with
// errors that say nothing about the disk (EIO from /proc/self/mem).
var pseudoFS = map[int64]bool{
	unix.PROC_SUPER_MAGIC:    true,
	unix.SYSFS_MAGIC:         true,
	unix.CGROUP_SUPER_MAGIC:  true,
	unix.CGROUP2_SUPER_MAGIC: true,
	unix.DEBUGFS_MAGIC:       true,
	unix.TRACEFS_MAGIC:       true,
	unix.SECURITYFS_MAGIC:    true,
	unix.BPF_FS_MAGIC:        true,
}

// onPseudoFS reports whether path is on a kernel file system.
func onPseudoFS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return pseudoFS[int64(st.Type)]
}

// serveKernelFile streams a file of a kernel file system: read as it
// comes, without Range or a Content-Length, at most maxPseudoRead bytes.
// The first read comes before the status, so a file that refuses to be
// read (EIO, EINVAL, EPERM) is a 400, not a 200 with an empty body.
func (h *Handler) serveKernelFile(w http.ResponseWriter, r *http.Request, f *os.File, p string) {
	buf := make([]byte, copyBufferSize)
	n, err := f.Read(buf)
	if err != nil && err != io.EOF {
		h.fail(w, r, fmt.Errorf("%w: %s is a kernel file that cannot be read: %w", errBadRequest, p, err))
		return
	}
	setAttachment(w, p)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(buf[:n]); err != nil || n == 0 {
		return
	}
	// An error past the first bytes can only cut the body short.
	_, _ = io.CopyBuffer(onlyWriter{w}, io.LimitReader(f, maxPseudoRead-int64(n)), buf)
}

// writableTarget refuses to write what is not a plain file: a FIFO (the
// open would wait for a reader), a socket (the agent's own), a device,
// or a kernel file (writing /proc/self/mem corrupts the agent).
func writableTarget(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", errBadRequest, path)
	}
	if onPseudoFS(path) {
		return fmt.Errorf("%w: %s is a kernel file, not written through the file API", errBadRequest, path)
	}
	return nil
}
