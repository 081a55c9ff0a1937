package service

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/store"
)

// The hibernate storage cap.
//
// Config.HibernateStorageMaxMB bounds the bytes the hibernate images hold
// in the hibernate directory together, daemon-wide (0: a quarter of that
// directory's file system, defaultHibernateShare). A hibernate reserves
// its sandbox's memory limit (the most its image can hold) before its
// save, under one mutex, and a hibernate that would take the total past
// the cap stops the sandbox instead, saying why, as one without room on
// the disk does. Once the image is whole the reservation becomes the
// image's size on disk; a save that fails gives it back; an image that
// goes (a resume, a stop, a destroy, the reconciler) takes its size with
// it. The startup counts the images it keeps (sweepImages), so a
// restarted daemon starts from what is on disk.

// defaultHibernateShare is the share of the hibernate directory's file
// system the images may hold when Config.HibernateStorageMaxMB is 0.
const defaultHibernateShare = 4 // a quarter

// imageLedger is what the hibernate images hold or may write: per
// sandbox, the bytes of its image or of its save's reservation.
type imageLedger struct {
	mu    sync.Mutex
	bytes map[string]int64
	total int64
}

// reserve makes id's entry n bytes if the total then stays within limit
// (limit ≤ 0: no cap), replacing an entry id had; it returns the total
// held without id's entry and whether it fit.
func (l *imageLedger) reserve(id string, n, limit int64) (others int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	others = l.total - l.bytes[id]
	if limit > 0 && others+n > limit {
		return others, false
	}
	l.setLocked(id, n)
	return others, true
}

// set records id's image as n bytes.
func (l *imageLedger) set(id string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(id, n)
}

func (l *imageLedger) setLocked(id string, n int64) {
	if l.bytes == nil {
		l.bytes = map[string]int64{}
	}
	l.total += n - l.bytes[id]
	l.bytes[id] = n
}

// drop forgets id's image.
func (l *imageLedger) drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total -= l.bytes[id]
	delete(l.bytes, id)
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
// says why not when that would pass the cap ("" when it is reserved: the
// caller sets or drops the entry once the save ended).
func (s *Service) imageCap(row store.Sandbox) string {
	need := row.MemoryMB << 20
	others, ok := s.hibImages.reserve(row.ID, need, s.hibernateCap)
	if ok {
		return ""
	}
	return fmt.Sprintf("stopped: the hibernate images would pass --hibernate-storage-max (%d MB held, up to %d MB more needed, %d MB allowed)",
		others>>20, need>>20, s.hibernateCap>>20)
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
