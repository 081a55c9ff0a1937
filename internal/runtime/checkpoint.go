package runtime

import (
	"context"
	"errors"
)

// Checkpointer is a Runtime that can save a sandbox's processes and
// memory to disk and bring them back: hibernate. A runtime that does not
// implement it checkpoints nothing (see CheckpointSupport).
//
// The image a checkpoint writes holds the sandbox's memory, its secrets
// among them: the caller keeps it in a directory only the daemon reads
// (0700, outside anything a sandbox mounts).
type Checkpointer interface {
	// CanCheckpoint reports whether sandboxes of isolation iso can be
	// checkpointed on this host, and if not, why.
	CanCheckpoint(iso Isolation) CheckpointSupport

	// Checkpoint saves the processes and memory of the running (or
	// paused) sandbox into dir, then stops it: its processes are gone
	// and its memory is freed (no process, no cgroup), its filesystem,
	// socket directory and network stay for Restore. dir must not exist;
	// it appears only once the image in it is complete (written into
	// dir+".tmp-"+a random suffix, renamed), so a dir that exists holds a
	// whole image. A caller killed midway leaves that temporary directory;
	// the save may go on without it (runsc's does) and stop the sandbox.
	//
	// On failure nothing is at dir and the sandbox is left running as it
	// was (paused if it was paused), or, when the runtime's checkpoint
	// stopped it before failing, stopped: the caller looks (Inspect).
	// A missing sandbox is ErrNotFound, one that is not running
	// ErrNotRunning, one whose isolation cannot be checkpointed
	// ErrCheckpointUnsupported.
	Checkpoint(ctx context.Context, sandboxID, dir string) error

	// Restore starts the checkpointed sandbox from the image in dir and
	// returns once its agent answers: its processes go on where they were
	// (their memory, open files, listening sockets; connections from
	// outside were closed). A sandbox that is running already is left as
	// it is (nil). The image stays in dir; the caller removes it. A
	// missing sandbox is ErrNotFound; a dir without an image
	// ErrNoCheckpoint. When Restore fails the sandbox is left stopped.
	Restore(ctx context.Context, sandboxID, dir string) error
}

// CheckpointSealer is a Checkpointer whose images are sealed at rest
// (the oci runtime's): SealCheckpoint seals the image in dir that a
// checkpoint its caller was killed during left whole but in clear (the
// save went on without it); one sealed already is left as it is.
type CheckpointSealer interface {
	SealCheckpoint(dir string) error
}

// CheckpointSupport is what a runtime says of its checkpoints for one
// isolation.
type CheckpointSupport struct {
	// OK: Checkpoint and Restore work for such sandboxes.
	OK bool
	// How names the mechanism ("runsc checkpoint") or, when !OK, why
	// not; for logs and for the answer of a hibernate that stopped.
	How string
}

// Errors of Checkpointer.
var (
	// ErrCheckpointUnsupported: this runtime cannot checkpoint the
	// sandbox's isolation on this host.
	ErrCheckpointUnsupported = errors.New("checkpoint not supported")
	// ErrNoCheckpoint: there is no complete checkpoint image to restore.
	ErrNoCheckpoint = errors.New("no checkpoint image")
)

// CanCheckpoint reports whether rt (a Runtime, or a consumer's narrower
// view of one) checkpoints sandboxes of isolation iso: a runtime that is
// not a Checkpointer never does.
func CanCheckpoint(rt any, iso Isolation) CheckpointSupport {
	c, ok := rt.(Checkpointer)
	if !ok {
		return CheckpointSupport{How: "this runtime cannot checkpoint (the engine-free runtime, --engine oci, checkpoints gVisor sandboxes)"}
	}
	return c.CanCheckpoint(iso)
}
