package oci

import (
	"context"
	"time"
)

// SetFault makes Create fail at the step fault names (tests).
func (r *Runtime) SetFault(fault func(step string) error) { r.fault = fault }

// Unpack is unpack, for the hostile archive tests.
var Unpack = unpack

// Unpacks is how many image unpacks the runtime started.
func (r *Runtime) Unpacks() int64 { return r.images.unpacks.Load() }

// SetExportIdle sets how long an image's export may send nothing.
func SetExportIdle(d time.Duration) (old time.Duration) { old, exportIdle = exportIdle, d; return old }

// NetNames is netNames, for the tests that play a reboot.
var NetNames = netNames

// ReaperPasses is how many passes the reaper made.
func ReaperPasses() int64 { return reaper.passes.Load() }

// Park parks the sandbox's agent, as a checkpoint does before its save
// (tests of a checkpoint cut short).
func (r *Runtime) Park(ctx context.Context, id string) error {
	meta, err := r.readMeta(id)
	if err != nil {
		return err
	}
	return r.park(ctx, meta, false)
}
