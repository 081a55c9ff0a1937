package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Captures with memory: a fork or a snapshot whose sandboxes start with
// the source's running processes (as E2B's snapshots and Daytona's full
// snapshots do), each restored from one checkpoint image of the source
// instead of booting.
//
// Under the source's transition lock (captureWithMemory): the source is
// hibernated (hibernateHolding: paused, checkpointed into its hibernate
// image, its row marked, its CPU and memory still reserved), its file
// system captured as a template while nothing of it runs (so the files
// the image's processes hold open are the capture's), the image
// hard-linked into the template's memory directory (<hibernate
// dir>/.forkmem/<template id>, 0700: it holds the source's memory, its
// secrets among them), and the source resumed from its hibernate image.
// Once the source is hibernated, everything up to its resume runs without
// the caller's context (bounded): a client that hangs up does not leave it
// hibernated. A daemon killed anywhere in between leaves the source
// running, paused or hibernated, each resumable, as a hibernate does, and
// a template that the next start's sweep removes with its memory
// directory.
//
// The template's spec keeps what a restore needs (memorySpec): the
// source's runtime and size, which the restored processes were made
// with, its env, and, sealed to the template, its secret env and its
// agent token. Every create from the template is a restore
// (restoreFrom): a new id, its own root file system (the capture), socket
// directory, cgroup and network namespace, Spec.RestoreImage naming the
// memory directory. The restored agent still takes the source's token,
// so the create hands it the sandbox's own at once (startRuntime): from
// then on the source's token opens nothing in it. The source's env and
// secret env are in the restored processes' memory, as they are in the
// source's; the request's own env is handed to the agent with the token,
// for the processes it starts from then on.
//
// The memory directory goes with the template (removeTemplate,
// dropTemplate): a fork's once none of its sandboxes is left
// (sweepForks), a snapshot's when its owner deletes it. Its size counts
// in the template's, hence in the owner's template storage
// (Config.TemplateStorageMB: checked before the hibernate with the
// source's memory and files, memoryStorage), and the source's hibernate
// needs its usual room and disk quota for the image. The token hand-over
// is bounded (forkTokenTimeout). A template with memory is this node's
// alone: it is never published to the cluster's catalog (nodeLocal), as
// its memory image is never copied.
//
// Only a runtime that checkpoints the source's isolation can: --engine
// oci's gVisor sandboxes. Every other source, and one with volumes
// (their mounts are not the restored sandboxes'), is refused with a
// FieldError on "memory" naming the reason; a source that is not running
// is a conflict.

// forkMemory is the memory image a sandbox is restored from and the
// token its restored agent takes until told its own.
type forkMemory struct {
	dir   string
	token string
}

// memorySpec is what a template captured with its source's memory keeps
// for the sandboxes restored from it (templateSpec.Memory).
type memorySpec struct {
	// Runtime, MilliCPU, MemoryMB and DiskMB are the source's: a restore
	// needs the isolation and the size the processes were made with.
	Runtime  string `json:"runtime"`
	MilliCPU int64  `json:"milli_cpu"`
	MemoryMB int64  `json:"memory_mb"`
	DiskMB   int64  `json:"disk_mb,omitempty"`
	// Env is the source's env (in the restored processes' memory).
	Env map[string]string `json:"env,omitempty"`
	// SealedSecretEnv and SealedToken are the source's secret env and
	// agent token, sealed to the template (memoryAD).
	SealedSecretEnv []byte `json:"sealed_secret_env,omitempty"`
	SealedToken     []byte `json:"sealed_token"`
}

func memoryAD(tpl, what string) []byte {
	return secrets.AssociatedData("template", tpl, "memory", what)
}

