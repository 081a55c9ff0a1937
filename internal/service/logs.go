package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/store"
)

// A sandbox's logs are the output of the processes its agent runs: every
// exec, every streamed process whatever API started it (the native API,
// an E2B SDK speaking envd's protocol through the proxy, sessions), and
// the start command of the template it was made from. The agent keeps
// them (package agent/server/logbook: line by line, stamped by the agent,
// at most 1 MiB and 10,000 lines, in the sandbox's own memory), so they
// outlive a daemon restart, and the daemon reads them through its agent
// client, every read bounded (agent.Client.Logs). The daemon's own probes
// (a disk-usage check, a readiness check) are kept out.
//
// A stopped sandbox has no agent: what its logs held when the daemon
// stopped it is kept by the daemon (a snapshot read just before the stop,
// kept once the stop succeeded, in memory: at most maxStoppedLogs
// sandboxes, an owner's oldest snapshot dropped first when that owner
// holds the most), and answered until it is started again or destroyed.
// A sandbox that stopped by itself, was stopped by a daemon since
// restarted, or stopped because the host was short of memory
// (StopPausedUnderPressure: no snapshot there, each would hold up the
// next stop) answers none. A paused sandbox's
// agent is frozen: its logs are ErrPaused, at once.
const (
	// logFollowPoll is how often a follow checks that the sandbox still
	// runs, and how long it waits before reattaching to an agent whose
	// answer broke while the sandbox runs.
	logFollowPoll = time.Second
	// stopLogsTimeout bounds the snapshot of a stopping sandbox's logs
	// (a read of at most 1 MiB over the agent's socket: milliseconds).
	stopLogsTimeout = 2 * time.Second
	// maxStoppedLogs bounds the snapshots kept, and stoppedLogBytes the
	// text and source names of each (what the agent keeps; a hostile
	// agent's answer, or invalid UTF-8 made text, may be larger: its
	// oldest lines go), so they hold at most 64 × ~2 MiB (the text, and
	// 10,000 line headers of 72 bytes).
	maxStoppedLogs  = 64
	stoppedLogBytes = 1 << 20
)

// LogLine is one line of a sandbox's logs.
type LogLine struct {
	// Time is when the agent kept the line.
	Time time.Time
	// Source names the process: "pid-42" (a process the agent ran: an
	// exec, a streamed process, a session's shell) or "start" (the
	// template's start command).
	Source string
	// Stream is "stdout", "stderr" or "pty".
	Stream string
	// Text is the line without its newline.
	Text string
}

// LogQuery selects lines of a sandbox's logs.
type LogQuery struct {
	// Since drops lines stamped before it (zero: all).
	Since time.Time
	// Tail keeps only the last Tail lines of what is kept (0: all).
	Tail int
	// Follow keeps the call open for new lines until the sandbox stops
	// or ctx ends.
	Follow bool
}

// stoppedLogs keeps the snapshots of stopped sandboxes' logs.
type stoppedLogs struct {
	mu sync.Mutex
	m  map[string]stoppedLog
}

type stoppedLog struct {
	owner string
	at    time.Time
	lines []LogLine
}

// put keeps id's snapshot, dropping one of the owner holding the most
// (its oldest) past maxStoppedLogs: a tenant that stops many sandboxes
// evicts its own snapshots before anyone else's.
func (k *stoppedLogs) put(id, owner string, lines []LogLine) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]stoppedLog{}
	}
	delete(k.m, id)
	if len(k.m) >= maxStoppedLogs {
		count := map[string]int{}
		for _, l := range k.m {
			count[l.owner]++
		}
		var victim string
		for vid, l := range k.m {
			v, ok := k.m[victim]
			if !ok || count[l.owner] > count[v.owner] || count[l.owner] == count[v.owner] && l.at.Before(v.at) {
				victim = vid
			}
		}
		delete(k.m, victim)
	}
	k.m[id] = stoppedLog{owner: owner, at: time.Now(), lines: lines}
}

func (k *stoppedLogs) get(id string) []LogLine {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[id].lines
}

func (k *stoppedLogs) drop(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
}

func fromAgentLines(ls []agent.LogLine) []LogLine {
	out := make([]LogLine, len(ls))
	for i, l := range ls {
		out[i] = LogLine{Time: l.Time, Source: l.Source, Stream: l.Stream, Text: l.Text}
	}
	return out
}

// readLogsForStop reads what a running sandbox's logs hold, before its
// stop: their newest stoppedLogBytes (newestWithin). Best effort: an agent
// that does not answer in time leaves none (nil).
func (s *Service) readLogsForStop(ctx context.Context, row store.Sandbox) []LogLine {
	ac, err := s.Agent(ctx, row.ID)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopLogsTimeout)
	defer cancel()
	var lines []LogLine
	if _, err := ac.Logs(ctx, agent.LogQuery{}, func(ls []agent.LogLine) error {
		lines = append(lines, fromAgentLines(ls)...)
		return nil
	}); err != nil {
		s.Logger.Debug("stop: the logs of the sandbox were not kept", "sandbox", row.ID, "err", err)
		return nil
	}
	return newestWithin(lines, stoppedLogBytes)
}

