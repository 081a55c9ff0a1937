package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Checkpoints (hibernate). A gVisor sandbox is checkpointed by runsc
// itself: `runsc checkpoint --image-path DIR` saves its kernel's state,
// every process and its memory included, into DIR/checkpoint.img and
// stops the sandbox; `runsc restore --image-path DIR` starts it again
// from the same bundle (root file system, socket directory, cgroup path),
// its processes going on where they were. The agent's listening socket is
// a host socket runsc's file proxy made (--host-uds=create): the restored
// kernel makes it again at the same path, so the daemon dials the agent
// as before.
//
// The same image also starts another sandbox (Spec.RestoreImage: a fork
// with memory): `runsc restore` of it under another container id, with
// another bundle (root file system, socket directory, cgroup, network
// namespace), runs the checkpointed processes there. Measured on this
// host's runsc (Debian's 0.0~20221219): the restored kernel reopens its
// files by path in the new root file system, so the root must be a copy
// of the checkpointed one taken while it was checkpointed (the service
// commits it then); the agent's host socket is made in the new socket
// directory; the processes, their memory, env and hostname are the
// checkpointed sandbox's, the agent's token too. `runsc checkpoint
// --leave-running` does not work here (the command waits on the
// container it restored and the restored one answers EIO for every file
// of its root), so the parent is checkpointed, stopped and restored.
//
// A runc-class sandbox would need CRIU (through runc's checkpoint; crun
// is built without it here). On this class of host Debian's criu fails
// its own `criu check`, so CanCheckpoint says no, with that reason, and
// the daemon stops such sandboxes instead of hibernating them.

// checkpointImage is the file runsc writes into the image directory.
const checkpointImage = "checkpoint.img"

var _ runtime.Checkpointer = (*Runtime)(nil)

// CanCheckpoint implements runtime.Checkpointer.
func (r *Runtime) CanCheckpoint(iso runtime.Isolation) runtime.CheckpointSupport {
	if iso == runtime.IsolationGVisor {
		if r.opts.GVisorBinary == "" {
			return runtime.CheckpointSupport{How: "runsc is not installed"}
		}
		return runtime.CheckpointSupport{OK: true, How: "runsc checkpoint"}
	}
	return runtime.CheckpointSupport{How: "runc-class checkpoint needs CRIU: " + criuStatus()}
}

// criuStatus says why CRIU cannot checkpoint here: not installed, its
// check failing (with the check's first error line), or, when the check
// passes, that this runtime does not use it ( crun is built without
// CRIU). `criu check` runs once per process.
var criuStatus = sync.OnceValue(func() string {
	criu, err := exec.LookPath("criu")
	if err != nil {
		return "criu is not installed (scripts/setup-oci.sh installs it)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, criu, "check")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runTracked(cmd); err != nil {
		return fmt.Sprintf("`criu check` fails on this host (%v): %s", err, firstErrorLine(out.String()))
	}
	return "`criu check` passes, but this runtime does not checkpoint runc-class sandboxes"
})

// firstErrorLine is the first line of out that reads as an error, else
// its first line, bounded.
func firstErrorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	pick := lines[0]
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), "error") {
			pick = l
			break
		}
	}
	pick = strings.TrimSpace(pick)
	if len(pick) > 200 {
		pick = pick[:200] + "…"
	}
	return pick
}

// CheckpointTimeout bounds a checkpoint, whatever its caller's context
// (which cannot cut it short: Checkpoint), unless that context's deadline
// is later.
const CheckpointTimeout = 10 * time.Minute

