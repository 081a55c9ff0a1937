package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Hibernate.
//
// A hibernated sandbox is a paused one whose processes and memory the
// runtime checkpointed to disk (runtime.Checkpointer) and whose memory is
// freed: no process, no cgroup, its CPU and memory released in admission
// (its disk still counts, as a stopped sandbox's, and so does its image:
// MemoryMB more of its owner's disk, Admission.ParkWith). A hibernate
// directory whose file system has no room for the image (imageRoom) stops
// the sandbox instead, saying so. It stays in state
// paused, with store.Sandbox.HibernatedAt set, because every rule of a
// paused sandbox holds for it (calls that need its processes answer
// ErrPaused, its timeout does not run, Resume brings it back, Stop and
// Destroy work) and only the engine's side differs; a state of its own
// would have had every one of those rules, the facades' and the
// reconciler's repeated.
//
// The image is a directory per sandbox under Config.HibernateDir (0700,
// in the daemon's data dir, never under anything a sandbox mounts: it
// holds the sandbox's memory, secrets included). The runtime writes it
// under a temporary name and renames it when complete, so an image
// directory that exists is whole.
//
// Order, under the sandbox's transition lock: the row goes paused (if it
// was running), the runtime checkpoints, admission releases, the row is
// marked hibernated. Resume: admission reserves, the runtime restores,
// the row goes running, the image goes. A failed checkpoint leaves the
// sandbox as it was (running, or paused) with no image; a failed restore
// leaves it hibernated. A daemon killed between the checkpoint and the
// mark leaves a paused row, a checkpointed sandbox and a whole image: the
// reconciler marks it (pausedLost, below); one killed during the save
// leaves runsc saving on: the next start waits for it (settleCheckpoints);
// one killed between the restore
// and the row's write leaves a hibernated row over a running sandbox: the
// reconciler freezes it and forgets the image (refreeze).
//
// Where the runtime cannot checkpoint the sandbox's isolation (the Docker
// runtime, runc-class sandboxes on a host whose criu fails its check),
// hibernate is today's stop, and the answer says so with the reason.

// Hibernated is the outcome of Hibernate.
type Hibernated struct {
	Sandbox
	// Stopped: the sandbox could not be hibernated and was stopped
	// instead (its processes end; its file system is kept); Reason says
	// why.
	Stopped bool
	Reason  string
}

