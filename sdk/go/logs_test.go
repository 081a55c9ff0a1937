package sandboxd_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// A logs stream the daemon ends early ends Logs with an *APIError (the
// code, message and retryable the daemon's record says), after the lines
// before it.
func TestLogs_TrailingErrorRecord(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"time":"2026-01-01T00:00:00Z","source":"pid-1","stream":"stdout","text":"one"}
{"error":{"code":"unavailable","message":"the sandbox's agent's log answer broke off","retryable":true}}
`)
	}))
	defer srv.Close()
	cl := sandboxd.New(srv.URL, "token")
	var got []string
	err := cl.Logs(t.Context(), "sb-1", sandboxd.LogOptions{}, func(l sandboxd.LogLine) error { got = append(got, l.Text); return nil })
	var apiErr *sandboxd.APIError
	if len(got) != 1 || got[0] != "one" || !errors.As(err, &apiErr) || !errors.Is(err, sandboxd.ErrUnavailable) ||
		!apiErr.Retryable || apiErr.Message != "the sandbox's agent's log answer broke off" {
		t.Errorf("lines %q, %v; want [one], the record's unavailable APIError", got, err)
	}
}
