package service

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/store"
)

// The hibernate storage cap.
//
// Config.HibernateStorageMaxMB bounds the bytes the hibernate images hold
// in the hibernate directory together, daemon-wide (0: a quarter of that
// directory's file system, defaultHibernateShare), and one owner's images
// to a share of it (ownerCapShare). A hibernate reserves
// its sandbox's memory limit (the most its image can hold) before its
// save, under one mutex, and a hibernate that would take the total past
// the cap stops the sandbox instead, saying why, as one without room on
// the disk does. Once the image is whole the reservation becomes the
// image's size on disk; a save that fails gives it back; an image that
// goes (a resume, a stop, a destroy, the reconciler) takes its size with
// it. The startup counts the images it keeps (sweepImages), so a
// restarted daemon starts from what is on disk.
//
// The memory images that captures with memory keep for their templates
// (<hibernate dir>/.forkmem/<template id>, forkmem.go) are in the same
// directory and count the same way, as their template owner's, under
// forkMemoryKey: from the moment one is kept (keepForkMemory) until it
// goes with its template (dropForkMemory), and at startup from what
// .forkmem holds (sweepForkMemory). One is hard links of its source's
// hibernate image, so a file counts once: as the template's once it is
// kept (the source's entry keeps only what it alone holds, ownBytes, as
// sweepImages counts it), and as the source's again should the template
// go while the source is still hibernated (reclaimShared). The capture's
// hibernate reserves the source's memory limit under the cap as any
// hibernate (imageCap, which a capture checks before it touches the
// source) and that reservation is what the kept image then holds: a
// capture with memory never takes the ledger past what its hibernate
// reserved, and what it keeps stays counted after the source resumed.

// defaultHibernateShare is the share of the hibernate directory's file
// system the images may hold when Config.HibernateStorageMaxMB is 0.
const defaultHibernateShare = 4 // a quarter

// ownerCapShare: one owner's images may hold at most 1/ownerCapShare of
// the cap, so that one tenant never fills it and stops everybody else's
// hibernates (docs/design.md, Hibernate).
const ownerCapShare = 2 // half

// imageLedger is what the hibernate images hold or may write: per
// sandbox, the bytes of its image or of its save's reservation, and per
// owner their sum.
type imageLedger struct {
	mu      sync.Mutex
	bytes   map[string]int64
	owners  map[string]string // sandbox → owner, for byOwner
	byOwner map[string]int64
	total   int64
}

// reserve makes id's entry, of owner's, n bytes if the total then stays
// within limit and owner's within limit/ownerCapShare (limit ≤ 0: no
// cap), replacing an entry id had; it reports whether it fit, and if
// not whether the owner's share is what it passed.
func (l *imageLedger) reserve(id, owner string, n, limit int64) (ok, ownerShare bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit > 0 {
		if l.total-l.bytes[id]+n > limit {
			return false, false
		}
		mine := l.byOwner[owner]
		if l.owners[id] == owner {
			mine -= l.bytes[id]
		}
		if mine+n > limit/ownerCapShare {
			return false, true
		}
	}
	l.setLocked(id, owner, n)
	return true, false
}

// set records id's image as n bytes (its owner as reserve or setOwned
// named it).
func (l *imageLedger) set(id string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(id, l.owners[id], n)
}

// setOwned records id's image, of owner's, as n bytes.
func (l *imageLedger) setOwned(id, owner string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(id, owner, n)
}

func (l *imageLedger) setLocked(id, owner string, n int64) {
	if l.bytes == nil {
		l.bytes, l.owners, l.byOwner = map[string]int64{}, map[string]string{}, map[string]int64{}
	}
	l.dropLocked(id)
	l.total += n
	l.bytes[id] = n
	l.owners[id] = owner
	l.byOwner[owner] += n
}

// relink makes, at once, from's entry fromBytes and to's, of from's
// owner (owner when from has none), toBytes: a memory image kept as hard
// links of from's hibernate image takes the files over (keepForkMemory).
func (l *imageLedger) relink(from string, fromBytes int64, to, owner string, toBytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.owners[from]; ok {
		owner = o
		l.setLocked(from, o, fromBytes)
	}
	l.setLocked(to, owner, toBytes)
}