// Hibernate checkpoints a running or paused sandbox's processes to disk
// and frees its memory; Resume (or Start) restores them. Hibernating a
// hibernated sandbox returns it unchanged; a stopped one is returned with
// Stopped set (a retry of a hibernate that stopped it). Where the runtime
// cannot checkpoint it, the sandbox is stopped instead (Stopped, Reason).
// A checkpoint that fails leaves the sandbox running (or paused) and is
// ErrUnavailable; one that failed and ended the sandbox's processes
// leaves it stopped (Stopped, Reason).
func (s *Service) Hibernate(ctx context.Context, c Caller, idOrName string) (Hibernated, error) {
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Hibernated{}, err
	}
	defer unlock()
	if row.Owner == store.PoolOwner {
		return Hibernated{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	switch {
	case row.State == store.StatePaused && !row.HibernatedAt.IsZero():
		return Hibernated{Sandbox: fromRow(row)}, nil
	case row.State == store.StateStopped:
		return Hibernated{Sandbox: fromRow(row), Stopped: true, Reason: "the sandbox is stopped"}, nil
	case row.State == store.StateRunning, row.State == store.StatePaused:
	default:
		return Hibernated{}, fmt.Errorf("sandbox %s is %s; only a running or paused sandbox hibernates: %w", row.ID, row.State, ErrConflict)
	}
	return s.hibernateLocked(ctx, row, keepLogs, c.Quota)
}

// HibernateSupport reports whether sandboxes of the runtime named
// (RuntimeDocker, RuntimeGVisor) hibernate here, and if not why.
func (s *Service) HibernateSupport(runtimeName string) runtime.CheckpointSupport {
	if s.cfg.HibernateDir == "" {
		return runtime.CheckpointSupport{How: "the daemon has no hibernate directory"}
	}
	return runtime.CanCheckpoint(s.Runtime, isolation(runtimeName))
}

// hibernateLocked is Hibernate of a running or paused row that is not
// hibernated, under its transition lock. keep is stopLocked's, for the
// fallback stop.
func (s *Service) hibernateLocked(ctx context.Context, row store.Sandbox, keep bool, q Quota) (Hibernated, error) {
	return s.hibernateHolding(ctx, row, keep, q, false)
}

// hibernateHolding is hibernateLocked; with hold, a hibernated sandbox
// keeps its CPU and memory reserved (a capture with memory, which resumes
// it at once: no other create takes its room meanwhile), and one that
// cannot be checkpointed (no room, quota or cap) is refused with
// ErrUnavailable instead of stopped. A hibernate that fails after its
// checkpoint releases them as hibernateLocked does.
func (s *Service) hibernateHolding(ctx context.Context, row store.Sandbox, keep bool, q Quota, hold bool) (Hibernated, error) {
	// Once begun it runs to its end without its caller (a client that
	// hangs up mid-save would have the save killed, and runsc then shuts
	// the sandbox down): its own bound. A daemon that stops meanwhile
	// leaves it to the next start's settleCheckpoints.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hibernateTimeout(row.MemoryMB))
	defer cancel()
	defer s.hibernating.begin(row.ID)() // no wake queues behind the save (wake.go)
	sup := s.HibernateSupport(specOf(row).Runtime)
	cp, ok := s.Runtime.(runtime.Checkpointer)
	if ok && sup.OK {
		// The image holds up to the sandbox's memory: a save that fills
		// the disk would leave half an image on the disk of the store.
		if why := s.imageRoom(row); why != "" {
			sup = runtime.CheckpointSupport{How: why}
		} else if why := s.imageQuota(row, q); why != "" {
			sup = runtime.CheckpointSupport{How: why}
		} else if why := s.imageCap(row); why != "" {
			// Last: it reserves the image's room, given back below
			// unless an image is kept.
			sup = runtime.CheckpointSupport{How: why}
		}
	}
	if (!sup.OK || !ok) && hold {
		// A capture with memory: its source is never stopped instead
		// (its processes are what it captures); refused, as it was.
		return Hibernated{}, fmt.Errorf("checkpoint %s: %s: %w", row.ID, strings.TrimPrefix(sup.How, "stopped: "), ErrUnavailable)
	}
	if !sup.OK || !ok {
		sb, err := s.stopLocked(ctx, row, keep)
		if err != nil {
			return Hibernated{}, err
		}
		s.Logger.Info("hibernate: stopped instead", "sandbox", row.ID, "reason", sup.How)
		s.Metrics.reconcileAction("hibernate_stopped")
		return Hibernated{Sandbox: sb, Stopped: true, Reason: sup.How}, nil
	}
	wasRunning := row.State == store.StateRunning
	dir := s.imageDir(row.ID)
	kept := false // an image is kept: the ledger holds its size, not the reservation
	defer func() {
		if kept {
			s.hibImages.set(row.ID, imageBytes(dir))
		} else {
			s.hibImages.drop(row.ID)
		}
	}()
	if wasRunning {
		paused, err := s.Store.PauseSandbox(ctx, row.ID)
		if err != nil {
			return Hibernated{}, s.mapStoreErr(err, row.ID)
		}
		row = paused
	}
	// An image the row does not name hibernated (a dead process's, its
	// mark never written, or a resume's not yet removed) is stale here:
	// the row is not hibernated and the sandbox is running.
	if err := os.RemoveAll(dir); err != nil {
		s.undoHibernatePause(row.ID, wasRunning)
		return Hibernated{}, fmt.Errorf("hibernate %s: remove a stale image: %w: %w", row.ID, ErrUnavailable, err)
	}
	if err := cp.Checkpoint(ctx, row.ID, dir); err != nil && !s.checkpointed(row.ID) {
		if !errors.Is(err, runtime.ErrCheckpointUnsupported) && s.ended(row.ID) {
			// The failed save ended its processes (runsc shuts a
			// sandbox down on some failures, ENOSPC among them): it
			// is stopped, its file system kept, and the answer says
			// so; only a live sandbox goes back to running.
			sb, serr := s.stopLocked(ctx, row, keep)
			if serr != nil {
				return Hibernated{}, fmt.Errorf("hibernate %s: the checkpoint failed and ended the sandbox (%w); stopping it: %w", row.ID, err, serr)
			}
			// The runtime's words name host paths (the log has them):
			// the reason says only what kind of failure it was.
			reason := "stopped: the checkpoint failed and ended the sandbox's processes"
			if errors.Is(err, runtime.ErrNoSpace) {
				reason += ": the hibernate directory's disk is full"
			}
			s.Logger.Warn("hibernate: a failed checkpoint ended the sandbox; stopped", "sandbox", row.ID, "err", err)
			s.Metrics.reconcileAction("hibernate_stopped")
			return Hibernated{Sandbox: sb, Stopped: true, Reason: reason}, nil
		}
		s.undoHibernatePause(row.ID, wasRunning)
		if errors.Is(err, runtime.ErrCheckpointUnsupported) {
			return Hibernated{}, fmt.Errorf("hibernate %s: %w: %w", row.ID, ErrUnavailable, err)
		}
		if gerr := s.engineErr(ctx, "hibernate", row.ID, err); errors.Is(gerr, ErrNotFound) || errors.Is(gerr, ErrConflict) {
			return Hibernated{}, gerr
		}
		return Hibernated{}, fmt.Errorf("hibernate %s: the checkpoint failed, the sandbox runs on: %w: %w", row.ID, ErrUnavailable, err)
	}
	if !hold {
		s.Admission.ParkWith(row.ID, row.MemoryMB) // its memory is free; its files and its image count
	}
	kept = true
	marked, err := s.Store.MarkHibernated(ctx, row.ID)
	if err != nil {
		if hold {
			s.Admission.ParkWith(row.ID, row.MemoryMB)
		}
		if errors.Is(err, store.ErrNotFound) {
			// Destroyed meanwhile (a destroy takes no transition
			// lock): its teardown removes the sandbox; the image is
			// this call's.
			_ = os.RemoveAll(dir)
			kept = false
		}
		// Otherwise the image stays with the checkpointed sandbox, as a
		// process killed here would leave them: the reconciler marks
		// the row (pausedLost).
		return Hibernated{}, s.mapStoreErr(err, row.ID)
	}
	s.Logger.Info("hibernated a sandbox", "sandbox", row.ID)
	return Hibernated{Sandbox: fromRow(marked)}, nil
}

// hibernateTimeout bounds a hibernate of a sandbox with memoryMB of
// memory: the save writes it all (10 minutes, and 1 more per GB).
func hibernateTimeout(memoryMB int64) time.Duration {
	return 10*time.Minute + time.Duration(memoryMB/1024)*time.Minute
}

// hibernateDiskMargin is what the hibernate directory's file system must
// keep free beyond a sandbox's memory for its image to be written.
const hibernateDiskMargin = 256 // MB

// imageRoom says why the hibernate directory has no room for row's memory
// image (its file system's free space under MemoryMB plus
// hibernateDiskMargin, and MemoryMB more where the runtime seals its
// images), or "" if it has.
func (s *Service) imageRoom(row store.Sandbox) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.HibernateDir, &st); err != nil {
		return fmt.Sprintf("stopped: the hibernate directory's free space is unknown: %v", err)
	}
	freeMB := int64(st.Bavail) * int64(st.Bsize) >> 20
	need := row.MemoryMB + hibernateDiskMargin
	if _, ok := s.Runtime.(runtime.CheckpointSealer); ok {
		// The seal writes each file's sealed copy before it removes the
		// plain one: twice the image for a moment.
		need += row.MemoryMB
	}
	if freeMB < need {
		return fmt.Sprintf("stopped: not enough disk for a memory image (%d MB free, %d MB needed)", freeMB, need)
	}
	return ""
}

