package daytona

import (
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Archive is Daytona's "stopped, filesystem moved to cheap storage". Here
// the filesystem is the stopped container's, kept as it is, so archiving
// is stopping plus a mark (tagArchived), and starting an archived sandbox
// recovers it like any stopped one. Daytona's view:
//
//   - archived: stopped, and archived (POST archive) or stopped by this
//     facade at least the auto-archive interval ago (tagStoppedAt);
//   - a start clears both marks.
//
// Auto-archive therefore needs no reaper pass: it is a view of how long a
// sandbox has been stopped, computed when the sandbox is read. A sandbox
// stopped by another edge (the native API) has no stop time and is
// archived only on request.

// Auto-archive intervals, in minutes: Daytona's default (7 days) when a
// create sets none, and what 0 means ("the maximum", 30 days).
const (
	defaultAutoArchive = 7 * 24 * 60
	maxAutoArchive     = 30 * 24 * 60
)

// daytonaState is Daytona's state of sb at now.
func daytonaState(sb service.Sandbox, now time.Time) string {
	if sb.State == service.StateStopped && archived(sb.Tags, now) {
		return "archived"
	}
	return stateName(sb.State)
}

// archived reports whether a stopped sandbox's tags make it archived at
// now.
func archived(tags map[string]string, now time.Time) bool {
	if tags[tagArchived] == "true" {
		return true
	}
	at, err := strconv.ParseInt(tags[tagStoppedAt], 10, 64)
	if err != nil {
		return false
	}
	interval := autoArchiveOf(tags)
	if interval == 0 {
		interval = maxAutoArchive
	}
	return !now.Before(time.Unix(at, 0).Add(time.Duration(interval) * time.Minute))
}

// autoArchiveOf is the auto-archive interval in minutes (0: the maximum);
// Daytona's default for a sandbox that never set one.
func autoArchiveOf(tags map[string]string) int {
	n, err := strconv.Atoi(tags[tagAutoArchive])
	if err != nil {
		return defaultAutoArchive
	}
	return n
}

func validAutoArchive(n int) error {
	if n < 0 || n > maxAutoArchive {
		return badRequest("autoArchiveInterval must be between 0 and %d minutes", maxAutoArchive)
	}
	return nil
}

// archive is POST /sandbox/{id}/archive: the sandbox is stopped (if it
// runs; Daytona wants it stopped first, sandboxd stops it) and marked
// archived. Repeating it is harmless. Start recovers it.
func (f *Facade) archive(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State == service.StateCreating {
		return errorf(http.StatusConflict, "sandbox %s is still being created", sb.ID)
	}
	// Mark first, so the stop's state event already says archived.
	tags := maps.Clone(sb.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[tagArchived] = "true"
	if sb, err = f.svc.UpdateSandbox(r.Context(), c, sb.ID, service.Update{Tags: tags}); err != nil {
		return err
	}
	if sb.State != service.StateStopped {
		d, err := f.stopSandbox(r, c, sb.ID)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, d)
		return nil
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// setAutoArchive is POST /sandbox/{id}/autoarchive/{minutes} (0: the
// maximum). It changes when a stopped sandbox shows as archived.
func (f *Facade) setAutoArchive(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	n, err := strconv.Atoi(r.PathValue("minutes"))
	if err != nil {
		return badRequest("minutes must be an integer")
	}
	if err := validAutoArchive(n); err != nil {
		return err
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	tags := maps.Clone(sb.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[tagAutoArchive] = strconv.Itoa(n)
	if sb, err = f.svc.UpdateSandbox(r.Context(), c, sb.ID, service.Update{Tags: tags}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}