// Checkpoint implements runtime.Checkpointer. The caller's context does
// not cancel it: CheckpointTimeout bounds it.
func (r *Runtime) Checkpoint(ctx context.Context, sandboxID, dir string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("checkpoint sandbox %s: image directory %q is not absolute", sandboxID, dir)
	}
	// The save goes on without its caller (a client that hangs up): a
	// runsc checkpoint killed mid-save does not stop the save inside
	// gVisor, which then shuts the sandbox down, and the image would go
	// with tmp. Its own bound instead.
	bound := CheckpointTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) > bound {
		bound = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	meta, unlock, err := r.lockedMeta(sandboxID, "checkpoint")
	if err != nil {
		return err
	}
	defer unlock()
	if sup := r.CanCheckpoint(meta.Isolation); !sup.OK {
		return fmt.Errorf("checkpoint sandbox %s: %w: %s", sandboxID, runtime.ErrCheckpointUnsupported, sup.How)
	}
	st := r.status(sandboxID)
	if st.State != runtime.StateRunning {
		return fmt.Errorf("checkpoint sandbox %s (%s): %w", sandboxID, st.Detail, runtime.ErrNotRunning)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("checkpoint sandbox %s: image directory %s exists", sandboxID, dir)
	}
	if err := r.step("checkpoint"); err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, err)
	}
	tmp := dir + tmpPrefix + randHex(4)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, noSpace(err))
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	run := r.readState(sandboxID)
	if err := r.park(ctx, meta, run.Paused); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, err)
	}
	if err := r.step("parked"); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, err)
	}
	if err := r.ociRun(ctx, meta, "checkpoint", "--image-path", tmp, sandboxID); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, noSpace(err))
	}
	// runsc stopped the sandbox with the save: its process exits (this
	// waits for it), the OCI runtime forgets it and its cgroup goes.
	if err := r.stop(ctx, meta); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: after the save: %w", sandboxID, err)
	}
	r.removeCgroup(sandboxID)
	// From here a failure restores the sandbox from the image in tmp.
	if err := r.step("checkpointed"); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, err)
	}
	if r.opts.ImageSealer != nil {
		if err := sealImage(tmp, r.opts.ImageSealer); err != nil {
			r.afterFailedCheckpoint(ctx, meta, run, tmp)
			return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, noSpace(err))
		}
	}
	if err := syncDir(tmp); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, noSpace(err))
	}
	if err := os.Rename(tmp, dir); err != nil {
		r.afterFailedCheckpoint(ctx, meta, run, tmp)
		return fmt.Errorf("checkpoint sandbox %s: %w", sandboxID, err)
	}
	ok = true
	mu := r.stateMu(sandboxID)
	mu.Lock()
	defer mu.Unlock()
	cur := r.readState(sandboxID)
	cur.Paused, cur.Checkpointed = false, true
	if err := r.writeState(sandboxID, cur); err != nil {
		r.log.Warn("record a sandbox's checkpoint", "sandbox", sandboxID, "err", err)
	}
	return nil
}

// runscKnows reports whether runsc has a record of the gVisor sandbox
// (its state file, named unlike crun's and runc's directory: ociKnows).
func (r *Runtime) runscKnows(meta *sandboxMeta) bool {
	if meta.Isolation != runtime.IsolationGVisor {
		return false
	}
	_, err := os.Stat(filepath.Join(r.stateRoot(meta), meta.ID+"_sandbox:"+meta.ID+".state"))
	return err == nil
}

// parkTimeout bounds the wait for the agent to park.
const parkTimeout = 10 * time.Second

