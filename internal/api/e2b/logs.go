package e2b

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// maxLogLimit caps one logs answer, as E2B's default.
const maxLogLimit = 1000

// sandboxLogEntry is E2B's SandboxLogEntry; a line of the sandbox's logs
// (service.Logs: the processes the daemon ran in it) with its stream as
// the level (stderr is error) and its process in fields.
type sandboxLogEntry struct {
	Timestamp string            `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

type sandboxLog struct {
	Timestamp string `json:"timestamp"`
	Line      string `json:"line"`
}

// logsV1 is GET /sandboxes/{id}/logs?start=<ms>&limit=: {logs, logEntries},
// the oldest first from start.
func (f *Facade) logsV1(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	entries, err := f.logEntries(r, c, "start", "forward")
	if err != nil {
		return err
	}
	logs := make([]sandboxLog, 0, len(entries))
	for _, e := range entries {
		logs = append(logs, sandboxLog{Timestamp: e.Timestamp, Line: e.Message})
	}
	writeJSON(w, http.StatusOK, struct {
		Logs       []sandboxLog      `json:"logs"`
		LogEntries []sandboxLogEntry `json:"logEntries"`
	}{logs, entries})
	return nil
}

// logsV2 is GET /v2/sandboxes/{id}/logs?cursor=<ms>&direction=&limit=&level=&search=:
// {logs}.
func (f *Facade) logsV2(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	q := r.URL.Query()
	dir := q.Get("direction")
	if dir == "" {
		dir = "forward"
	}
	if dir != "forward" && dir != "backward" {
		return badRequest("direction must be forward or backward, not %q", dir)
	}
	entries, err := f.logEntries(r, c, "cursor", dir)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Logs []sandboxLogEntry `json:"logs"`
	}{entries})
	return nil
}

// logEntries reads the sandbox's kept lines (never a follow) selected by
// the query: from the time in ms (cursor, start) forward, or up to it
// backward (newest first), at most limit, level and search filtering.
func (f *Facade) logEntries(r *http.Request, c service.Caller, timeParam, dir string) ([]sandboxLogEntry, error) {
	q := r.URL.Query()
	at, err := msParam(q, timeParam)
	if err != nil {
		return nil, err
	}
	limit := maxLogLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 || limit > maxLogLimit {
			return nil, badRequest("limit must be an integer from 0 to %d, not %q", maxLogLimit, v)
		}
	}
	level := q.Get("level")
	switch level {
	case "", "debug", "info", "warn":
		level = ""
	case "error":
	default:
		return nil, badRequest("level must be debug, info, warn or error, not %q", level)
	}
	search := q.Get("search")
	var lq service.LogQuery
	if dir == "forward" && !at.IsZero() {
		lq.Since = at
	}
	out := []sandboxLogEntry{}
	err = f.svc.Logs(r.Context(), c, r.PathValue("id"), lq, func(lines []service.LogLine) error {
		for _, l := range lines {
			if dir == "backward" && !at.IsZero() && l.Time.After(at) {
				continue
			}
			e := sandboxLogEntry{
				Timestamp: l.Time.UTC().Format(time.RFC3339Nano), Level: "info", Message: l.Text,
				Fields: map[string]string{"source": l.Source, "stream": l.Stream},
			}
			if l.Stream == "stderr" {
				e.Level = "error"
			}
			if (level != "" && e.Level != level) || (search != "" && !strings.Contains(l.Text, search)) {
				continue
			}
			out = append(out, e)
			if dir == "forward" && len(out) > limit {
				out = out[:limit]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dir == "backward" {
		if len(out) > limit {
			out = out[len(out)-limit:]
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// maxLogMS is the last millisecond of year 9999: the latest time a log
// line can have (RFC 3339's).
var maxLogMS = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()

// msParam reads query parameter name as unix milliseconds, from 0 to the
// end of year 9999; absent is zero.
func msParam(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxLogMS {
		return time.Time{}, badRequest("%s must be unix milliseconds from 0 to %d, not %q", name, maxLogMS, v)
	}
	return time.UnixMilli(n), nil
}