// imageQuota says why row's memory image does not fit in the disk quota
// q, or the one its create was held to (the tighter), leaves its owner (the image counts beside its files while it is
// hibernated), or "" if it fits. Only the disk is checked: the sandbox
// already holds its CPU and memory.
func (s *Service) imageQuota(row store.Sandbox, q Quota) string {
	// The create's disk quota too: the timeout's and --pause-max's
	// hibernates have no caller, and an admin's has no quota of its own.
	if stored := specOf(row).ownerDiskQuota(); stored > 0 && (q.DiskMB <= 0 || stored < q.DiskMB) {
		q.DiskMB = stored
	}
	if q.DiskMB <= 0 {
		return ""
	}
	req := holding(row)
	req.DiskMB += row.MemoryMB
	if err := s.Admission.FitsQuota(row.ID, req, Quota{DiskMB: q.DiskMB}); err != nil {
		return "stopped: the memory image does not fit in the owner's disk quota: " + err.Error()
	}
	return ""
}

// checkpointed reports whether sandbox id's checkpoint happened whatever
// the runtime answered (its answer lost to a timeout): a whole image, and
// the sandbox no longer running.
func (s *Service) checkpointed(id string) bool {
	if !s.hasImage(id) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	st, err := s.Runtime.Inspect(ctx, id)
	return err == nil && st.State != runtime.StateRunning && st.State != runtime.StateMissing
}

