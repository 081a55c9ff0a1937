package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestClient_LogsOfTheRealAgent reads the log of a real agent: the
// lines of an exec, by pid; tail; a cursor; a follow that sees a new
// process's line and ends with its context.
func TestClient_LogsOfTheRealAgent(t *testing.T) {
	c, _ := localClient(t)
	ctx := t.Context()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo one; echo two >&2; echo three"}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(q agent.LogQuery) ([]agent.LogLine, uint64) {
		t.Helper()
		var out []agent.LogLine
		next, err := c.Logs(ctx, q, func(ls []agent.LogLine) error { out = append(out, ls...); return nil })
		if err != nil {
			t.Fatalf("Logs(%+v): %v", q, err)
		}
		return out, next
	}
	lines, next := read(agent.LogQuery{})
	if len(lines) != 3 || next != 3 {
		t.Fatalf("%d lines, next %d: %+v", len(lines), next, lines)
	}
	// The agent reads stdout and stderr apart: "two" may come anywhere,
	// each stream's order is kept.
	src := fmt.Sprintf("pid-%d", res.PID)
	var stdout []string
	for i, l := range lines {
		if l.Source != src || l.Time.IsZero() || (l.Text == "two") != (l.Stream == "stderr") || l.Seq != uint64(i) {
			t.Errorf("line %+v; want seq %d, source %s, a time, two on stderr", l, i, src)
		}
		if l.Stream == "stdout" {
			stdout = append(stdout, l.Text)
		}
	}
	if g := strings.Join(stdout, "|"); g != "one|three" {
		t.Errorf("stdout %q; want one|three", g)
	}
	if got, _ := read(agent.LogQuery{Tail: 1}); len(got) != 1 || got[0] != lines[2] {
		t.Errorf("tail 1: %+v; want %+v", got, lines[2])
	}
	one := uint64(1)
	if got, _ := read(agent.LogQuery{Cursor: &one}); len(got) != 2 || got[0] != lines[1] {
		t.Errorf("cursor 1: %+v", got)
	}
	// A Since past what RFC 3339 writes (E2B's start in ms is not
	// bounded) keeps nothing, one before year 1 everything: neither is
	// the agent's 400.
	for _, tc := range []struct {
		since time.Time
		want  int
	}{{time.UnixMilli(9e15), 0}, {time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC), 3}} {
		if got, _ := read(agent.LogQuery{Since: tc.since}); len(got) != tc.want {
			t.Errorf("since %s: %d lines; want %d", tc.since, len(got), tc.want)
		}
	}

	fctx, cancel := context.WithCancel(ctx)
	seen := make(chan agent.LogLine, 16)
	done := make(chan error, 1)
	go func() {
		_, err := c.Logs(fctx, agent.LogQuery{Follow: true, Cursor: &next}, func(ls []agent.LogLine) error {
			for _, l := range ls {
				seen <- l
			}
			return nil
		})
		done <- err
	}()
	if _, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"echo", "later"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-seen:
		if l.Text != "later" || l.Seq != 3 {
			t.Errorf("followed %+v; want later, seq 3", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("the follow saw no line within a minute")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follow ended with %v; want nil when its context ends", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the follow did not end within a minute of its context")
	}
}

// hostileLogAgent serves GET /sandboxd/logs with answer on a unix socket
// and returns a client of it.
func hostileLogAgent(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *agent.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "hla")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(answer))
	srv.Listener = ln
	srv.Start()
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	t.Cleanup(func() { c.Close(); srv.CloseClientConnections(); srv.Close() })
	return c
}

func entry(seq uint64, text string) string {
	return fmt.Sprintf(`{"seq":%d,"time":"2026-01-01T00:00:00Z","source":"pid-1","stream":"stdout","text":%q}`+"\n", seq, text)
}

// endless writes lines from line(i) until the client goes away.
func endless(line func(i uint64) string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := uint64(0); r.Context().Err() == nil; i++ {
			if _, err := io.WriteString(w, line(i)); err != nil {
				return
			}
		}
	}
}

