package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Live usage. The pages poll GET /ui/usage for the sandboxes in view; each
// sandbox's sample is one call of the API's metrics route, which is an
// engine round trip or two (docker stats, and an inspect that counts the
// disk at most once per 10 s), so the calls are bounded three ways: one
// request names at most maxUsageBatch sandboxes (the list page asks only
// for the running rows in view, and rotates through them when more are),
// a session has one such request in flight at a time (a second is 429),
// and the dashboard makes at most maxUsageCalls metrics calls at once,
// all sessions together, at most maxUsageCallsPerOwner of them one
// owner's, handed out to waiting owners in turn (usage.go). Each call has
// usageCallTimeout, and its answer serves every request of the same token
// for the same sandbox for usageCacheFor (one call in flight per sandbox
// and token, however many tabs poll it). So a list of hundreds of
// sandboxes costs at most maxUsageBatch calls per poll (every 5 s after
// the answer), no number of open pages makes more than maxUsageCalls
// engine calls run at once, and an owner whose samples never come holds
// maxUsageCallsPerOwner slots for usageCallTimeout at a time, not every
// slot for as long as it likes.
const (
	maxUsageBatch = 20
	maxUsageCalls = 4
	// maxUsageCallsPerOwner is one owner's share of maxUsageCalls: an
	// owner whose samples are slow leaves the rest to the others.
	maxUsageCallsPerOwner = 2
	// usageWait bounds one /ui/usage: a sample that has not come by then
	// is reported as late, and asked for again at the next poll.
	usageWait = 20 * time.Second
	// usageCallTimeout bounds one metrics call, well under usageWait, so
	// that a slot held by a sample that will not come is back soon.
	usageCallTimeout = 5 * time.Second
	// usageCacheFor is how long a sample answers every request of its
	// token for its sandbox (tabs that poll the same sandboxes share it).
	usageCacheFor = 3 * time.Second
)

// Logs pane bounds: the tail a pane opens with (the browser keeps the last
// 1000 lines it got), and how many panes one session may follow at once
// (each is an API stream held open).
const (
	defaultLogTail     = 200
	maxLogTail         = 1000
	maxLogFollows      = 8
	uiLogWriteDeadline = 30 * time.Second
)

// usageJSON is one sandbox's entry in /ui/usage: the API's sample, raw and
// as the page shows it, or why there is none.
type usageJSON struct {
	Error string `json:"error,omitempty"`

	CPUPercent       float64 `json:"cpu_percent"`
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	DiskBytes        uint64  `json:"disk_bytes"`
	DiskLimitBytes   uint64  `json:"disk_limit_bytes"`
	NetRxBytes       uint64  `json:"net_rx_bytes"`
	NetTxBytes       uint64  `json:"net_tx_bytes"`
	Pids             uint64  `json:"pids"`

	// Shown is the sample as text, by column: cpu, memory, disk, net.
	Shown map[string]string `json:"shown,omitempty"`
}

// idPattern is what /ui/usage accepts as a sandbox: an id (the pages ask
// by id only).
var idPattern = regexp.MustCompile(`^sb-[0-9a-f]{16}$`)

