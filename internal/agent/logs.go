package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pathLogs is the agent's route for its log of the sandbox's process
// output (server/logbook.Path).
const pathLogs = "/sandboxd/logs"

// Bounds of a Logs call. The agent's log holds at most 10,000 lines, 1 MiB
// of text, 8 KiB a line (package server/logbook); these leave room for
// JSON's escapes and nothing more.
const (
	// maxLogEntry bounds one NDJSON line of the answer: 8 KiB of text,
	// each byte escaped in at most six (\u00ff), and the other fields.
	maxLogEntry = 64 << 10
	// maxLogText bounds one line's text once decoded: 8 KiB, each invalid
	// byte replaced by U+FFFD's three.
	maxLogText = 24 << 10
	// maxLogLines and maxLogBytes bound the lines and the text of a call
	// without Follow: what the agent keeps, and what JSON may add to it.
	maxLogLines = 10000
	maxLogBytes = 4 << 20
	// LogBatch and LogBatchBytes bound the lines one emit gets, and their
	// text (without it 256 lines of invalid UTF-8 made text would hold
	// 6 MiB).
	LogBatch      = 256
	LogBatchBytes = 256 << 10
	// logReadTimeout bounds the time a call without Follow spends reading
	// the agent's answer (the real agent answers its whole log in
	// milliseconds); the time emit takes is not counted (a slow client of
	// the daemon's is not the agent's fault).
	logReadTimeout = 30 * time.Second
)

// logSource is what a source may be: "start", or "pid-N" (the agent's
// processes, numbered by the kernel: at most 2^22 on Linux).
var logSource = regexp.MustCompile(`^(start|pid-[0-9]{1,10})$`)

// ErrMalformedLog is an answer of the agent's log that is not what the
// agent sends: a line that is no JSON entry, an unknown stream, a source
// other than "start" or "pid-N", a text holding a newline, a time outside
// years 1 to 9999, seqs out of order.
var ErrMalformedLog = errors.New("agent: malformed log answer")

// LogLine is one line of the sandbox's log.
type LogLine struct {
	// Seq numbers the lines from 0 in the agent's log; a later Logs with
	// Cursor Seq+1 continues after this line.
	Seq uint64
	// Time is when the agent kept the line.
	Time time.Time
	// Source is "pid-N" (a process the agent ran) or "start" (the
	// sandbox's start command).
	Source string
	// Stream is "stdout", "stderr" or "pty".
	Stream string
	// Text is the line without its newline.
	Text string
}

// LogQuery selects lines of the agent's log.
type LogQuery struct {
	// Since drops lines stamped before it (zero: all; one past year 9999
	// drops them all).
	Since time.Time
	// Tail keeps only the last Tail lines of those Since selects (0: all).
	Tail int
	// Cursor, when set, starts at that seq instead (the oldest line kept
	// when older), Since still filtering.
	Cursor *uint64
	// Follow keeps the call open for new lines until ctx ends or the
	// agent ends the answer (its sandbox stopped).
	Follow bool
	// Opened, when set, is called once the agent has accepted the call,
	// before the first line: an error after it comes from the answer.
	Opened func()
}

