package daytona

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Archive is Daytona's "stopped, filesystem moved to cheap storage". Here
// the filesystem is the stopped container's, kept as it is, so archiving
// is the service's Archive: a stop plus a mark (Sandbox.ArchivedAt), which
// a start clears; where the runtime can checkpoint the sandbox, a
// hibernate plus the mark, whose start resumes its processes.
// Auto-archive is the service's rule too (Lifecycle.AutoArchive): the
// background loop marks a sandbox stopped for that long. Daytona's view:
// archived is stopped (or hibernated) and marked.

// Auto-archive intervals, in minutes: Daytona's default (7 days) when a
// create sets none, and its maximum (30 days), which 0 stands for and
// larger values are capped to.
const (
	defaultAutoArchive = 7 * 24 * 60
	maxAutoArchive     = int(service.MaxAutoArchive / time.Minute)
)

// daytonaState is Daytona's state of sb.
func daytonaState(sb service.Sandbox) string {
	if (sb.State == service.StateStopped || sb.State == service.StatePaused && !sb.HibernatedAt.IsZero()) && !sb.ArchivedAt.IsZero() {
		return "archived" // stopped, or hibernated by the archive
	}
	return stateName(sb.State)
}

// autoArchive is the auto-archive rule for Daytona's interval n (minutes):
// 0 is the maximum, and so is anything larger; negative is a 400.
func autoArchive(n int) (time.Duration, error) {
	if n < 0 {
		return 0, badRequest("autoArchiveInterval must be 0 or more minutes (0: the maximum, %d)", maxAutoArchive)
	}
	if n == 0 || n > maxAutoArchive {
		n = maxAutoArchive
	}
	return time.Duration(n) * time.Minute, nil
}

// archive is POST /sandbox/{id}/archive: the sandbox is stopped (if it
// runs; Daytona wants it stopped first, sandboxd stops it) and marked
// archived; where the runtime can checkpoint it (gVisor under --engine
// oci) and it has no auto-delete, it is hibernated instead (Service.Archive),
// its processes and sessions kept on disk for the start that recovers it.
// Either reads "archived". Repeating it is harmless. Start recovers it.
// With auto-delete 0 the stop destroys it, as a stop does.
func (f *Facade) archive(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	was := sb.State
	if sb, err = f.svc.Archive(r.Context(), c, sb.ID); err != nil {
		return err
	}
	if was != service.StateStopped && sb.State != service.StatePaused {
		f.dropSessions(sb.ID) // their shells ended with the stop
	}
	writeJSON(w, http.StatusOK, stoppedDTO(sb, toolboxBase(r)))
	return nil
}

// setAutoArchive is POST /sandbox/{id}/autoarchive/{minutes} (0: the
// maximum). It changes when a stopped sandbox becomes archived.
func (f *Facade) setAutoArchive(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	n, err := strconv.Atoi(r.PathValue("minutes"))
	if err != nil {
		return badRequest("minutes must be an integer")
	}
	d, err := autoArchive(n)
	if err != nil {
		return err
	}
	return f.setRules(w, r, c, func(l *service.Lifecycle) error { l.AutoArchive = d; return nil })
}