// usage answers GET /ui/usage?id=…&id=…: {"items": {id: usageJSON}}, one
// sample per sandbox named, taken through the API (so a sandbox the
// session may not see is the API's 404 message, and one that is not
// running its 409's). Like logs, it answers the dashboard's own script
// only (liveAllowed): a sandbox's preview page on a sibling host, which
// the SameSite cookie does not stop, could not read the answer but could
// spend the session's share of samples or log streams.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request, req request) {
	if !h.liveAllowed(w, r, req) {
		return
	}
	ids := r.URL.Query()["id"]
	seen := map[string]bool{}
	for _, id := range ids {
		if !idPattern.MatchString(id) {
			writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a sandbox id", id))
			return
		}
		seen[id] = true
	}
	if len(seen) > maxUsageBatch {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("at most %d sandboxes per request", maxUsageBatch))
		return
	}
	if !req.sess.usageBusy.CompareAndSwap(false, true) {
		w.Header().Set("Retry-After", "2")
		writeJSONError(w, http.StatusTooManyRequests, "this session's previous usage request is still running")
		return
	}
	defer req.sess.usageBusy.Store(false)

	ctx, cancel := req.sess.context(r.Context())
	defer cancel()
	ctx, cancelWait := context.WithTimeout(ctx, usageWait)
	defer cancelWait()
	var (
		mu  sync.Mutex
		out = make(map[string]usageJSON, len(seen))
		wg  sync.WaitGroup
	)
	var revoked atomic.Bool
	for id := range seen {
		wg.Go(func() {
			u, status := h.sample(ctx, req, id)
			if status == http.StatusUnauthorized {
				revoked.Store(true)
			}
			mu.Lock()
			out[id] = u
			mu.Unlock()
		})
	}
	wg.Wait()
	if revoked.Load() {
		// The token was revoked since the login: as apiFailed, end its
		// sessions; the page's next poll goes to the login and stops.
		h.sessions.dropToken(req.sess.token)
		writeJSONError(w, http.StatusUnauthorized, "Your session has ended: log in again.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
}

// liveAllowed admits a GET of the live routes (usage, logs) from the
// dashboard's own script only: a same-origin request (sameOrigin) that
// carries the session's CSRF token in the X-CSRF-Token header. Over plain
// HTTP a browser sends neither Origin nor Sec-Fetch-Site on a GET, so an
// <img> of a sibling host's page (a sandbox's preview, same site as the
// dashboard, so the SameSite cookie goes along) passes sameOrigin; it
// cannot set a header, and a page of another origin that fetches with
// one is stopped by the preflight, which the dashboard never answers.
// Otherwise 403, before any API call.
func (h *Handler) liveAllowed(w http.ResponseWriter, r *http.Request, req request) bool {
	if !sameOrigin(r) {
		writeJSONError(w, http.StatusForbidden, "cross-origin request refused")
		return false
	}
	if !req.sess.checkCSRF(r.Header.Get("X-CSRF-Token")) {
		writeJSONError(w, http.StatusForbidden, "missing or invalid X-CSRF-Token header: reload the page")
		return false
	}
	return true
}

// ofLimit is "used of limit", or used alone without a limit.
func ofLimit(used, limit uint64) string {
	if limit == 0 {
		return humanBytes(int64(used))
	}
	return humanBytes(int64(used)) + " of " + humanBytes(int64(limit))
}

// logs streams a sandbox's logs to its page's logs pane, followed while
// the page is open (GET /v1/sandboxes/{id}/logs?follow=1 through the API,
// so whichever part keeps the logs, the API's rules apply): NDJSON, one
// {"time","source","stream","text"} per line, as the API gives them; a
// last {"error"} line when the API's stream broke. ?tail= (1 to
// maxLogTail, default defaultLogTail) and ?since= (RFC 3339, for a pane
// that reconnects; then at most maxLogTail lines) pass on.
// The stream ends with the session. The pane writes lines as text.
func (h *Handler) logs(w http.ResponseWriter, r *http.Request, req request) {
	if !h.liveAllowed(w, r, req) {
		return
	}
	q := r.URL.Query()
	// A pane opens with the last defaultLogTail lines (tail= asks for 1 to
	// maxLogTail; 0 or nothing is the default, never "all"); a pane that
	// reconnects (since=) gets at most the last maxLogTail lines since,
	// which is all it keeps.
	tail := clamp(q.Get("tail"), defaultLogTail, 1, maxLogTail)
	if q.Get("tail") == "0" {
		tail = defaultLogTail
	}
	opts := sandboxd.LogOptions{Follow: true, Tail: tail}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, "since must be an RFC 3339 time")
			return
		}
		opts.Since = t
		if q.Get("tail") == "" {
			opts.Tail = maxLogTail
		}
	}
	sb, err := req.api.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		status, msg := apiStatus(err)
		if status == http.StatusUnauthorized {
			h.sessions.dropToken(req.sess.token) // revoked since the login, as apiFailed
		}
		writeJSONError(w, status, msg)
		return
	}
	if n := req.sess.logFollows.Add(1); n > maxLogFollows {
		req.sess.logFollows.Add(-1)
		writeJSONError(w, http.StatusTooManyRequests, fmt.Sprintf("this session follows %d logs already: close a sandbox page", maxLogFollows))
		return
	}
	defer req.sess.logFollows.Add(-1)

	ctx, cancel := req.sess.context(r.Context())
	defer cancel()
	hd := w.Header()
	hd.Set("Content-Type", "application/x-ndjson")
	hd.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	send := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(uiLogWriteDeadline))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		buf.Reset()
		return rc.Flush()
	}
	err = req.api.Logs(ctx, sb.ID, opts, func(l sandboxd.LogLine) error {
		if err := enc.Encode(l); err != nil {
			return err
		}
		return send()
	})
	if err != nil && ctx.Err() == nil {
		_, msg := apiStatus(err)
		if enc.Encode(map[string]string{"error": msg}) == nil {
			_ = send()
		}
	}
}

// resizeTerminal is POST /ui/sandbox/{id}/terminal/resize (tid, cols,
// rows; the CSRF token in X-CSRF-Token): the terminal's new size, through
// the API route Options.TerminalResize names (the Daytona facade's PTY
// resize, which the sessions part passes to the agent; the shell gets
// SIGWINCH). 204, or the API's status and message.
func (h *Handler) resizeTerminal(w http.ResponseWriter, r *http.Request, req request) {
	if h.termResize == nil {
		writeJSONError(w, http.StatusNotFound, "This daemon resizes no terminals.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	tid := r.PostFormValue("tid")
	if !tidPattern.MatchString(tid) {
		writeJSONError(w, http.StatusBadRequest, "tid names no terminal of the dashboard")
		return
	}
	cols, err1 := strconv.Atoi(r.PostFormValue("cols"))
	rows, err2 := strconv.Atoi(r.PostFormValue("rows"))
	if err1 != nil || err2 != nil {
		writeJSONError(w, http.StatusBadRequest, "cols and rows must be numbers")
		return
	}
	cols, rows = max(minTermCols, min(maxTermCols, cols)), max(minTermRows, min(maxTermRows, rows))
	body, _ := json.Marshal(map[string]int{"cols": cols, "rows": rows})
	hr, err := http.NewRequestWithContext(r.Context(), http.MethodPost, h.base+h.termResize(r.PathValue("id"), tid), bytes.NewReader(body))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "malformed sandbox id")
		return
	}
	hr.Header.Set("Authorization", "Bearer "+req.sess.token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(hr)
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, "The daemon's API did not answer: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var e struct {
		Message string `json:"message"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	writeJSONError(w, resp.StatusCode, e.Message)
}

// tidPattern is a terminal id of the dashboard's (newTID).
var tidPattern = regexp.MustCompile(`^ui-[0-9a-f]{16}$`)

// newTID is a fresh terminal id; the sandbox page carries one, so that
// its script can name its terminal to resize it.
func newTID() string { return "ui-" + randomHex(8) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONError answers a script's request: {"error": msg}.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