// logEntry is server/logbook.Entry.
type logEntry struct {
	Seq    uint64 `json:"seq"`
	Time   string `json:"time"`
	Source string `json:"source"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// Logs reads the agent's log, oldest first, handing the lines to emit in
// batches of at most LogBatch lines and LogBatchBytes of text, and
// returns the cursor after the last line it handed on (q.Cursor's, or 0,
// when none). An error of emit ends the call with it. Everything read is
// bounded (see the bounds above): a line, a batch, and, without Follow,
// the lines, the text and the time spent reading the whole answer (the
// time emit takes is not counted: a slow emit gets every line); an answer
// that breaks one is ErrReplyTooLarge, or an error wrapping
// context.DeadlineExceeded for the time, one that is not the agent's
// shape ErrMalformedLog, never a hang or an unbounded allocation. With
// Follow the call ends when ctx does (nil) or when the answer ends
// (io.ErrUnexpectedEOF: the agent went away mid-answer, or nil at a clean
// end).
func (c *Client) Logs(ctx context.Context, q LogQuery, emit func([]LogLine) error) (uint64, error) {
	var next uint64
	v := url.Values{}
	if q.Cursor != nil {
		next = *q.Cursor
		v.Set("cursor", strconv.FormatUint(*q.Cursor, 10))
	}
	// The agent reads RFC 3339, years 0 to 9999: an earlier Since keeps
	// everything, as none does; a later one nothing, as the last instant
	// of 9999 does.
	if since := q.Since.UTC(); !q.Since.IsZero() && since.Year() >= 1 {
		if since.After(lastLogTime) {
			since = lastLogTime
		}
		v.Set("since", since.Format(time.RFC3339Nano))
	}
	if q.Tail > 0 {
		v.Set("tail", strconv.Itoa(q.Tail))
	}
	// pause and resume stop the clock of a call without Follow while emit
	// runs.
	pause, resume := func() {}, func() {}
	if q.Follow {
		v.Set("follow", "1")
	} else {
		limit := c.logReadTimeout
		if limit <= 0 {
			limit = logReadTimeout
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		left, began := limit, time.Now()
		timer := time.AfterFunc(left, func() {
			cancel(fmt.Errorf("no whole answer after %s of reading: %w", limit, context.DeadlineExceeded))
		})
		defer timer.Stop()
		pause = func() {
			if timer.Stop() {
				left -= time.Since(began)
			}
		}
		resume = func() {
			began = time.Now()
			if ctx.Err() == nil {
				timer.Reset(max(left, 0))
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+pathLogs+"?"+v.Encode(), nil)
	if err != nil {
		return next, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return next, fmt.Errorf("agent logs: %w", readErr(ctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return next, fmt.Errorf("agent logs: %w", httpError(resp))
	}
	if q.Opened != nil {
		pause()
		q.Opened()
		resume()
	}
	br := bufio.NewReaderSize(resp.Body, maxLogEntry)
	var (
		batch      []LogLine
		batchTxt   int
		lines, txt int
		seen       bool
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		pause()
		err := emit(batch)
		resume()
		next = batch[len(batch)-1].Seq + 1
		batch, batchTxt = nil, 0
		return err
	}
	for {
		raw, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return next, fmt.Errorf("agent logs: a line of more than %d bytes: %w", maxLogEntry, ErrReplyTooLarge)
		case err == io.EOF && len(raw) == 0:
			return next, flush()
		case err == io.EOF:
			if ferr := flush(); ferr != nil {
				return next, ferr
			}
			return next, fmt.Errorf("agent logs: the answer ends mid-line: %w", io.ErrUnexpectedEOF)
		case err != nil:
			if ferr := flush(); ferr != nil {
				return next, ferr
			}
			if ctx.Err() != nil && q.Follow {
				return next, nil
			}
			return next, fmt.Errorf("agent logs: %w", readErr(ctx, err))
		}
		l, perr := parseLogEntry(raw)
		if perr != nil {
			return next, perr
		}
		if seen && l.Seq <= batchLast(batch, next) {
			return next, fmt.Errorf("%w: seq %d after %d", ErrMalformedLog, l.Seq, batchLast(batch, next))
		}
		seen = true
		lines++
		txt += len(l.Text)
		if !q.Follow && (lines > maxLogLines || txt > maxLogBytes) {
			return next, fmt.Errorf("agent logs: more than %d lines or %d bytes: %w", maxLogLines, maxLogBytes, ErrReplyTooLarge)
		}
		if batchTxt+len(l.Text) > LogBatchBytes {
			if err := flush(); err != nil {
				return next, err
			}
		}
		batch = append(batch, l)
		batchTxt += len(l.Text)
		// Hand on what came as soon as nothing more is ready: a follower
		// sees each line when the agent sends it.
		if len(batch) >= LogBatch || br.Buffered() == 0 {
			if err := flush(); err != nil {
				return next, err
			}
		}
	}
}

// readErr is err, a failed read of the answer, or the reason ctx was
// cancelled with when it was (the read's time ran out).
func readErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// lastLogTime is the latest time RFC 3339 writes (and the agent reads).
var lastLogTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// batchLast is the seq of the last line read: the batch's, or the one
// before next.
func batchLast(batch []LogLine, next uint64) uint64 {
	if len(batch) > 0 {
		return batch[len(batch)-1].Seq
	}
	return next - 1
}

// parseLogEntry reads one NDJSON line of the agent's log and checks it.
func parseLogEntry(raw []byte) (LogLine, error) {
	var e logEntry
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&e); err != nil {
		return LogLine{}, fmt.Errorf("%w: %v", ErrMalformedLog, err)
	}
	if dec.More() {
		return LogLine{}, fmt.Errorf("%w: more than one value on a line", ErrMalformedLog)
	}
	t, err := time.Parse(time.RFC3339Nano, e.Time)
	if err == nil {
		// Stored in UTC: a time with an offset would keep a zone each,
		// and one west of UTC in year 1, or east in 9999, has no RFC
		// 3339 form once in UTC.
		t = t.UTC()
	}
	switch {
	case err != nil || t.Year() < 1 || t.Year() > 9999:
		return LogLine{}, fmt.Errorf("%w: time %q", ErrMalformedLog, e.Time)
	case e.Stream != "stdout" && e.Stream != "stderr" && e.Stream != "pty":
		return LogLine{}, fmt.Errorf("%w: stream %q", ErrMalformedLog, e.Stream)
	case !logSource.MatchString(e.Source):
		return LogLine{}, fmt.Errorf("%w: source %.70q", ErrMalformedLog, e.Source)
	case len(e.Text) > maxLogText:
		return LogLine{}, fmt.Errorf("agent logs: a line of %d bytes: %w", len(e.Text), ErrReplyTooLarge)
	case strings.IndexByte(e.Text, '\n') >= 0:
		return LogLine{}, fmt.Errorf("%w: a text holding a newline", ErrMalformedLog)
	}
	return LogLine{Seq: e.Seq, Time: t, Source: intern(e.Source), Stream: intern(e.Stream), Text: e.Text}, nil
}

// intern is s, the same string for the names every line repeats (a
// stopped sandbox's snapshot keeps 10,000 lines).
func intern(s string) string {
	switch s {
	case "stdout":
		return "stdout"
	case "stderr":
		return "stderr"
	case "pty":
		return "pty"
	case "start":
		return "start"
	}
	return s
}