// update makes id's entry n bytes if it has one (a reservation or an
// image this process counts), and reports whether it had.
func (l *imageLedger) update(id string, n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.bytes[id]; !ok {
		return false
	}
	l.setLocked(id, l.owners[id], n)
	return true
}

// drop forgets id's image.
func (l *imageLedger) drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(id)
}

func (l *imageLedger) dropLocked(id string) {
	n, ok := l.bytes[id]
	if !ok {
		return
	}
	owner := l.owners[id]
	l.total -= n
	if l.byOwner[owner] -= n; l.byOwner[owner] <= 0 {
		delete(l.byOwner, owner)
	}
	delete(l.bytes, id)
	delete(l.owners, id)
}

// hibernateCapBytes is the cap in bytes (Config.HibernateStorageMaxMB, or
// the default share of the hibernate directory's file system; 0 when
// that cannot be read: no cap, as before).
func hibernateCapBytes(cfg Config) int64 {
	if cfg.HibernateStorageMaxMB > 0 {
		return cfg.HibernateStorageMaxMB << 20
	}
	var st syscall.Statfs_t
	if cfg.HibernateDir == "" || syscall.Statfs(cfg.HibernateDir, &st) != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize) / defaultHibernateShare
}

// imageCap reserves row's memory limit for its image in the ledger, and
// says why not when that would pass the cap or its owner's share of it ("" when it is reserved: the
// caller sets or drops the entry once the save ended). For a capture
// with memory it is also the room of the memory image the template keeps
// (which takes the source's image's place in the ledger, keepForkMemory):
// a capture that calls it before it touches the source is refused there,
// and its hibernate's own call then replaces the same entry.
func (s *Service) imageCap(row store.Sandbox) string {
	need := row.MemoryMB << 20
	ok, share := s.hibImages.reserve(row.ID, row.Owner, need, s.hibernateCap)
	switch {
	case ok:
		return ""
	case share:
		return fmt.Sprintf("stopped: the owner's hibernate images would pass their share of --hibernate-storage-max (1/%d of %d MB, up to %d MB needed)",
			ownerCapShare, s.hibernateCap>>20, need>>20)
	}
	// Not what the images hold: that is every tenant's.
	return fmt.Sprintf("stopped: the hibernate images would pass --hibernate-storage-max (%d MB allowed, up to %d MB needed)",
		s.hibernateCap>>20, need>>20)
}

// imageBytes is what the image directory dir holds on disk (its files'
// allocated blocks); 0 when it cannot be read.
func imageBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// ownBytes is what the image directory dir holds on disk in the files no
// other name links (imageBytes less the files a template's memory image
// shares, which count as the template's).
func ownBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok {
				n += fi.Size()
			} else if st.Nlink <= 1 {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// fileKey is a file's identity on its file system.
type fileKey struct{ dev, ino uint64 }

// sharedFiles is the files under dir that another name links too (a
// template's memory image's files, while its source's hibernate image
// still links them); nil when none.
func sharedFiles(dir string) map[fileKey]bool {
	var shared map[fileKey]bool
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				if shared == nil {
					shared = map[fileKey]bool{}
				}
				shared[fileKey{uint64(st.Dev), st.Ino}] = true
			}
		}
		return nil
	})
	return shared
}

// reclaimShared measures again, once a template's memory image went, the
// hibernate images that linked its files (shared: a source whose resume
// failed after its capture, still hibernated): they hold those files
// alone now. Only images the ledger counts; a save in flight (its
// reservation) links nothing yet.
func (s *Service) reclaimShared(shared map[fileKey]bool) {
	if len(shared) == 0 {
		return
	}
	entries, err := os.ReadDir(s.cfg.HibernateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == forkMemoryName || strings.Contains(e.Name(), ".") || !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.cfg.HibernateDir, e.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, f := range files {
			fi, err := f.Info()
			if err != nil {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && shared[fileKey{uint64(st.Dev), st.Ino}] {
				s.hibImages.update(e.Name(), ownBytes(dir))
				break
			}
		}
	}
}

// forkMemoryKey is template tpl's memory image's key in the ledger: no
// sandbox id (a DNS label, without a dot) is it.
func forkMemoryKey(tpl string) string { return forkMemoryName + "/" + tpl }