// ForkWithMemory makes n sandboxes (1 to 16) that run on with a copy of
// the running sandbox's processes and memory, each with its own id,
// token, SSH key, root file system and ports, and the source's size,
// env, secret env, tags and runtime. The source pauses for the
// checkpoint and the capture and then runs on, its connections through
// the daemon (exec streams, tunnels) closed. All or none, as Fork.
func (s *Service) ForkWithMemory(ctx context.Context, c Caller, idOrName string, n int) ([]*Created, error) {
	if n < 1 || n > maxForks {
		return nil, invalid("count", "must be from 1 to %d", maxForks)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	t, err := s.captureWithMemory(ctx, c, row, "", store.TemplateFork)
	unlock()
	if err != nil {
		return nil, err
	}
	req, err := s.forkRequest(ctx, row, t, c)
	if err != nil {
		return nil, err
	}
	return s.makeForks(ctx, req, n)
}

// restoreFrom is, for a create from template tpl whose spec keeps its
// source's memory (m), the memory image the sandbox is restored from. It
// makes req the source's runtime and size and adds the source's env and
// secret env under the request's own. A request that asks for another
// runtime or size, for volumes or for network, changes nothing and is a
// FieldError naming why; so is a template this daemon cannot restore.
func (s *Service) restoreFrom(tpl string, m *memorySpec, req *CreateRequest) (*forkMemory, error) {
	why := ""
	switch {
	case s.cfg.HibernateDir == "":
		why = "this daemon keeps no memory images (no hibernate directory)"
	case !s.HibernateSupport(m.Runtime).OK:
		why = s.HibernateSupport(m.Runtime).How
	}
	if why != "" {
		return nil, &FieldError{Field: "template", Reason: fmt.Sprintf("template %s holds its source's memory, which this daemon cannot restore: %s", tpl, why)}
	}
	same := func(field string, asked, kept int64) error {
		if asked != 0 && asked != kept {
			return invalid(field, "is %d in template %s, which holds its source's running processes (a restore keeps their size)", kept, tpl)
		}
		return nil
	}
	switch {
	case req.Runtime != "" && req.Runtime != m.Runtime:
		return nil, invalid("runtime", "is %s in template %s, which holds its source's running processes", m.Runtime, tpl)
	case len(req.Mounts) > 0:
		return nil, invalid("mounts", "a sandbox restored from template %s, which holds its source's running processes, takes no volumes", tpl)
	case req.Network || req.NetworkPolicy.HasNetwork():
		return nil, invalid("network", "a sandbox restored from template %s, which holds its source's running processes, has no network", tpl)
	}
	if err := errors.Join(same("milli_cpu", req.MilliCPU, m.MilliCPU), same("memory_mb", req.MemoryMB, m.MemoryMB),
		same("disk_mb", req.DiskMB, m.DiskMB)); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(s.forkMemoryDir(tpl)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("template %s has lost its memory image: %w", tpl, ErrUnavailable)
	}
	token, err := s.Keyring.Open(m.SealedToken, memoryAD(tpl, "token"))
	if err != nil {
		return nil, fmt.Errorf("open the agent token kept with template %s: %w", tpl, err)
	}
	secretEnv := map[string]string{}
	if len(m.SealedSecretEnv) > 0 {
		plain, err := s.Keyring.Open(m.SealedSecretEnv, memoryAD(tpl, "secret-env"))
		if err != nil {
			return nil, fmt.Errorf("open the secret env kept with template %s: %w", tpl, err)
		}
		if err := json.Unmarshal(plain, &secretEnv); err != nil {
			return nil, fmt.Errorf("decode the secret env kept with template %s: %w", tpl, err)
		}
	}
	req.Runtime, req.MilliCPU, req.MemoryMB, req.DiskMB = m.Runtime, m.MilliCPU, m.MemoryMB, m.DiskMB
	req.Env = mergeMap(m.Env, req.Env)
	req.SecretEnv = mergeMap(secretEnv, req.SecretEnv)
	return &forkMemory{dir: s.forkMemoryDir(tpl), token: string(token)}, nil
}

// mergeMap is base with add over it (nil when both are empty).
func mergeMap(base, add map[string]string) map[string]string {
	if len(base)+len(add) == 0 {
		return nil
	}
	out := make(map[string]string, len(base)+len(add))
	maps.Copy(out, base)
	maps.Copy(out, add)
	return out
}

// memoryCapture is what capture keeps with a template captured with its
// source's memory: the source's agent token and secret env, in clear
// until capture seals them to the template's id.
type memoryCapture struct {
	token     string
	secretEnv map[string]string
}

// captureSpec is the spec of template tpl captured from row: spec (the
// start command of the template row was made from, if any) with, for a
// capture with memory, the memory spec; without, none (a sandbox restored
// from a template with memory passes its start command on, not its
// memory).
func (s *Service) captureSpec(spec json.RawMessage, tpl string, row store.Sandbox, mem *memoryCapture) (json.RawMessage, error) {
	var ts templateSpec
	if len(spec) > 0 {
		if err := json.Unmarshal(spec, &ts); err != nil {
			return nil, fmt.Errorf("decode the spec of the template of %s: %w", row.ID, err)
		}
	}
	if mem == nil {
		if ts.Memory == nil {
			return spec, nil
		}
		ts.Memory = nil
		return json.Marshal(ts)
	}
	src := specOf(row)
	m := &memorySpec{Runtime: src.Runtime, MilliCPU: row.CPUMillis, MemoryMB: row.MemoryMB, DiskMB: src.DiskMB, Env: row.Env}
	var err error
	if m.SealedToken, err = s.Keyring.Seal([]byte(mem.token), memoryAD(tpl, "token")); err != nil {
		return nil, err
	}
	if len(mem.secretEnv) > 0 {
		plain, _ := json.Marshal(mem.secretEnv)
		if m.SealedSecretEnv, err = s.Keyring.Seal(plain, memoryAD(tpl, "secret-env")); err != nil {
			return nil, err
		}
	}
	ts.Memory = m
	return json.Marshal(ts)
}

// forkMemoryUnsupported says why row's processes cannot be forked here,
// or "".
func (s *Service) forkMemoryUnsupported(row store.Sandbox) string {
	if s.cfg.HibernateDir == "" {
		return "this daemon keeps no memory images (no hibernate directory)"
	}
	if _, ok := s.Runtime.(runtime.Checkpointer); !ok {
		return runtime.CanCheckpoint(s.Runtime, isolation(specOf(row).Runtime)).How
	}
	if sup := s.HibernateSupport(specOf(row).Runtime); !sup.OK {
		return sup.How
	}
	if len(fromRow(row).Mounts) > 0 {
		return "a sandbox with volumes cannot be forked with its memory (its mounts are not its forks')"
	}
	return ""
}

// captureWithMemory is the work of a capture with memory (ForkWithMemory,
// SnapshotWithMemory) under the source's transition lock: the checks, the
// hibernate, the capture of a template of kind named name (or none) with
// the image, and the resume.
func (s *Service) captureWithMemory(ctx context.Context, c Caller, row store.Sandbox, name string, kind store.TemplateKind) (store.Template, error) {
	what := "fork"
	if kind == store.TemplateSnapshot {
		what = "snapshot"
	}
	if err := s.memoryPrecheck(ctx, c, row, what); err != nil {
		return store.Template{}, err
	}
	mem := &memoryCapture{}
	var err error
	if mem.token, err = s.openToken(row); err != nil {
		return store.Template{}, fmt.Errorf("%s %s with its memory: %w", what, row.ID, err)
	}
	if mem.secretEnv, err = s.openSecretEnv(row); err != nil {
		return store.Template{}, fmt.Errorf("%s %s with its memory: %w", what, row.ID, err)
	}
	// 0700 whoever made it: the images hold the sources' memory.
	if err := os.MkdirAll(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("%s %s with its memory: %w: %w", what, row.ID, ErrUnavailable, err)
	}
	if err := os.Chmod(s.forkMemoryRoot(), 0o700); err != nil {
		return store.Template{}, fmt.Errorf("%s %s with its memory: %w: %w", what, row.ID, ErrUnavailable, err)
	}
	// The source keeps its CPU and memory reserved while it is
	// hibernated here: another create taking them would leave it unable
	// to resume.
	h, err := s.hibernateHolding(ctx, row, false, c.Quota, true)
	if err != nil {
		return store.Template{}, err
	}
	// From here on, up to and including its resume, the source's fate is
	// not its caller's: a client that hangs up would leave it hibernated.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hibernateTimeout(row.MemoryMB))
	defer cancel()
	if h.Stopped {
		// Refused late (its room went meanwhile): the source runs
		// again, afresh, and the caller hears why.
		if now, gerr := s.Store.GetSandbox(ctx, row.ID); gerr == nil {
			if _, serr := s.startLocked(ctx, c, now); serr != nil {
				s.Logger.Warn("fork with memory: start the source again", "sandbox", row.ID, "err", serr)
			}
		}
		return store.Template{}, fmt.Errorf("%s %s with its memory: its checkpoint could not be made (%s): %w", what, row.ID, h.Reason, ErrUnavailable)
	}
	var t store.Template
	hib, cerr := s.Store.GetSandbox(ctx, row.ID)
	if cerr != nil {
		// Resumed all the same, from what was read before (the resume
		// needs its id, size and spec, which a hibernate leaves).
		cerr, hib = s.mapStoreErr(cerr, row.ID), row
	} else {
		t, cerr = s.capture(ctx, hib, name, kind, mem)
	}
	// The source runs again whatever the capture did.
	if _, err := s.resumeHibernated(ctx, c, hib); err != nil {
		if imgs, ierr := s.images(); cerr == nil && ierr == nil {
			s.dropTemplate(ctx, imgs, t)
		}
		if errors.Is(err, ErrNotFound) {
			return store.Template{}, fmt.Errorf("%s %s with its memory: the source was destroyed meanwhile: %w", what, row.ID, err)
		}
		return store.Template{}, fmt.Errorf("%s %s with its memory: the source stays hibernated (resume it): %w", what, row.ID, err)
	}
	if cerr != nil {
		return store.Template{}, cerr
	}
	return t, nil
}

// memoryPrecheck says why row cannot be captured with its memory (what:
// "fork" or "snapshot"), before anything of it is touched: it is not
// running, its runtime cannot, or its image has no room, passes its
// owner's disk quota, the hibernate cap or the owner's template storage.
// (The hibernate checks again, and refuses rather than stopping the
// source: hibernateHolding.)
func (s *Service) memoryPrecheck(ctx context.Context, c Caller, row store.Sandbox, what string) error {
	switch {
	case row.Owner == store.PoolOwner || row.Owner == buildOwner:
		return fmt.Errorf("sandbox %q: %w", row.ID, ErrNotFound)
	case row.State != store.StateRunning:
		return fmt.Errorf("sandbox %s is %s; a %s with memory needs it running: %w", row.ID, row.State, what, ErrConflict)
	}
	if why := s.forkMemoryUnsupported(row); why != "" {
		return &FieldError{Field: "memory", Reason: fmt.Sprintf("cannot %s this sandbox with its memory: %s", what, why)}
	}
	if why := s.imageRoom(row); why != "" {
		return fmt.Errorf("%s %s with its memory: %s: %w", what, row.ID, strings.TrimPrefix(why, "stopped: "), ErrUnavailable)
	}
	if why := s.imageQuota(row, c.Quota); why != "" {
		return &QuotaError{Reason: strings.TrimPrefix(why, "stopped: ")}
	}
	// The cap, tried (a reservation, given back at once): the
	// hibernate's own is made under the same transition lock.
	why := s.imageCap(row)
	if why == "" {
		s.hibImages.drop(row.ID)
	} else {
		return fmt.Errorf("%s %s with its memory: %s: %w", what, row.ID, strings.TrimPrefix(why, "stopped: "), ErrUnavailable)
	}
	return s.memoryStorage(ctx, row, what)
}

// memoryStorage refuses, before anything is done, a capture with memory
// (what: "fork" or "snapshot") that would take its owner past
// Config.TemplateStorageMB: what the owner's templates hold, plus the
// memory image (at most the source's memory) and its files (its image
// and what it wrote over it). A QuotaError; capture's own check
// (checkStorage) runs as for any capture.
func (s *Service) memoryStorage(ctx context.Context, row store.Sandbox, what string) error {
	if s.cfg.TemplateStorageMB <= 0 {
		return nil
	}
	used, err := s.Store.TemplateBytes(ctx, row.Owner)
	if err != nil {
		return fmt.Errorf("%s %s with its memory: the owner's template storage: %w: %w", what, row.ID, ErrUnavailable, err)
	}
	need := row.MemoryMB<<20 + s.filesEstimate(ctx, row)
	if limit := s.cfg.TemplateStorageMB << 20; used+need > limit {
		return &QuotaError{Reason: fmt.Sprintf("a %s with memory of %s needs about %d MB of template storage (its memory and its files); the owner's templates and snapshots hold %d MB of %d MB",
			what, row.ID, need>>20, used>>20, s.cfg.TemplateStorageMB)}
	}
	return nil
}

// filesEstimate is what a capture of row's file system will weigh at
// least: its image's size and, where the runtime says, what the sandbox
// wrote over it. What is unknown counts 0.
func (s *Service) filesEstimate(ctx context.Context, row store.Sandbox) int64 {
	var n int64
	if imgs, err := s.images(); err == nil {
		if img, err := imgs.InspectImage(ctx, row.Image); err == nil {
			n += img.Size
		}
	}
	if ur, ok := s.Runtime.(runtime.UsageReader); ok {
		if u, err := ur.Usage(ctx, row.ID); err == nil {
			n += int64(u.DiskUsed)
		}
	}
	return n
}

// forkTokenTimeout bounds the hand-over of a fork's token to its restored
// agent (one local round trip): a program of the source's, restored in
// the fork, may hold the agent's socket and never answer.
const forkTokenTimeout = 10 * time.Second

// handForkToken is the create's token step for sandbox id restored from
// m: the restored agent, which takes m's token (its source's), is handed
// token, the sandbox's own, and env, its secret env. An agent that does
// not take them within forkTokenTimeout is ErrUnavailable naming why.
func (s *Service) handForkToken(ctx context.Context, id string, m *forkMemory, token string, env map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, forkTokenTimeout)
	defer cancel()
	a := agent.NewClient(s.dialer(id), m.token)
	defer a.Close()
	if err := a.Configure(ctx, agent.Configuration{Env: env, NewToken: token}); err != nil {
		return fmt.Errorf("hand the restored agent of %s its token (bound %s): %w: %w", id, forkTokenTimeout, ErrUnavailable, err)
	}
	return nil
}