// newestWithin is a copy of the newest lines of lines whose texts and
// sources hold at most max bytes (a copy: lines' array, and the texts of
// the lines left out, are not kept alive by it), each source string shared
// by the lines that name it, each time in UTC (no zone kept).
func newestWithin(lines []LogLine, max int) []LogLine {
	i, n := len(lines), 0
	for i > 0 && n+len(lines[i-1].Text)+len(lines[i-1].Source) <= max {
		n += len(lines[i-1].Text) + len(lines[i-1].Source)
		i--
	}
	out := slices.Clone(lines[i:])
	sources := map[string]string{}
	for j := range out {
		l := &out[j]
		if src, ok := sources[l.Source]; ok {
			l.Source = src
		} else {
			sources[l.Source] = l.Source
		}
		l.Time = l.Time.UTC()
	}
	return out
}

// Logs writes a sandbox's logs to emit, oldest first: the lines kept that
// q selects, then, with q.Follow, new lines as they come until the sandbox
// is no longer running or ctx ends. emit is called once with no lines
// when the reading begins (an edge writes its answer's status then: an
// error before it is the call's, one after it ends the stream, which the
// edge says in the stream's own format). An
// error of emit ends the call with it (the client left); any other error
// after the first emit is ErrUnavailable (the agent's answer broke off,
// or took too long to read), the lines before it passed on. ErrNotFound for
// a sandbox the caller may not see; ErrPaused for a paused one; a running
// sandbox whose agent does not answer is ErrUnavailable. A stopped
// sandbox answers the lines kept at its stop (see above).
func (s *Service) Logs(ctx context.Context, c Caller, idOrName string, q LogQuery, emit func([]LogLine) error) error {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return err
	}
	if q.Tail < 0 {
		return invalid("tail", "must not be negative")
	}
	switch row.State {
	case store.StateRunning:
	case store.StatePaused:
		return fmt.Errorf("sandbox %s: %w", row.ID, ErrPaused)
	default:
		if err := emit(nil); err != nil {
			return err
		}
		return emitKept(s.stopped.get(row.ID), q, emit)
	}
	ac, err := s.Agent(ctx, row.ID)
	if err != nil {
		return err
	}
	var (
		emitErr error
		opened  bool
	)
	aq := agent.LogQuery{Since: q.Since, Tail: q.Tail, Follow: q.Follow, Opened: func() {
		if !opened {
			opened = true
			emitErr = emit(nil)
		}
	}}
	pass := func(ls []agent.LogLine) error {
		if emitErr != nil {
			return emitErr
		}
		emitErr = emit(fromAgentLines(ls))
		return emitErr
	}
	if !q.Follow {
		_, err := ac.Logs(ctx, aq, pass)
		switch {
		case emitErr != nil:
			return emitErr
		case err != nil && !opened:
			return Unavailable("the sandbox's agent does not answer", err)
		case err != nil:
			return Unavailable("the sandbox's agent's log answer broke off", err)
		}
		return nil
	}
	for {
		fctx, cancel := context.WithCancel(ctx)
		running := s.watchRunning(fctx, cancel, row.ID)
		next, err := ac.Logs(fctx, aq, pass)
		cancel()
		stillRunning := <-running
		switch {
		case emitErr != nil:
			return emitErr
		case ctx.Err() != nil || !stillRunning:
			return nil
		case !opened && err != nil:
			return Unavailable("the sandbox's agent does not answer", err)
		case errors.Is(err, agent.ErrMalformedLog), errors.Is(err, agent.ErrReplyTooLarge):
			return Unavailable("the sandbox's agent's log answer broke off", err)
		}
		// The answer broke while the sandbox runs (its agent restarted,
		// or its stop has begun): reattach after the last line passed on.
		aq.Tail, aq.Cursor = 0, &next
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logFollowPoll):
		}
		if cur, err := s.Store.GetSandbox(ctx, row.ID); err != nil || !followable(cur) {
			return nil
		}
	}
}

// followable reports whether a follow of row's logs goes on: the sandbox
// runs, and no destroy has begun (one whose teardown failed leaves the
// row, and maybe the container, running: the sandbox is gone to callers
// all the same).
func followable(row store.Sandbox) bool {
	return row.State == store.StateRunning && row.DestroyingSince.IsZero()
}

// watchRunning checks every logFollowPoll that sandbox id still runs (and
// is not being destroyed: followable) and
// calls stop when it does not; the channel it returns gets whether it
// still ran once ctx ended.
func (s *Service) watchRunning(ctx context.Context, stop func(), id string) <-chan bool {
	out := make(chan bool, 1)
	go func() {
		t := time.NewTicker(logFollowPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				out <- true
				return
			case <-t.C:
				cur, err := s.Store.GetSandbox(context.WithoutCancel(ctx), id)
				if err != nil || !followable(cur) {
					stop()
					out <- false
					return
				}
			}
		}
	}()
	return out
}

// emitKept writes the lines of a snapshot that q selects (never a follow:
// the sandbox is not running).
func emitKept(lines []LogLine, q LogQuery, emit func([]LogLine) error) error {
	i := len(lines)
	for i > 0 && !lines[i-1].Time.Before(q.Since) && (q.Tail <= 0 || len(lines)-i < q.Tail) {
		i--
	}
	for lines = lines[i:]; len(lines) > 0; {
		n := min(len(lines), agent.LogBatch)
		if err := emit(lines[:n]); err != nil {
			return err
		}
		lines = lines[n:]
	}
	return nil
}
