package files

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/archive"
)

// PathArchive is the route of directory trees as tar streams:
//
//	PUT /sandboxd/archive?path=DIR&username=   unpack the body beneath DIR
//	GET /sandboxd/archive?path=P&username=     P (a tree, file or link) as a tar
//
// Both run as the request's user: the goroutine doing the work is locked
// to a thread whose file-system identity (setfsuid, setfsgid, setgroups)
// is that user's, so the kernel checks every open, mkdir and link against
// the user's permissions and what is created belongs to the user. The
// archive's entries are checked as package archive says (no path out of
// DIR, nothing through a symbolic link, no device, setuid dropped). A full
// disk is 507, a hostile or malformed archive 400, a missing DIR or P
// 404. The PUT answers 200 {"entries","bytes"}; it is safe to repeat.
const PathArchive = "/sandboxd/archive"

// archiveLimits bound one archive in either direction. The bytes are
// bounded by the sandbox's disk limit.
var archiveLimits = archive.Limits{Entries: 1_000_000, NameLen: 4096}

// putArchive serves PUT PathArchive.
func (h *Handler) putArchive(w http.ResponseWriter, r *http.Request) {
	u, dir, err := h.target(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-tar" {
		h.fail(w, r, fmt.Errorf("%w: want Content-Type application/x-tar, not %q", errBadRequest, ct))
		return
	}
	var st archive.Stats
	err = asUser(u, func() error {
		if err := account.MkdirAll(u, dir, 0o755); err != nil {
			return err
		}
		var err error
		st, err = archive.Extract(dir, bodyReader{r.Body}, archiveLimits)
		return err
	})
	if err != nil {
		h.fail(w, r, archiveErr(err))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Entries int   `json:"entries"`
		Bytes   int64 `json:"bytes"`
	}{st.Entries, st.Bytes})
}

// getArchive serves GET PathArchive. The entries are named under P's base
// name (or ?name=). Once the first byte is out, a failure can only cut the
// stream short: the client sees an unterminated archive.
func (h *Handler) getArchive(w http.ResponseWriter, r *http.Request) {
	u, p, err := h.target(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		name = filepath.Base(p)
	}
	if p == "/" && r.URL.Query().Get("name") == "" {
		name = "root"
	}
	sw := &startWriter{w: w}
	err = asUser(u, func() error {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil { // 404 before the status
			return &pathErr{p, err}
		}
		_, err := archive.Write(sw, p, name, archive.WriteOptions{Limits: archiveLimits, SkipDir: isPseudoFS})
		return err
	})
	if err != nil {
		if !sw.started {
			h.fail(w, r, archiveErr(err))
			return
		}
		h.log.WarnContext(r.Context(), "archive cut short", "path", p, "err", err)
		panic(http.ErrAbortHandler) // the client must not take it for a whole archive
	}
	sw.start()
}

type pathErr struct {
	p   string
	err error
}

func (e *pathErr) Error() string { return e.p + ": " + e.err.Error() }
func (e *pathErr) Unwrap() error { return e.err }

// startWriter sends the 200 and its headers before the first byte.
type startWriter struct {
	w       http.ResponseWriter
	started bool
}

func (s *startWriter) start() {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/x-tar")
		s.w.WriteHeader(http.StatusOK)
	}
}

func (s *startWriter) Write(b []byte) (int, error) {
	s.start()
	return s.w.Write(b)
}

// archiveErr maps package archive's refusals onto the handler's 400.
func archiveErr(err error) error {
	if errors.Is(err, archive.ErrRefused) || errors.Is(err, archive.ErrFormat) {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return err
}

// isPseudoFS reports whether the directory open at fd is on a kernel
// file system, which archives skip (see pseudoFS).
func isPseudoFS(fd int) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false
	}
	return pseudoFS[int64(st.Type)]
}

// asUser runs fn with u's file-system identity: on a thread of its own
// whose fsuid, fsgid and groups are u's (root runs fn as it is). The
// thread is never unlocked, so it ends with the goroutine and no other
// goroutine ever runs with that identity.
func asUser(u account.User, fn func() error) error {
	if u.UID == 0 {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := setFSIdentity(u); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// setFSIdentity sets the calling thread's groups, fsgid and fsuid (raw
// per-thread system calls, unlike syscall.Setgid, which changes every
// thread) and checks they took.
func setFSIdentity(u account.User) error {
	if err := unix.Setgroups([]int{int(u.GID)}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	unix.Setfsgid(int(u.GID))
	unix.Setfsuid(int(u.UID))
	gid, _ := unix.SetfsgidRetGid(-1)
	uid, _ := unix.SetfsuidRetUid(-1)
	if uid != int(u.UID) || gid != int(u.GID) {
		return fmt.Errorf("act as %s: file-system identity %d:%d, want %d:%d", u.Name, uid, gid, u.UID, u.GID)
	}
	return nil
}