// keepForkMemory hard-links sandbox id's hibernate image into template
// tpl's memory directory (made whole under a temporary name, then
// renamed) and returns its size. From then on the image counts in the
// hibernate storage cap as the template's, of id's owner (hibernatecap.go):
// the files it links leave id's entry, which its hibernate made.
func (s *Service) keepForkMemory(id, tpl string) (int64, error) {
	src := s.imageDir(id)
	dst := s.forkMemoryDir(tpl)
	tmp := dst + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return 0, fmt.Errorf("keep the memory image: %w: %w", ErrUnavailable, err)
	}
	entries, err := os.ReadDir(src)
	var size int64
	for _, e := range entries {
		if err != nil {
			break
		}
		if !e.Type().IsRegular() {
			continue
		}
		var fi os.FileInfo
		if fi, err = e.Info(); err == nil {
			size += fi.Size()
			err = os.Link(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name()))
		}
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("keep the memory image: %w: %w", ErrUnavailable, err)
	}
	s.hibImages.relink(id, ownBytes(src), forkMemoryKey(tpl), "", imageBytes(dst))
	return size, nil
}

// forkMemoryName is the directory of the fork templates' memory images
// in the hibernate directory: the same file system, since an image is
// hard-linked (beside it, the hibernate directory on a file system of its
// own failed the link, EXDEV, once the source was checkpointed). Not a
// sandbox id (those are DNS labels), so no image directory is it.
const forkMemoryName = ".forkmem"

