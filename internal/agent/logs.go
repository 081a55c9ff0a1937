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
	"strconv"
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
	// maxLogSource bounds a source name (the agent cuts its at 64).
	maxLogSource = 64
	// maxLogLines and maxLogBytes bound the lines and the text of a call
	// without Follow: what the agent keeps, and what JSON may add to it.
	maxLogLines = 10000
	maxLogBytes = 4 << 20
	// LogBatch bounds the lines one emit gets.
	LogBatch = 256
	// logReadTimeout bounds a call without Follow: the real agent answers
	// its whole log in milliseconds.
	logReadTimeout = 30 * time.Second
)

// ErrMalformedLog is an answer of the agent's log that is not what the
// agent sends: a line that is no JSON entry, an unknown stream, seqs out
// of order.
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
	// Since drops lines stamped before it (zero: all).
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
// batches of at most LogBatch, and returns the cursor after the last line
// it handed on (q.Cursor's, or 0, when none). An error of emit ends the
// call with it. Everything read is bounded (see the bounds above): a line,
// a batch, and, without Follow, the lines, the text and the time of the
// whole call; an answer that breaks one is ErrReplyTooLarge, one that is
// not the agent's shape ErrMalformedLog, never a hang or an unbounded
// allocation. With Follow the call ends when ctx does (nil) or when the
// answer ends (io.ErrUnexpectedEOF: the agent went away mid-answer, or
// nil at a clean end).
func (c *Client) Logs(ctx context.Context, q LogQuery, emit func([]LogLine) error) (uint64, error) {
	var next uint64
	v := url.Values{}
	if q.Cursor != nil {
		next = *q.Cursor
		v.Set("cursor", strconv.FormatUint(*q.Cursor, 10))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Tail > 0 {
		v.Set("tail", strconv.Itoa(q.Tail))
	}
	if q.Follow {
		v.Set("follow", "1")
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, logReadTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+pathLogs+"?"+v.Encode(), nil)
	if err != nil {
		return next, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return next, fmt.Errorf("agent logs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return next, fmt.Errorf("agent logs: %w", httpError(resp))
	}
	if q.Opened != nil {
		q.Opened()
	}
	br := bufio.NewReaderSize(resp.Body, maxLogEntry)
	var (
		batch      []LogLine
		lines, txt int
		seen       bool
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := emit(batch)
		next = batch[len(batch)-1].Seq + 1
		batch = nil
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
			return next, fmt.Errorf("agent logs: %w", err)
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
		batch = append(batch, l)
		// Hand on what came as soon as nothing more is ready: a follower
		// sees each line when the agent sends it.
		if len(batch) >= LogBatch || br.Buffered() == 0 {
			if err := flush(); err != nil {
				return next, err
			}
		}
	}
}

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
	switch {
	case err != nil:
		return LogLine{}, fmt.Errorf("%w: time %q", ErrMalformedLog, e.Time)
	case e.Stream != "stdout" && e.Stream != "stderr" && e.Stream != "pty":
		return LogLine{}, fmt.Errorf("%w: stream %q", ErrMalformedLog, e.Stream)
	case e.Source == "" || len(e.Source) > maxLogSource:
		return LogLine{}, fmt.Errorf("%w: a source of %d bytes", ErrMalformedLog, len(e.Source))
	case len(e.Text) > maxLogText:
		return LogLine{}, fmt.Errorf("agent logs: a line of %d bytes: %w", len(e.Text), ErrReplyTooLarge)
	}
	return LogLine{Seq: e.Seq, Time: t, Source: e.Source, Stream: e.Stream, Text: e.Text}, nil
}