// ended reports whether sandbox id's processes are gone: the runtime
// reports it there and not running.
func (s *Service) ended(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	st, err := s.Runtime.Inspect(ctx, id)
	return err == nil && st.State != runtime.StateRunning && st.State != runtime.StateMissing
}

// undoHibernatePause puts the row of a sandbox whose checkpoint failed
// back to running if the hibernate paused it (the runtime left the
// sandbox running); a sandbox that was paused stays paused.
func (s *Service) undoHibernatePause(id string, wasRunning bool) {
	if !wasRunning {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if _, err := s.Store.ResumeSandbox(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.Logger.Warn("hibernate: row back to running after a failed checkpoint", "sandbox", id, "err", err)
	}
}

// resumeHibernated is Resume of a hibernated row, under its transition
// lock: its capacity again, the runtime's restore, the row running, the
// image removed. Past the capacity budget it is ErrCapacityExhausted and
// the sandbox stays hibernated. An image that is gone (removed by hand, a
// disk lost) starts the sandbox afresh, as a stopped one would
// (ProcessesRestarted).
func (s *Service) resumeHibernated(ctx context.Context, c Caller, row store.Sandbox) (Resumed, error) {
	cp, ok := s.Runtime.(runtime.Checkpointer)
	if !ok {
		return Resumed{}, fmt.Errorf("resume %s: hibernated, and the runtime has no restore: %w", row.ID, ErrUnavailable)
	}
	if err := s.Admission.ReserveWithin(row.ID, holding(row), c.Quota); err != nil {
		return Resumed{}, admissionErr(err)
	}
	if err := s.restage(ctx, row); err != nil {
		if gone := s.unholdHibernated(ctx, row); gone != nil {
			return Resumed{}, gone
		}
		return Resumed{}, fmt.Errorf("resume %s: stage its mounts: %w", row.ID, err)
	}
	dir := s.imageDir(row.ID)
	if err := cp.Restore(ctx, row.ID, dir); err != nil {
		if errors.Is(err, runtime.ErrNoCheckpoint) {
			s.hibImages.drop(row.ID)
			s.Admission.Park(row.ID)
			s.Logger.Warn("resume: the hibernated sandbox's image is gone; starting it afresh", "sandbox", row.ID)
			sb, err := s.startLocked(ctx, c, row)
			return Resumed{Sandbox: sb, ProcessesRestarted: err == nil, ConnectionsClosed: err == nil}, err
		}
		if gone := s.unholdHibernated(ctx, row); gone != nil {
			return Resumed{}, gone
		}
		if gerr := s.engineErr(ctx, "resume", row.ID, err); errors.Is(gerr, ErrNotFound) || errors.Is(gerr, ErrConflict) {
			return Resumed{}, gerr
		}
		return Resumed{}, fmt.Errorf("resume %s: the restore failed, the sandbox stays hibernated: %w: %w", row.ID, ErrUnavailable, err)
	}
	resumed, err := s.Store.ResumeSandbox(ctx, row.ID)
	if err != nil {
		return Resumed{}, s.mapStoreErr(err, row.ID)
	}
	s.dropImage(row.ID)
	// Its processes are back; the connections from outside that it had
	// are not (the agent parked them for the save): the answer says so,
	// and the daemon's own idle ones to the agent go too, so the first
	// call after the resume dials afresh.
	s.forgetClient(row.ID)
	return Resumed{Sandbox: fromRow(resumed), ConnectionsClosed: true}, nil
}

// unholdHibernated gives back what a resume of hibernated row reserved,
// once it failed: the sandbox holds a hibernated one's disk again
// (Admission.ParkWith). A destroy takes no transition lock: one that ran
// meanwhile (its release maybe before this resume's reservation) leaves
// nothing to hold, and the answer is ErrNotFound.
func (s *Service) unholdHibernated(ctx context.Context, row store.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if now, err := s.Store.GetSandbox(ctx, row.ID); errors.Is(err, store.ErrNotFound) || err == nil && !now.DestroyingSince.IsZero() {
		s.Admission.Release(row.ID)
		return fmt.Errorf("sandbox %s was destroyed while it resumed: %w", row.ID, ErrNotFound)
	}
	s.Admission.ParkWith(row.ID, row.MemoryMB)
	return nil
}

// imageDir is where sandbox id's hibernate image lives.
func (s *Service) imageDir(id string) string { return filepath.Join(s.cfg.HibernateDir, id) }

// hasImage reports whether sandbox id has a whole hibernate image.
func (s *Service) hasImage(id string) bool {
	if s.cfg.HibernateDir == "" {
		return false
	}
	fi, err := os.Stat(s.imageDir(id))
	return err == nil && fi.IsDir()
}

// dropImage removes sandbox id's hibernate image, if any (after a
// resume, a stop or a destroy: the processes it holds are gone or back).
func (s *Service) dropImage(id string) {
	if s.cfg.HibernateDir == "" {
		return
	}
	defer s.hibImages.drop(id)
	if err := os.RemoveAll(s.imageDir(id)); err != nil {
		s.Logger.Warn("remove a hibernate image", "sandbox", id, "err", err)
	}
}

// sweepImages removes the hibernate images (and the temporary ones of
// checkpoints cut short) that no hibernated row names; at startup only,
// when no hibernate of this process runs.
func (s *Service) sweepImages(rows []store.Sandbox) {
	if s.cfg.HibernateDir == "" {
		return
	}
	keep := map[string]string{} // id → owner
	for _, r := range rows {
		if r.State == store.StatePaused && r.DestroyingSince.IsZero() {
			// A paused row not marked may be one whose mark a dead
			// process never wrote: markLost decides on it.
			keep[r.ID] = r.Owner
		}
	}
	entries, err := os.ReadDir(s.cfg.HibernateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == forkMemoryName {
			continue // forks' memory images (forkmem.go), swept there
		}
		if owner, ok := keep[e.Name()]; ok && !strings.Contains(e.Name(), ".") {
			// Counted against the cap (hibernatecap.go): a restarted
			// daemon starts from the images on disk. Files a template's
			// memory image links too count as the template's
			// (sweepForkMemory), as they did before the restart.
			s.hibImages.setOwned(e.Name(), owner, ownBytes(filepath.Join(s.cfg.HibernateDir, e.Name())))
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.HibernateDir, e.Name())); err != nil {
			s.Logger.Warn("reconcile: remove a stale hibernate image", "name", e.Name(), "err", err)
		}
	}
}