// forkMemoryRoot holds the fork templates' memory images.
func (s *Service) forkMemoryRoot() string {
	return filepath.Join(s.cfg.HibernateDir, forkMemoryName)
}

// forkMemoryDir is template tpl's memory image directory.
func (s *Service) forkMemoryDir(tpl string) string { return filepath.Join(s.forkMemoryRoot(), tpl) }

// dropForkMemory removes template tpl's memory image, if any, and its
// bytes from the hibernate storage cap's ledger.
func (s *Service) dropForkMemory(tpl string) {
	if s.cfg.HibernateDir == "" {
		return
	}
	if err := s.removeForkMemory(s.forkMemoryDir(tpl)); err != nil {
		s.Logger.Warn("template: remove a fork's memory image", "template", tpl, "err", err)
		return // what is left stays counted; the next start's sweep removes it
	}
	s.hibImages.drop(forkMemoryKey(tpl))
}

// removeForkMemory removes the memory image directory dir; a hibernate
// image that shared its files holds them alone then (reclaimShared).
func (s *Service) removeForkMemory(dir string) error {
	shared := sharedFiles(dir)
	err := os.RemoveAll(dir)
	s.reclaimShared(shared)
	return err
}

// sweepForkMemory removes, at startup, the memory images no template
// names (a template deleted by a dead process, a capture cut short) and
// temporary ones, and counts those it keeps in the hibernate storage cap
// as their templates' owners' (after sweepImages, which counts a
// hibernate image's files shared with one of them as the template's).
func (s *Service) sweepForkMemory(ctx context.Context) {
	if s.cfg.HibernateDir == "" {
		return
	}
	// Where a daemon before this one kept them (beside the hibernate
	// directory): a template's memory image serves only its fork's
	// creates, so none of them is needed any more.
	_ = s.removeForkMemory(filepath.Join(filepath.Dir(s.cfg.HibernateDir), "forkmem"))
	entries, err := os.ReadDir(s.forkMemoryRoot())
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.Contains(e.Name(), ".") {
			if t, err := s.Store.GetTemplate(ctx, e.Name()); !errors.Is(err, store.ErrNotFound) {
				// Its template's, or unknown (counted in the total, as
				// nobody's): kept.
				s.hibImages.setOwned(forkMemoryKey(e.Name()), t.Owner, imageBytes(filepath.Join(s.forkMemoryRoot(), e.Name())))
				continue
			}
		}
		if err := s.removeForkMemory(filepath.Join(s.forkMemoryRoot(), e.Name())); err != nil {
			s.Logger.Warn("reconcile: remove a stale fork memory image", "name", e.Name(), "err", err)
		}
	}
}
