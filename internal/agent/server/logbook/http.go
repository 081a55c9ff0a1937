package logbook

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Path is the daemon's route to read the book: GET Path. Paths under
// /sandboxd/ are the daemon's own; the daemon's proxies to the agent never
// send them.
const Path = "/sandboxd/logs"

// page bounds the lines a reader copies out of the book at once.
const page = 256

// Entry is one line of the answer of GET [Path], one JSON object per line
// (NDJSON). Text is the line as a string (invalid UTF-8 replaced).
type Entry struct {
	Seq    uint64 `json:"seq"`
	Time   string `json:"time"` // RFC 3339 with nanoseconds, UTC
	Source string `json:"source"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// Handler serves GET [Path] from b: the lines kept, oldest first, as
// NDJSON [Entry] lines. Query, all optional:
//
//   - cursor=N: start at seq N (at the oldest line kept when N is older);
//     without it, start where since and tail say.
//   - since=T (RFC 3339): skip lines stamped before T.
//   - tail=N: only the last N lines of those since selects.
//   - follow=1: after the lines kept, send new lines as they come until
//     the client goes away (it holds nothing of the book but its cursor).
//
// A query it cannot read is 400 and nothing else.
func Handler(b *Book) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var (
			since     time.Time
			tail      int
			cursor    uint64
			hasCursor bool
			err       error
		)
		if v := q.Get("since"); v != "" {
			if since, err = time.Parse(time.RFC3339Nano, v); err != nil {
				http.Error(w, "since must be an RFC 3339 time", http.StatusBadRequest)
				return
			}
		}
		if v := q.Get("tail"); v != "" {
			if tail, err = strconv.Atoi(v); err != nil || tail < 0 {
				http.Error(w, "tail must be a non-negative integer", http.StatusBadRequest)
				return
			}
		}
		if v := q.Get("cursor"); v != "" {
			if cursor, err = strconv.ParseUint(v, 10, 64); err != nil {
				http.Error(w, "cursor must be a non-negative integer", http.StatusBadRequest)
				return
			}
			hasCursor = true
		}
		follow := false
		switch q.Get("follow") {
		case "", "0", "false":
		case "1", "true":
			follow = true
		default:
			http.Error(w, "follow must be 1 or 0", http.StatusBadRequest)
			return
		}
		// Without follow, the answer ends at the lines kept now.
		var end uint64
		if hasCursor {
			end = b.Next()
		} else {
			cursor, end = b.Window(since, tail)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		if follow {
			_ = rc.Flush() // the headers, before any line comes
		}
		for {
			lines, next, wake := b.Read(cursor, page)
			if !follow {
				for len(lines) > 0 && lines[len(lines)-1].Seq >= end {
					lines = lines[:len(lines)-1]
				}
			}
			cursor = next
			for _, l := range lines {
				if l.Time.Before(since) {
					continue
				}
				e := Entry{Seq: l.Seq, Time: l.Time.UTC().Format(time.RFC3339Nano), Source: l.Source, Stream: l.Stream, Text: string(l.Text)}
				if err := enc.Encode(e); err != nil {
					return
				}
			}
			if len(lines) > 0 {
				if err := bw.Flush(); err != nil {
					return
				}
				if follow {
					if err := rc.Flush(); err != nil {
						return
					}
				}
				if follow || cursor < end {
					continue
				}
			}
			if !follow {
				_ = bw.Flush()
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-wake:
			}
		}
	})
}