// park has the agent close its socket and connections (cmd/toolboxd's
// park.go: gVisor cannot save a socket bound to a host path) and waits
// until it says so: the file runtime.AgentParkedName in its socket
// directory. (runsc's file proxy keeps listening on the host socket, so a
// dial cannot tell. A marker the sandbox plants makes the save start
// early and fail, the sandbox running on: no harm but to itself.) A
// paused sandbox is thawed for it: the agent must run to park, and runsc
// pauses the sandbox itself for the save.
func (r *Runtime) park(ctx context.Context, meta *sandboxMeta, paused bool) error {
	if paused {
		if err := r.ociRun(ctx, meta, "resume", meta.ID); err != nil {
			return fmt.Errorf("thaw for the checkpoint: %w", err)
		}
		r.setPaused(meta.ID, false)
	}
	// A marker an earlier park left (or the sandbox planted) is no answer.
	if err := os.Remove(filepath.Join(r.SocketDir(meta.ID), runtime.AgentParkedName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("park the agent: %w", err)
	}
	if err := r.ociRun(ctx, meta, "kill", meta.ID, "SIGUSR1"); err != nil {
		return fmt.Errorf("park the agent: %w", err)
	}
	deadline := time.Now().Add(parkTimeout)
	marker := filepath.Join(r.SocketDir(meta.ID), runtime.AgentParkedName)
	for {
		if fi, err := os.Lstat(marker); err == nil && fi.Mode().IsRegular() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("park the agent: it did not say it parked within %s; output tail: %q", parkTimeout, tail(filepath.Join(r.rwDir(meta.ID), "output.log"), 512))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("park the agent: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// unpark has a parked agent listen again. The socket's file goes first:
// inside gVisor the agent may not remove a file its file proxy bound.
// (Once it is gone a wake-up the sandbox sends itself may have the agent
// listen before this one: the agent then ignores this one.)
func (r *Runtime) unpark(ctx context.Context, meta *sandboxMeta) error {
	if err := os.Remove(r.AgentSocketPath(meta.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wake the agent: %w", err)
	}
	return r.wake(ctx, meta)
}

// wake sends the agent its wake-up signal; its old socket's file must
// be gone (unpark, restoreFrom).
func (r *Runtime) wake(ctx context.Context, meta *sandboxMeta) error {
	if err := r.ociRun(ctx, meta, "kill", meta.ID, "SIGUSR2"); err != nil {
		return fmt.Errorf("wake the agent: %w", err)
	}
	return nil
}

// wakeIfParked wakes the agent of a running gVisor sandbox that a
// checkpoint parked and nothing woke: the daemon died between the park
// and the save (the reconciler then froze it again, and this is its
// resume or start). The agent must have said it parked and must not
// answer now: a marker the sandbox planted beside a listening agent
// changes nothing.
func (r *Runtime) wakeIfParked(ctx context.Context, meta *sandboxMeta) {
	if meta.Isolation != runtime.IsolationGVisor {
		return
	}
	if fi, err := os.Lstat(filepath.Join(r.SocketDir(meta.ID), runtime.AgentParkedName)); err != nil || !fi.Mode().IsRegular() {
		return
	}
	if r.answers(ctx, meta.ID) {
		return
	}
	r.log.Warn("waking an agent a cut-short checkpoint left parked", "sandbox", meta.ID)
	if err := r.unpark(ctx, meta); err != nil {
		r.log.Warn("wake a parked agent", "sandbox", meta.ID, "err", err)
	}
}

// parkedProbe bounds wakeIfParked's look at the agent: a parked agent's
// socket still takes connections (runsc's file proxy listens on) and
// answers nothing.
const parkedProbe = 2 * time.Second

// answers reports whether the sandbox's agent answers its health check
// within parkedProbe.
func (r *Runtime) answers(ctx context.Context, id string) bool {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.dialAgent(ctx, id)
		},
		DisableKeepAlives: true,
	}}
	defer hc.CloseIdleConnections()
	return runtime.ProbeHealth(ctx, hc, parkedProbe) == nil
}

// setPaused records a gVisor sandbox's pause (runsc's own, which the
// cgroup freezer does not show).
func (r *Runtime) setPaused(id string, paused bool) {
	mu := r.stateMu(id)
	mu.Lock()
	defer mu.Unlock()
	st := r.readState(id)
	st.Paused = paused
	if err := r.writeState(id, st); err != nil {
		r.log.Warn("record a sandbox's pause", "sandbox", id, "err", err)
	}
}

// afterFailedCheckpoint leaves the sandbox as it was when a checkpoint
// failed: runsc pauses the sandbox's kernel for the save and may leave it
// so; the agent is woken (it may have parked), and a sandbox that was
// paused is paused again. A sandbox the save stopped (the failure came
// after it) is restored from the image in tmp, which the caller then
// removes; without an image it stays stopped.
func (r *Runtime) afterFailedCheckpoint(ctx context.Context, meta *sandboxMeta, before runState, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if p, alive := livePid(r.readState(meta.ID)); alive {
		p.close()
	} else {
		if !hasCheckpoint(tmp) {
			r.log.Warn("a failed checkpoint stopped the sandbox and left no image", "sandbox", meta.ID)
			return
		}
		if err := r.restoreFrom(ctx, meta, tmp); err != nil {
			r.log.Warn("restore after a failed checkpoint", "sandbox", meta.ID, "err", err)
			return
		}
		if before.Paused {
			r.pauseAgain(ctx, meta)
		}
		return
	}
	// runsc resumes a kernel whose save failed; a resume of a running
	// sandbox fails harmlessly.
	_ = r.ociRun(ctx, meta, "resume", meta.ID)
	if err := r.unpark(ctx, meta); err != nil {
		r.log.Warn("wake the agent after a failed checkpoint", "sandbox", meta.ID, "err", err)
	}
	if err := r.waitAgentReady(ctx, meta.ID); err != nil {
		r.log.Warn("the agent after a failed checkpoint", "sandbox", meta.ID, "err", err)
	}
	if before.Paused {
		r.pauseAgain(ctx, meta)
	}
}

// pauseAgain pauses a sandbox a failed checkpoint found paused.
func (r *Runtime) pauseAgain(ctx context.Context, meta *sandboxMeta) {
	if err := r.ociRun(ctx, meta, "pause", meta.ID); err != nil {
		r.log.Warn("pause again after a failed checkpoint", "sandbox", meta.ID, "err", err)
		return
	}
	r.setPaused(meta.ID, true)
}

// syncDir flushes the files of dir and dir itself to disk: the image
// survives a power loss once renamed into place.
func syncDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Restore implements runtime.Checkpointer.
func (r *Runtime) Restore(ctx context.Context, sandboxID, dir string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	meta, unlock, err := r.lockedMeta(sandboxID, "restore")
	if err != nil {
		return err
	}
	defer unlock()
	if sup := r.CanCheckpoint(meta.Isolation); !sup.OK {
		return fmt.Errorf("restore sandbox %s: %w: %s", sandboxID, runtime.ErrCheckpointUnsupported, sup.How)
	}
	if st := r.status(sandboxID); st.State == runtime.StateRunning {
		return nil
	}
	if !hasCheckpoint(dir) {
		return fmt.Errorf("restore sandbox %s: %w in %s", sandboxID, runtime.ErrNoCheckpoint, dir)
	}
	if err := r.step("restore"); err != nil {
		return fmt.Errorf("restore sandbox %s: %w", sandboxID, err)
	}
	if err := r.restoreFrom(ctx, meta, dir); err != nil {
		return fmt.Errorf("restore sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// restoreFrom starts the sandbox from the image in dir. On failure the
// sandbox is left stopped: a half-restored one would answer nothing. The
// caller holds the sandbox's lock.
func (r *Runtime) restoreFrom(ctx context.Context, meta *sandboxMeta, dir string) error {
	id := meta.ID
	// What the checkpoint's stop left: the OCI runtime's record of the
	// container (the id must be free), and after a reboot the root file
	// system's mount.
	if err := r.ociDelete(ctx, meta); err != nil {
		return err
	}
	if err := r.mountRootfs(id, meta.ImageDir); err != nil {
		return err
	}
	if err := os.Mkdir(r.SocketDir(id), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("socket dir: %w", err)
	}
	// The restored agent binds its socket again at its path once woken
	// (launch wakes it): the old socket's file goes now, before anything
	// of the sandbox runs (a wake-up the sandbox sends itself may have the
	// agent listen before the daemon's). Nothing else of the socket
	// directory is touched: the restored kernel finds again the files it
	// had open there (the parked file, which the agent removes once it
	// listens).
	if err := os.Remove(r.AgentSocketPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the old agent socket: %w", err)
	}
	if err := r.launch(ctx, id, meta, dir); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if serr := r.stop(stopCtx, meta); serr != nil {
			r.log.Warn("stop after a failed restore", "sandbox", id, "err", serr)
		}
		return err
	}
	return nil
}