// checkpointSettle bounds how long a starting daemon waits for a save
// that a killed one left runsc making.
const checkpointSettle = time.Minute

// settleCheckpoints is the startup's look at the checkpoints a killed
// daemon left in flight, before the reconciler takes its snapshot: their
// temporary images (runtime.Checkpointer writes dir+".tmp-…"). An empty
// one never began: removed. A sandbox still running over one that is not
// empty is saving (runsc's save goes on without its caller): it is
// waited for, at most checkpointSettle. A save that stopped the sandbox
// wrote its image whole: it is put in place, and the reconciler marks
// the row hibernated (pausedLost); anything else is removed.
func (s *Service) settleCheckpoints(ctx context.Context) {
	if s.cfg.HibernateDir == "" {
		return
	}
	entries, err := os.ReadDir(s.cfg.HibernateDir)
	if err != nil {
		return
	}
	var tmps []string
	for _, e := range entries {
		if id, _, ok := strings.Cut(e.Name(), ".tmp-"); ok && runtime.ValidSandboxID(id) {
			tmps = append(tmps, e.Name())
		}
	}
	_ = parallel(ctx, tmps, func(ctx context.Context, name string) error {
		id, _, _ := strings.Cut(name, ".tmp-")
		tmp := filepath.Join(s.cfg.HibernateDir, name)
		if files, _ := os.ReadDir(tmp); len(files) == 0 {
			return os.RemoveAll(tmp)
		}
		deadline := time.Now().Add(checkpointSettle)
		st, err := s.Runtime.Inspect(ctx, id)
		for err == nil && st.State == runtime.StateRunning && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			st, err = s.Runtime.Inspect(ctx, id)
		}
		if err == nil && st.State != runtime.StateRunning && st.State != runtime.StateMissing && !s.hasImage(id) {
			// The killed daemon never sealed it (the runtime's seal
			// follows the save): sealed now, before it is named whole.
			if sealer, ok := s.Runtime.(runtime.CheckpointSealer); ok {
				if err := sealer.SealCheckpoint(tmp); err != nil {
					s.Logger.Warn("reconcile: seal a checkpoint a killed daemon left; kept in clear", "sandbox", id, "err", err)
				}
			}
			if err := os.Rename(tmp, s.imageDir(id)); err == nil {
				s.Logger.Warn("reconcile: a checkpoint a killed daemon left running ended; its image kept", "sandbox", id)
				return nil
			}
		}
		return os.RemoveAll(tmp)
	})
}

