package v1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

func newTestServer(t *testing.T, logs *bytes.Buffer) *server {
	t.Helper()
	none := func(context.Context) (map[service.State]int, error) { return nil, nil }
	m, err := newMetrics(prometheus.NewRegistry(), none)
	if err != nil {
		t.Fatal(err)
	}
	return &server{log: slog.New(slog.NewTextHandler(logs, nil)), metrics: m}
}

func TestWriteError(t *testing.T) {
	const secret = "password=hunter2"
	tests := []struct {
		name       string
		err        error
		status     int
		code       Code
		retryAfter string
	}{
		{"capacity with hint", &service.RetryAfterError{Err: fmt.Errorf("%w: full", service.ErrCapacityExhausted), After: 2500 * time.Millisecond}, 429, CodeCapacityExhausted, "3"},
		{"capacity without hint", fmt.Errorf("x: %w", service.ErrCapacityExhausted), 429, CodeCapacityExhausted, "1"},
		{"name conflict", fmt.Errorf("a sandbox named \"web\" already exists: %w", service.ErrNameConflict), 409, CodeNameConflict, ""},
		{"internal", errors.New("dial /run/x.sock: " + secret), 500, CodeInternal, ""},
		{"engine down", fmt.Errorf("create sandbox sb-1: %w: dial unix /run/x.sock: "+secret, runtime.ErrUnavailable), 503, CodeUnavailable, ""},
		{"disk full", fmt.Errorf("store row: %w: "+secret, store.ErrDiskFull), 503, CodeUnavailable, ""},
		{"store read-only", fmt.Errorf("store row: %w: "+secret, store.ErrUnwritable), 503, CodeUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newTestServer(t, &logs)
			r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, "rid1"))
			w := httptest.NewRecorder()
			s.writeError(w, r, tt.err)

			if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
				t.Errorf("status %d, Retry-After %q; want %d, %q", w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter)
			}
			var body errorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Error.Code != tt.code || body.Error.Retryable != apierr.Lookup(tt.code).Retryable {
				t.Errorf("body %s", w.Body)
			}
			if tt.code == CodeUnavailable && !strings.Contains(body.Error.Message, "(cause: ") {
				t.Errorf("a fault's answer does not name its cause: %s", w.Body)
			}
			if strings.Contains(w.Body.String(), secret) {
				t.Errorf("the answer leaks the internal error: %s", w.Body)
			}
			if tt.status >= 500 && (!strings.Contains(logs.String(), secret) || !strings.Contains(w.Body.String(), "rid1")) {
				t.Errorf("a server error must be logged in full and answered with the request id; log %q, body %s", logs.String(), w.Body)
			}
			var m dto.Metric
			if err := s.metrics.errors.WithLabelValues(string(tt.code)).Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetCounter().GetValue(); got != 1 {
				t.Errorf("errors_total{code=%q} = %v, want 1", tt.code, got)
			}
		})
	}
}

func TestDecodeJSON(t *testing.T) {
	type body struct {
		A int `json:"a"`
	}
	tests := []struct {
		in      string
		wantErr Code // "" for success
	}{
		{`{"a":1}`, ""},
		{"  \n{\"a\":1}\n ", ""},
		{``, CodeInvalidArgument},
		{`null`, CodeInvalidArgument},
		{`{"a":1}{`, CodeInvalidArgument},
		{`{"a":1} x`, CodeInvalidArgument},
		{`{"b":1}`, CodeInvalidArgument},
		{`{"a":"x"}`, CodeInvalidArgument},
		{`{"a":1`, CodeInvalidArgument},
		{`{"a":` + strings.Repeat(" ", 100) + `1}`, CodePayloadTooLarge},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/", strings.NewReader(tt.in))
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 64)
		var v body
		err := decodeJSON(r, &v)
		if tt.wantErr == "" {
			if err != nil || v.A != 1 {
				t.Errorf("decodeJSON(%q) = %v, %+v", tt.in, err, v)
			}
			continue
		}
		if code, _ := classify(err); code != tt.wantErr {
			t.Errorf("decodeJSON(%q) = %v (%s), want %s", tt.in, err, code, tt.wantErr)
		}
	}
}