// A hostile agent's log answer fails its call soon, with a typed error,
// and the daemon's heap stays bounded, whatever it sends: a line without
// end, an endless answer, lines that are no entries, seqs going back, a
// text too long once decoded, an error status with an endless body.
func TestClient_LogsOfAHostileAgentAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		want   error
	}{
		{"LineWithoutEnd", endless(func(uint64) string { return strings.Repeat("a", 64<<10) }), agent.ErrReplyTooLarge},
		{"EndlessAnswer", endless(func(i uint64) string { return entry(i, strings.Repeat("x", 1000)) }), agent.ErrReplyTooLarge},
		{"EndlessEmptyLines", endless(func(i uint64) string { return entry(i, "") }), agent.ErrReplyTooLarge},
		{"NotJSON", endless(func(uint64) string { return "hello\n" }), agent.ErrMalformedLog},
		{"TwoValuesOnALine", endless(func(i uint64) string { return "{} {}\n" }), agent.ErrMalformedLog},
		{"UnknownStream", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "stdout", "stdin", 1)
		}), agent.ErrMalformedLog},
		{"NoSource", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "pid-1", "", 1)
		}), agent.ErrMalformedLog},
		{"SourceNotTheAgents", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "pid-1", `\u001b[2K\rstart`, 1)
		}), agent.ErrMalformedLog},
		{"SourceWithANewline", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "pid-1", `start\n`, 1)
		}), agent.ErrMalformedLog},
		{"SourcePidTooLong", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "pid-1", "pid-12345678901", 1)
		}), agent.ErrMalformedLog},
		{"TextWithANewline", endless(func(i uint64) string { return entry(i, "line1\nFAKE start forged") }), agent.ErrMalformedLog},
		{"TimeInYear0", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "2026-01-01T00:00:00Z", "0000-01-01T00:00:00+01:00", 1)
		}), agent.ErrMalformedLog},
		{"TimeBeforeYear1InUTC", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "2026-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00", 1)
		}), agent.ErrMalformedLog},
		{"TimePastYear9999InUTC", endless(func(i uint64) string {
			return strings.Replace(entry(i, "x"), "2026-01-01T00:00:00Z", "9999-12-31T23:30:00-01:00", 1)
		}), agent.ErrMalformedLog},
		{"SeqGoesBack", endless(func(i uint64) string { return entry(7, "same") }), agent.ErrMalformedLog},
		{"TextTooLongDecoded", endless(func(i uint64) string { return entry(i, strings.Repeat("\\u0000", 5000)) }), agent.ErrReplyTooLarge},
		{"ErrorWithEndlessBody", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, strings.Repeat("e", 4096)); err != nil {
					return
				}
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hostileLogAgent(t, tc.answer)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			begin := time.Now()
			lines := 0
			_, err := c.Logs(ctx, agent.LogQuery{}, func(ls []agent.LogLine) error {
				if len(ls) > agent.LogBatch {
					t.Errorf("a batch of %d lines", len(ls))
				}
				lines += len(ls)
				return nil
			})
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("Logs: nil error after %d lines", lines)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Logs: %v; want %v", err, tc.want)
			}
			if d := time.Since(begin); d > 15*time.Second || ctx.Err() != nil {
				t.Errorf("Logs took %s", d)
			}
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
				t.Errorf("the heap grew by %d MB", grew>>20)
			}
		})
	}
}

// A follow of an endless answer hands on bounded batches for as long as
// its caller wants, and ends when the caller's context does.
func TestClient_LogsFollowOfAnEndlessAnswerEndsWithItsContext(t *testing.T) {
	c := hostileLogAgent(t, endless(func(i uint64) string { return entry(i, "spam") }))
	ctx, cancel := context.WithCancel(t.Context())
	total := 0
	done := make(chan error, 1)
	go func() {
		_, err := c.Logs(ctx, agent.LogQuery{Follow: true}, func(ls []agent.LogLine) error {
			if len(ls) > agent.LogBatch {
				return fmt.Errorf("a batch of %d lines", len(ls))
			}
			if total += len(ls); total > 50000 {
				cancel()
			}
			return nil
		})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follow: %v", err)
		}
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("the follow did not end within a minute")
	}
	// An emit error ends the call with it.
	stop := errors.New("client left")
	if _, err := c.Logs(t.Context(), agent.LogQuery{Follow: true}, func([]agent.LogLine) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("follow whose emit fails: %v; want its error", err)
	}
}