// pausedLost is markLost's judgement of a paused row whose container the
// snapshot did not show running, under its transition lock (a hibernate
// in progress has its sandbox checkpointed before its image is in place).
// A hibernated row whose sandbox is there is not lost; nor is a paused
// one whose sandbox is checkpointed with a whole image, its mark never
// written by a process that died: it is marked hibernated. Otherwise it
// is marked error, and reported lost.
func (s *Service) pausedLost(ctx context.Context, id string) (lost bool, err error) {
	still := func(row store.Sandbox) bool { return row.State == store.StatePaused }
	err = s.underLock(ctx, id, "check paused", still, func(row store.Sandbox) error {
		st, err := s.Runtime.Inspect(ctx, id)
		switch {
		case err != nil:
			return fmt.Errorf("inspect %s: %w", id, err)
		case st.State == runtime.StateRunning:
			return nil
		case st.State != runtime.StateMissing && !row.HibernatedAt.IsZero():
			return nil
		case st.State != runtime.StateMissing && s.hasImage(id):
			if _, err := s.Store.MarkHibernated(ctx, id); err != nil {
				return fmt.Errorf("mark %s hibernated: %w", id, err)
			}
			s.Admission.ParkWith(id, row.MemoryMB)
			s.Logger.Warn("reconcile: a checkpointed sandbox's row was not marked hibernated; marked", "sandbox", id)
			s.Metrics.reconcileAction("mark_hibernated")
			return nil
		}
		reason := "container vanished"
		if st.State != runtime.StateMissing {
			reason = "container is " + string(st.State)
		}
		if _, err := s.Store.UpdateSandboxState(ctx, id, []store.SandboxState{store.StatePaused}, store.StateError, reason); err != nil {
			if errors.Is(err, store.ErrStateConflict) || errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return fmt.Errorf("mark %s error: %w", id, err)
		}
		s.dropImage(id)
		lost = true
		s.Logger.Warn("reconcile: sandbox lost its container", "sandbox", id, "reason", reason)
		s.Metrics.reconcileAction("lost_container")
		return nil
	})
	return lost, err
}
