package v1

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// brokenLogs is a Service whose Logs passes one line and then fails as
// the service does when the agent's answer breaks off after the 200.
type brokenLogs struct {
	Service
	emitErr error // what the line's emit returned
}

func (b *brokenLogs) Logs(_ context.Context, _ service.Caller, _ string, _ service.LogQuery, emit func([]service.LogLine) error) error {
	if err := emit(nil); err != nil {
		return err
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if b.emitErr = emit([]service.LogLine{{Time: at, Source: "pid-1", Stream: "stdout", Text: "one"}}); b.emitErr != nil {
		return b.emitErr
	}
	return service.Unavailable("the sandbox's agent's log answer broke off", agent.ErrMalformedLog)
}

// A logs stream that breaks after its 200 ends with a line saying so, in
// the stream's format (it just ended, as if whole).
func TestSandboxLogs_BrokenStreamEndsWithAnErrorLine(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"", `{"time":"2026-01-01T00:00:00Z","source":"pid-1","stream":"stdout","text":"one"}` + "\n" +
			`{"error":{"code":"unavailable","message":"the sandbox's agent's log answer broke off; retry later","retryable":true}}` + "\n"},
		{"text", "one\n" + logStreamError + "the sandbox's agent's log answer broke off; retry later\n"},
	} {
		s := newTestServer(t, &bytes.Buffer{})
		s.svc = &brokenLogs{}
		r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-1/logs?format="+tc.format, nil)
		r.SetPathValue("id", "sb-1")
		w := httptest.NewRecorder()
		if err := s.sandboxLogs(w, r); err != nil {
			t.Fatalf("format %q: %v", tc.format, err)
		}
		if got := w.Body.String(); w.Code != http.StatusOK || got != tc.want {
			t.Errorf("format %q: %d %q; want 200 %q", tc.format, w.Code, got, tc.want)
		}
	}
}

// failingWriter is a client gone: every write fails.
type failingWriter struct{ *httptest.ResponseRecorder }

func (f failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// A stream whose client left gets no error line (nobody reads it).
func TestSandboxLogs_NoErrorLineForAClientGone(t *testing.T) {
	s := newTestServer(t, &bytes.Buffer{})
	svc := &brokenLogs{}
	s.svc = svc
	r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-1/logs", nil)
	r.SetPathValue("id", "sb-1")
	w := failingWriter{httptest.NewRecorder()}
	if err := s.sandboxLogs(w, r); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(svc.emitErr, io.ErrClosedPipe) || w.Body.Len() != 0 {
		t.Errorf("emit %v, body %q; want the write's error and nothing written", svc.emitErr, w.Body)
	}
}