// The log is the daemon's alone: GET /sandboxd/logs wants the token, the
// facades' Transport never reaches it, and a process started through the
// Transport cannot keep its lines out of the log or pass them off as the
// start command's (X-Sandboxd-Log is dropped).
func TestClient_LogIsTheDaemonsAlone(t *testing.T) {
	c, sock := localClient(t)
	if resp := rawRequest(t, sock, http.MethodGet, "/sandboxd/logs", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /sandboxd/logs without the token: %d, want 401", resp.StatusCode)
	}
	hc := &http.Client{Transport: c.Transport()}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, agent.BaseURL+"/sandboxd/logs", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /sandboxd/logs through Transport: %d, want 404", resp.StatusCode)
	}
	via := processconnect.NewProcessClient(hc, agent.BaseURL)
	for _, h := range []string{"off", "start", "lower"} {
		req := connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "/bin/echo", Args: []string{"via-" + h}}})
		if h == "lower" {
			// A name the caller left uncanonical: the agent reads it
			// as X-Sandboxd-Log all the same.
			req.Header()["x-sandboxd-log"] = []string{"start"}
		} else {
			req.Header().Set("X-Sandboxd-Log", h)
		}
		st, err := via.Start(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		for st.Receive() {
		}
		st.Close()
	}
	var got []string
	if _, err := c.Logs(t.Context(), agent.LogQuery{}, func(ls []agent.LogLine) error {
		for _, l := range ls {
			got = append(got, l.Source[:4]+":"+l.Text)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(got, "|"); g != "pid-:via-off|pid-:via-start|pid-:via-lower" {
		t.Errorf("log %q; want the three lines, by pid", g)
	}
}

// Close drops the client's idle connections (it did nothing before: the
// token transport hid them from http.Client.CloseIdleConnections), so a
// call after it dials again.
func TestClient_CloseDropsIdleConnections(t *testing.T) {
	sock := localAgent(t)
	var dials atomic.Int64
	dial := agent.UnixDialer(sock)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { dials.Add(1); return dial(ctx) }, testToken)
	defer c.Close()
	logs := func() {
		t.Helper()
		if _, err := c.Logs(t.Context(), agent.LogQuery{}, func([]agent.LogLine) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	logs()
	testenv.WaitFor(t, "a call after Close to dial again", func() error {
		before := dials.Load()
		c.Close()
		logs()
		if dials.Load() == before {
			return errors.New("it reused a connection")
		}
		return nil
	})
}

// A call without Follow whose emit is slow (the daemon's client reads
// slowly) still gets every line: its time limit counts the reads of the
// agent's answer, not emit's time.
func TestClient_LogsOfASlowEmitAreWhole(t *testing.T) {
	c, _ := localClient(t)
	// Reading 1,000 lines takes milliseconds (more under -race on a busy
	// machine): 2 s is plenty, and less than the emits take.
	agent.SetLogReadTimeout(c, 2*time.Second)
	if _, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"seq", "1", "1000"}}); err != nil {
		t.Fatal(err)
	}
	got, calls := 0, 0
	_, err := c.Logs(t.Context(), agent.LogQuery{}, func(ls []agent.LogLine) error {
		got += len(ls)
		if calls++; calls <= 2 {
			// The fault: a client that takes its time, longer than the
			// whole read may.
			time.Sleep(1500 * time.Millisecond)
		}
		return nil
	})
	if err != nil || got != 1000 {
		t.Errorf("Logs: %d of 1000 lines, %v; want all, nil", got, err)
	}
}

// A call without Follow whose agent answers too slowly ends with an
// error wrapping context.DeadlineExceeded (never nil with part of the
// log).
func TestClient_LogsOfASlowAgentEndInAnError(t *testing.T) {
	c := hostileLogAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, entry(0, "first"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	agent.SetLogReadTimeout(c, 300*time.Millisecond)
	got := 0
	_, err := c.Logs(t.Context(), agent.LogQuery{}, func(ls []agent.LogLine) error { got += len(ls); return nil })
	if !errors.Is(err, context.DeadlineExceeded) || got != 1 {
		t.Errorf("Logs: %d lines, %v; want 1, DeadlineExceeded", got, err)
	}
}

// A line's time is kept in UTC (a time with an offset would keep a zone
// each), the same instant; and no follow batch holds more than
// LogBatchBytes of text, however large its lines are once decoded.
func TestClient_LogsBatchesAndTimesAreBounded(t *testing.T) {
	c := hostileLogAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, strings.Replace(entry(0, "x"), "2026-01-01T00:00:00Z", "2026-01-01T01:00:00.5+01:00", 1))
	})
	var got []agent.LogLine
	if _, err := c.Logs(t.Context(), agent.LogQuery{}, func(ls []agent.LogLine) error { got = append(got, ls...); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC); len(got) != 1 || got[0].Time != want {
		t.Errorf("got %+v; want one line at %v in UTC", got, want)
	}

	text := strings.Repeat("\uFFFD", 8192) // 24 KiB once decoded
	c = hostileLogAgent(t, endless(func(i uint64) string {
		return fmt.Sprintf(`{"seq":%d,"time":"2026-01-01T00:00:00Z","source":"pid-1","stream":"stdout","text":"%s"}`+"\n", i, text)
	}))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	total, most := 0, 0
	if _, err := c.Logs(ctx, agent.LogQuery{Follow: true}, func(ls []agent.LogLine) error {
		n := 0
		for _, l := range ls {
			n += len(l.Text)
		}
		most = max(most, n)
		if total += len(ls); total > 2000 {
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if most > agent.LogBatchBytes {
		t.Errorf("a batch held %d KiB of text; want at most %d", most>>10, agent.LogBatchBytes>>10)
	}
}
