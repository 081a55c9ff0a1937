package v1

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/service"
)

// logWriteTimeout bounds one write of a logs answer: a client that reads
// nothing for this long is dropped (its lines were never held for it).
const logWriteTimeout = 30 * time.Second

// maxLogTail bounds tail: more lines than an agent keeps is all of them.
const maxLogTail = 100000

// logLineJSON is one NDJSON line of GET /v1/sandboxes/{id}/logs.
type logLineJSON struct {
	Time   string `json:"time"`
	Source string `json:"source"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// logStreamError begins the last line of a logs stream that broke after
// its 200 (format text). The text format is the bare lines, so a process
// may print the same: a client that must tell reads NDJSON, where the
// error is a record no process can write.
const logStreamError = "sandboxd: the logs ended early: "

// sandboxLogs is GET /v1/sandboxes/{id}/logs: the output of the processes
// the sandbox's agent ran (service.Logs), one line per line, oldest
// first. Query: since (RFC 3339, or a duration back from now such
// as 10m), tail (the last N lines), follow (true: new lines until the
// sandbox stops), format (ndjson, the default, or text: the bare lines).
// A stream that breaks after its 200 (the agent's answer broke off, or
// took too long to read) ends with a line saying so: NDJSON the API's
// error body, {"error":{"code","message","retryable"}}; text
// logStreamError and the message.
func (s *server) sandboxLogs(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, func(k string) bool {
		return k == "follow" || k == "since" || k == "tail" || k == "format"
	})
	if err != nil {
		return err
	}
	var lq service.LogQuery
	if lq.Tail, err = intParam(q, "tail", 0, maxLogTail, 0); err != nil {
		return err
	}
	if v := q.Get("since"); v != "" {
		if lq.Since, err = parseSince(v, time.Now()); err != nil {
			return err
		}
	}
	switch q.Get("follow") {
	case "", "false", "0":
	case "true", "1":
		lq.Follow = true
	default:
		return errorf(CodeInvalidArgument, "follow must be true or false, not %q", q.Get("follow"))
	}
	format := q.Get("format")
	if format != "" && format != "ndjson" && format != "text" {
		return errorf(CodeInvalidArgument, "format must be ndjson or text, not %q", format)
	}
	c, id := caller(r), r.PathValue("id")
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	started, writeFailed := false, false
	err = s.svc.Logs(r.Context(), c, id, lq, func(lines []service.LogLine) (err error) {
		defer func() { writeFailed = err != nil }()
		if !started {
			// The reading has begun: an error before it is the answer.
			started = true
			if format == "text" {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			} else {
				w.Header().Set("Content-Type", "application/x-ndjson")
			}
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(logWriteTimeout))
		for _, l := range lines {
			var err error
			if format == "text" {
				_, err = bw.WriteString(strings.ReplaceAll(l.Text, "\r", "") + "\n")
			} else {
				err = enc.Encode(logLineJSON{Time: l.Time.UTC().Format(time.RFC3339Nano), Source: l.Source, Stream: l.Stream, Text: l.Text})
			}
			if err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && !started {
		return err
	}
	if err == nil || writeFailed || r.Context().Err() != nil {
		if err != nil {
			s.log.DebugContext(r.Context(), "logs: stream ended", "sandbox", id, "err", err)
		}
		return nil // the client left: nobody reads more
	}
	// The status line is out: the stream says how it ended.
	code, msg := classify(err)
	s.log.WarnContext(r.Context(), "logs: stream broke off", "request_id", requestID(r), "sandbox", id, "code", code, "err", err)
	_ = rc.SetWriteDeadline(time.Now().Add(logWriteTimeout))
	if format == "text" {
		_, _ = bw.WriteString(logStreamError + msg + "\n")
	} else {
		_ = enc.Encode(errorBody{Error: errorJSON{Code: code, Message: msg, Retryable: apierr.Lookup(code).Retryable}})
	}
	if bw.Flush() == nil {
		_ = rc.Flush()
	}
	return nil
}

// parseSince reads since: an RFC 3339 time, or a duration (10m, 1h30m)
// back from now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errorf(CodeInvalidArgument, "since must be an RFC 3339 time or a duration such as 10m, not %q", v)
}

// sandboxMetricsJSON is the answer of GET /v1/sandboxes/{id}/metrics.
type sandboxMetricsJSON struct {
	Time             string  `json:"time"`
	CPUPercent       float64 `json:"cpu_percent"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	DiskBytes        uint64  `json:"disk_bytes"`
	DiskLimitBytes   uint64  `json:"disk_limit_bytes"`
	NetRxBytes       uint64  `json:"net_rx_bytes"`
	NetTxBytes       uint64  `json:"net_tx_bytes"`
	Pids             uint64  `json:"pids"`
}

// sandboxMetrics is GET /v1/sandboxes/{id}/metrics: one sample, taken now,
// of a running sandbox (service.SandboxUsage).
func (s *server) sandboxMetrics(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r, func(string) bool { return false }); err != nil {
		return err
	}
	m, err := s.svc.SandboxUsage(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxMetricsJSON{
		Time: m.At.UTC().Format(time.RFC3339Nano), CPUPercent: m.CPUPercent, CPUSeconds: m.CPUSeconds,
		MemoryBytes: m.MemoryUsed, MemoryLimitBytes: m.MemoryLimit,
		DiskBytes: m.Disk.Used, DiskLimitBytes: m.Disk.Total,
		NetRxBytes: m.NetRx, NetTxBytes: m.NetTx, Pids: m.Pids,
	})
	return nil
}
