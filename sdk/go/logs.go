package sandboxd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// LogLine is one line of a sandbox's logs: the output of a process its
// agent ran.
type LogLine struct {
	// Time is when the sandbox's agent kept the line.
	Time time.Time `json:"time"`
	// Source is "pid-N" (a process) or "start" (the template's start
	// command).
	Source string `json:"source"`
	// Stream is "stdout", "stderr" or "pty".
	Stream string `json:"stream"`
	// Text is the line without its newline.
	Text string `json:"text"`
}

// LogOptions selects lines of a sandbox's logs.
type LogOptions struct {
	// Since drops lines older than it (zero: all).
	Since time.Time
	// Tail keeps only the last Tail lines (0: all).
	Tail int
	// Follow waits for new lines until the sandbox stops or ctx ends.
	Follow bool
}

// Logs calls out with each line of a sandbox's logs, oldest first, and
// with opts.Follow new lines as they come, until the sandbox is no longer
// running. An error from out ends the call with that error. A stream the
// daemon ends early (the sandbox's agent's answer broke off) ends the
// call with an *APIError (Status 0, the code and message the daemon sent,
// ErrUnavailable for a broken agent answer) after the lines before it.
func (c *Client) Logs(ctx context.Context, id string, opts LogOptions, out func(LogLine) error) error {
	q := url.Values{}
	if !opts.Since.IsZero() {
		q.Set("since", opts.Since.UTC().Format(time.RFC3339Nano))
	}
	if opts.Tail > 0 {
		q.Set("tail", strconv.Itoa(opts.Tail))
	}
	retry := retrySafe
	if opts.Follow {
		q.Set("follow", "true")
		retry = retryNever // a retry would repeat the lines already passed on
	}
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes", id, "logs"}, query: q, retry: retry}
	resp, err := c.send(ctx, r)
	if err != nil {
		return fmt.Errorf("logs of sandbox %q: %w", id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			LogLine
			Error *struct {
				Code      ErrorCode `json:"code"`
				Message   string    `json:"message"`
				Retryable bool      `json:"retryable"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("logs of sandbox %q: decode: %w", id, err)
		}
		if e := l.Error; e != nil {
			if e.Code == "" {
				e.Code = CodeInternal
			}
			return fmt.Errorf("logs of sandbox %q: %w", id, &APIError{Code: e.Code, Message: e.Message, Retryable: e.Retryable})
		}
		if err := out(l.LogLine); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("logs of sandbox %q: %w", id, err)
	}
	return nil
}

// SandboxMetrics is one sample of a running sandbox's resource use.
type SandboxMetrics struct {
	Time time.Time `json:"time"`
	// CPUPercent is of one core, since the daemon's previous sample.
	CPUPercent       float64 `json:"cpu_percent"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	// DiskBytes is what the sandbox wrote over its image; DiskLimitBytes
	// its limit (0: none).
	DiskBytes      uint64 `json:"disk_bytes"`
	DiskLimitBytes uint64 `json:"disk_limit_bytes"`
	NetRxBytes     uint64 `json:"net_rx_bytes"`
	NetTxBytes     uint64 `json:"net_tx_bytes"`
	Pids           uint64 `json:"pids"`
}

// Metrics samples a running sandbox's CPU, memory, disk and network.
func (c *Client) Metrics(ctx context.Context, id string) (*SandboxMetrics, error) {
	var m SandboxMetrics
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes", id, "metrics"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &m); err != nil {
		return nil, fmt.Errorf("metrics of sandbox %q: %w", id, err)
	}
	return &m, nil
}
