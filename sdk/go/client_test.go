package sandboxd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "tok-secret"

// sleeps records the waits between retries; they return at once.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newClient serves h on a test server and returns a client for it whose
// retry waits are recorded in the returned sleeps.
func newClient(t *testing.T, h http.Handler, opts ...sandboxd.Option) (*sandboxd.Client, *sleeps) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s := &sleeps{}
	opts = append([]sandboxd.Option{
		sandboxd.WithHTTPClient(srv.Client()),
		sandboxd.WithSleep(s.sleep),
		sandboxd.WithUserAgent("sdk-test/1"),
	}, opts...)
	return sandboxd.New(srv.URL, testToken, opts...), s
}

// recorded is one request as the server saw it.
type recorded struct {
	Method, Path, Query string
	Header              http.Header
	Body                string
}

// recorder answers requests with the next of its replies (the last one
// repeats) and records them.
type recorder struct {
	t       *testing.T
	mu      sync.Mutex
	reqs    []recorded
	replies []func(w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rec.t.Errorf("read body: %v", err)
	}
	rec.mu.Lock()
	n := len(rec.reqs)
	rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(body)})
	reply := rec.replies[min(n, len(rec.replies)-1)]
	rec.mu.Unlock()
	reply(w, r)
}

func (rec *recorder) requests() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs...)
}

func replyJSON(status int, v any) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
}

func replyError(status int, code, msg string, retryable bool, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":%q,"retryable":%t}}`, code, msg, retryable)
	}
}

// replyHangUp drops the connection without answering.
func replyHangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func replyStatus(status int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }
}

const sandboxJSON = `{
  "id": "sb-0123456789abcdef", "name": "web", "image": "sandboxd/base:bookworm",
  "state": "running", "cpu": 1, "memory_mb": 512, "tags": {"team": "ml"},
  "env": {"FOO": "bar"}, "network": false,
  "created_at": "2026-12-02T10:00:00Z", "expires_at": "2026-12-02T11:00:00Z",
  "ssh_public_key": "ssh-ed25519 AAAA", "ssh_private_key": "-----BEGIN"
}`

func replySandbox(status int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, sandboxJSON)
	}
}

func wantSandbox() *sandboxd.Sandbox {
	return &sandboxd.Sandbox{
		ID: "sb-0123456789abcdef", Name: "web", Image: "sandboxd/base:bookworm",
		State: sandboxd.StateRunning, CPU: 1, MemoryMB: 512,
		Tags: map[string]string{"team": "ml"}, Env: map[string]string{"FOO": "bar"},
		CreatedAt:    time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		ExpiresAt:    time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC),
		SSHPublicKey: "ssh-ed25519 AAAA", SSHPrivateKey: "-----BEGIN",
	}
}

// jsonDiff compares two JSON documents by value.
func jsonDiff(t *testing.T, got, want string) string {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("bad JSON %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad JSON %q: %v", want, err)
	}
	return cmp.Diff(w, g)
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestCreateSandbox_Encoding(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(201)}}
	c, _ := newClient(t, rec)

	got, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{
		Image: "sandboxd/base:bookworm", Name: "web", CPU: 1.5, MemoryMB: 512,
		Env: map[string]string{"FOO": "bar"}, Tags: map[string]string{"team": "ml"},
		Timeout: 10*time.Minute + time.Millisecond, // rounds up
		Mounts:  []sandboxd.Mount{{Volume: "cache", Path: "/mnt/cache"}},
	})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if diff := cmp.Diff(wantSandbox(), got); diff != "" {
		t.Errorf("sandbox (-want +got):\n%s", diff)
	}
	reqs := rec.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/sandboxes" {
		t.Errorf("request = %s %s, want POST /v1/sandboxes", r.Method, r.Path)
	}
	for h, want := range map[string]string{
		"Authorization": "Bearer " + testToken,
		"Content-Type":  "application/json",
		"User-Agent":    "sdk-test/1",
	} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	if key := r.Header.Get("Idempotency-Key"); !hexKey.MatchString(key) {
		t.Errorf("Idempotency-Key = %q, want 32 hex digits", key)
	}
	want := `{"image":"sandboxd/base:bookworm","name":"web","cpu":1.5,"memory_mb":512,
		"env":{"FOO":"bar"},"tags":{"team":"ml"},"timeout_s":601,
		"mounts":[{"volume":"cache","path":"/mnt/cache"}]}`
	if diff := jsonDiff(t, r.Body, want); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

func TestCreateSandbox_CallerIdempotencyKey(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(201)}}
	c, _ := newClient(t, rec)
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{IdempotencyKey: "mine"}); err != nil {
		t.Fatal(err)
	}
	if got := rec.requests()[0].Header.Get("Idempotency-Key"); got != "mine" {
		t.Errorf("Idempotency-Key = %q, want %q", got, "mine")
	}
	if got := rec.requests()[0].Body; got != "{}" {
		t.Errorf("body = %s, want {}", got)
	}
}

// TestCreateSandbox_Timeout: no Timeout sends no timeout_s (the daemon's
// default), NoTimeout sends 0 (none), a Timeout wins over NoTimeout.
func TestCreateSandbox_Timeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  sandboxd.CreateRequest
		want string
	}{
		{"default", sandboxd.CreateRequest{}, `{}`},
		{"none", sandboxd.CreateRequest{NoTimeout: true}, `{"timeout_s":0}`},
		{"explicit", sandboxd.CreateRequest{Timeout: 90 * time.Second}, `{"timeout_s":90}`},
		{"explicit wins", sandboxd.CreateRequest{Timeout: time.Minute, NoTimeout: true}, `{"timeout_s":60}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(201)}}
			c, _ := newClient(t, rec)
			if _, err := c.CreateSandbox(t.Context(), tc.req); err != nil {
				t.Fatal(err)
			}
			if diff := jsonDiff(t, rec.requests()[0].Body, tc.want); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateSandbox_RetriesTransientWithSameKey(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "draining", true),
		replyStatus(502),
		replyError(500, "internal", "boom", true),
		replySandbox(201),
	}}
	c, s := newClient(t, rec, sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{
		MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
	}))
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Name: "web"}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	reqs := rec.requests()
	if len(reqs) != 4 {
		t.Fatalf("got %d attempts, want 4", len(reqs))
	}
	for i, r := range reqs[1:] {
		if r.Header.Get("Idempotency-Key") != reqs[0].Header.Get("Idempotency-Key") || r.Body != reqs[0].Body {
			t.Errorf("attempt %d: key %q body %s; first attempt: key %q body %s", i+2,
				r.Header.Get("Idempotency-Key"), r.Body, reqs[0].Header.Get("Idempotency-Key"), reqs[0].Body)
		}
	}
	// Equal jitter: wait n is in [base/2, base], base = 100ms·2ⁿ⁻¹ capped at 300ms.
	bases := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	got := s.all()
	if len(got) != len(bases) {
		t.Fatalf("waits = %v, want %d", got, len(bases))
	}
	for i, base := range bases {
		if got[i] < base/2 || got[i] > base {
			t.Errorf("wait %d = %v, want in [%v, %v]", i+1, got[i], base/2, base)
		}
	}
}

func TestCreateSandbox_RetriesAfterHangUp(t *testing.T) {
	// Go's transport may itself resend a request carrying an
	// Idempotency-Key on a reused connection; either way, every attempt
	// carries the same key.
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyHangUp,
		replyHangUp,
		replySandbox(201),
	}}
	c, _ := newClient(t, rec)
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	reqs := rec.requests()
	if len(reqs) != 3 {
		t.Fatalf("got %d attempts, want 3", len(reqs))
	}
	for _, r := range reqs {
		if r.Header.Get("Idempotency-Key") != reqs[0].Header.Get("Idempotency-Key") {
			t.Errorf("keys differ across attempts")
		}
	}
}

func TestCreateSandbox_HonoursRetryAfter(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(429, "capacity_exhausted", "no room", true, "Retry-After", "7"),
		replySandbox(201),
	}}
	c, s := newClient(t, rec)
	if _, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if diff := cmp.Diff([]time.Duration{7 * time.Second}, s.all()); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

// TestCreateSandbox_QuotaNotRetried: the caller's own quota does not clear
// by waiting; the SDK makes one attempt and returns ErrQuotaExceeded, also
// for a daemon that still answers it as a retryable 429.
func TestCreateSandbox_QuotaNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(http.ResponseWriter, *http.Request)
	}{
		{"403", replyError(403, "quota_exceeded", `quota exceeded: owner "a" may run 2 sandboxes at once and runs 2; stop or destroy one first`, false)},
		{"old 429", replyError(429, "quota_exceeded", "quota exceeded", true, "Retry-After", "5")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){tc.reply, replySandbox(201)}}
			c, _ := newClient(t, rec)
			_, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{})
			var apiErr *sandboxd.APIError
			if !errors.Is(err, sandboxd.ErrQuotaExceeded) || !errors.As(err, &apiErr) || apiErr.Retryable {
				t.Fatalf("err = %#v, want ErrQuotaExceeded, not retryable", err)
			}
			if n := len(rec.requests()); n != 1 {
				t.Errorf("got %d attempts, want 1", n)
			}
		})
	}
}

func TestCreateSandbox_AttemptsBounded(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
	}}
	c, _ := newClient(t, rec, sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 3}))
	_, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{})
	if !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := len(rec.requests()); n != 3 {
		t.Errorf("got %d attempts, want 3", n)
	}
}

func TestCreateSandbox_NotRetriedOnPermanentError(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(409, "name_conflict", `a sandbox named "web" already exists`, false),
	}}
	c, _ := newClient(t, rec)
	_, err := c.CreateSandbox(t.Context(), sandboxd.CreateRequest{Name: "web"})
	if !errors.Is(err, sandboxd.ErrNameConflict) || !errors.Is(err, sandboxd.ErrConflict) {
		t.Fatalf("err = %v, want ErrNameConflict and ErrConflict", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
}

func TestCreateSandbox_ContextCancelledWhileWaiting(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
	}}
	ctx, cancel := context.WithCancel(t.Context())
	c, _ := newClient(t, rec, sandboxd.WithSleep(func(ctx context.Context, d time.Duration) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}))
	_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("err = %v, want context.Canceled wrapping ErrUnavailable", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
}

func TestCreateSandbox_NoWaitPastDeadline(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(429, "capacity_exhausted", "full", true, "Retry-After", "30"),
	}}
	c, s := newClient(t, rec)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{})
	var apiErr *sandboxd.APIError
	if !errors.As(err, &apiErr) || apiErr.RetryAfter != 30*time.Second {
		t.Fatalf("err = %#v, want an APIError with RetryAfter 30s", err)
	}
	if got := s.all(); len(got) != 0 {
		t.Errorf("waited %v, want no wait: the deadline comes first", got)
	}
}

func TestAPIError_Mapping(t *testing.T) {
	tests := []struct {
		name   string
		reply  func(http.ResponseWriter, *http.Request)
		want   error
		status int
		code   sandboxd.ErrorCode
		retry  bool
	}{
		{"invalid", replyError(400, "invalid_argument", "bad image", false), sandboxd.ErrInvalidArgument, 400, "invalid_argument", false},
		{"unauthenticated", replyError(401, "unauthenticated", "no token", false), sandboxd.ErrUnauthenticated, 401, "unauthenticated", false},
		{"permission", replyError(403, "permission_denied", "admin only", false), sandboxd.ErrPermissionDenied, 403, "permission_denied", false},
		{"not found", replyError(404, "not_found", `sandbox "x"`, false), sandboxd.ErrNotFound, 404, "not_found", false},
		{"conflict", replyError(409, "conflict", "stopping", false), sandboxd.ErrConflict, 409, "conflict", false},
		{"hostname", replyError(409, "hostname_conflict", "taken", false), sandboxd.ErrHostnameConflict, 409, "hostname_conflict", false},
		{"too large", replyError(413, "payload_too_large", "1 MiB", false), sandboxd.ErrPayloadTooLarge, 413, "payload_too_large", false},
		{"key reused", replyError(422, "idempotency_key_reused", "different body", false), sandboxd.ErrIdempotencyKeyReused, 422, "idempotency_key_reused", false},
		{"capacity", replyError(429, "capacity_exhausted", "full", true), sandboxd.ErrCapacityExhausted, 429, "capacity_exhausted", true},
		{"internal", replyError(500, "internal", "oops", true), sandboxd.ErrInternal, 500, "internal", true},
		{"unavailable", replyError(503, "unavailable", "draining", true), sandboxd.ErrUnavailable, 503, "unavailable", true},
		{"not JSON 404", replyStatus(404), sandboxd.ErrNotFound, 404, "not_found", false},
		{"proxy 502", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		}, sandboxd.ErrUnavailable, 502, "unavailable", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){tt.reply}}
			c, _ := newClient(t, rec, sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 1}))
			_, err := c.GetSandbox(t.Context(), "x")
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.want)
			}
			var apiErr *sandboxd.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %T, want *APIError", err)
			}
			if apiErr.Status != tt.status || apiErr.Code != tt.code || apiErr.Retryable != tt.retry {
				t.Errorf("APIError = %+v, want status %d code %s retryable %t", apiErr, tt.status, tt.code, tt.retry)
			}
			if tt.want != sandboxd.ErrNotFound && errors.Is(err, sandboxd.ErrNotFound) {
				t.Errorf("err %v also matches ErrNotFound", err)
			}
		})
	}
}

func TestExec_NotRetried(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(503, "unavailable", "down", true),
	}}
	c, _ := newClient(t, rec)
	_, err := c.Exec(t.Context(), "sb-0123456789abcdef", sandboxd.ExecRequest{Command: "touch /once"})
	if !errors.Is(err, sandboxd.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
}

func TestExec_Encoding(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyJSON(200, map[string]any{"exit_code": 2, "stdout": "out", "stderr": "err", "duration_ms": 1500, "truncated": true}),
	}}
	c, _ := newClient(t, rec)
	got, err := c.Exec(t.Context(), "sb-0123456789abcdef", sandboxd.ExecRequest{
		Cmd: []string{"ls", "-l"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp", User: "root",
		Stdin: "in", Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxd.ExecResult{ExitCode: 2, Stdout: "out", Stderr: "err", Duration: 1500 * time.Millisecond, Truncated: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	r := rec.requests()[0]
	if r.Path != "/v1/sandboxes/sb-0123456789abcdef/exec" {
		t.Errorf("path = %s", r.Path)
	}
	if diff := jsonDiff(t, r.Body, `{"cmd":["ls","-l"],"env":{"A":"1"},"cwd":"/tmp","user":"root","stdin":"in","timeout_s":3}`); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(got)
	if diff := jsonDiff(t, string(b), `{"exit_code":2,"stdout":"out","stderr":"err","duration_ms":1500,"truncated":true}`); diff != "" {
		t.Errorf("marshalled result (-want +got):\n%s", diff)
	}
}

func TestDestroySandbox_RetriedNotFoundIsSuccess(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(500, "internal", "lost the answer", true),
		replyError(404, "not_found", "gone", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DestroySandbox(t.Context(), "sb-0123456789abcdef"); err != nil {
		t.Fatalf("DestroySandbox: %v, want success: the first attempt may have destroyed it", err)
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("got %d attempts, want 2", n)
	}
}

func TestDestroySandbox_HangUpThenNotFoundIsSuccess(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyHangUp,
		replyError(404, "not_found", "gone", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DestroySandbox(t.Context(), "sb-0123456789abcdef"); err != nil {
		t.Fatalf("DestroySandbox: %v, want success", err)
	}
}

func TestDestroySandbox_NotFoundFirstIsNotFound(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(404, "not_found", "never existed", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DestroySandbox(t.Context(), "sb-0123456789abcdef"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestDestroySandbox_NotFoundAfterRefusalIsNotFound(t *testing.T) {
	// A 429 is a refusal before any work: it cannot have destroyed anything.
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(429, "capacity_exhausted", "busy", true, "Retry-After", "1"),
		replyError(404, "not_found", "never existed", false),
	}}
	c, _ := newClient(t, rec)
	if err := c.DestroySandbox(t.Context(), "sb-0123456789abcdef"); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestDestroySandbox_NameResolvedToID(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replySandbox(200),
		replyStatus(204),
	}}
	c, _ := newClient(t, rec)
	if err := c.DestroySandbox(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rec.requests() {
		got = append(got, r.Method+" "+r.Path)
	}
	want := []string{"GET /v1/sandboxes/web", "DELETE /v1/sandboxes/sb-0123456789abcdef"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestAllSandboxes_WalksPages(t *testing.T) {
	pages := map[string]string{
		"":   `{"items":[{"id":"sb-1"},{"id":"sb-2"}],"next_page_token":"p2"}`,
		"p2": `{"items":[{"id":"sb-3"}],"next_page_token":"p3"}`,
		"p3": `{"items":[{"id":"sb-4"}]}`,
	}
	var queries []string
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		io.WriteString(w, pages[r.URL.Query().Get("page_token")])
	})
	c, _ := newClient(t, h)
	var ids []string
	opts := sandboxd.ListOptions{Tags: map[string]string{"team": "ml"}, State: sandboxd.StateRunning, Limit: 2}
	for sb, err := range c.AllSandboxes(t.Context(), opts) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if diff := cmp.Diff([]string{"sb-1", "sb-2", "sb-3", "sb-4"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	want := []string{
		"limit=2&state=running&tag.team=ml",
		"limit=2&page_token=p2&state=running&tag.team=ml",
		"limit=2&page_token=p3&state=running&tag.team=ml",
	}
	if diff := cmp.Diff(want, queries); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}

	// Breaking out of the loop fetches no further page.
	queries = nil
	for range c.AllSandboxes(t.Context(), sandboxd.ListOptions{}) {
		break
	}
	if len(queries) != 1 {
		t.Errorf("after break: %d requests, want 1", len(queries))
	}
}

func TestUpdateSandbox_Encoding(t *testing.T) {
	zero := time.Duration(0)
	hour := time.Hour
	tests := []struct {
		name string
		req  sandboxd.UpdateRequest
		want string
	}{
		{"nothing", sandboxd.UpdateRequest{}, `{}`},
		{"clear timeout", sandboxd.UpdateRequest{Timeout: &zero}, `{"timeout_s":0}`},
		{"set timeout", sandboxd.UpdateRequest{Timeout: &hour}, `{"timeout_s":3600}`},
		{"clear tags", sandboxd.UpdateRequest{Tags: map[string]string{}}, `{"tags":{}}`},
		{"set tags", sandboxd.UpdateRequest{Tags: map[string]string{"a": "b"}}, `{"tags":{"a":"b"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(200)}}
			c, _ := newClient(t, rec)
			if _, err := c.UpdateSandbox(t.Context(), "sb-0123456789abcdef", tt.req); err != nil {
				t.Fatal(err)
			}
			r := rec.requests()[0]
			if r.Method != "PATCH" {
				t.Errorf("method = %s, want PATCH", r.Method)
			}
			if r.Body != tt.want {
				t.Errorf("body = %s, want %s", r.Body, tt.want)
			}
		})
	}
}

func TestUploadFile_Streams(t *testing.T) {
	firstChunk := make(chan struct{})
	var got bytes.Buffer
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "PUT" || r.URL.Path != "/v1/sandboxes/sb-0123456789abcdef/files" || r.URL.Query().Get("path") != "/tmp/a b" {
			t.Errorf("request = %s %s", r.Method, r.URL)
		}
		if r.ContentLength != -1 {
			t.Errorf("ContentLength = %d, want -1 (unknown)", r.ContentLength)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("read first chunk: %v", err)
		}
		got.Write(buf)
		close(firstChunk) // the client only writes the rest after this
		io.Copy(&got, r.Body)
		w.WriteHeader(204)
	})
	c, _ := newClient(t, h)
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "hello")
		select {
		case <-firstChunk:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("server did not see the first chunk: the upload is buffered"))
			return
		}
		io.WriteString(pw, ", world")
		pw.Close()
	}()
	if err := c.UploadFile(t.Context(), "sb-0123456789abcdef", "/tmp/a b", pr); err != nil {
		t.Fatalf("UploadFile: %v", err)
	}
	if got.String() != "hello, world" {
		t.Errorf("server got %q, want %q", got.String(), "hello, world")
	}
}

func TestUploadFile_KnownLength(t *testing.T) {
	var length int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		length = r.ContentLength
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(204)
	})
	c, _ := newClient(t, h)
	if err := c.UploadFile(t.Context(), "sb-0123456789abcdef", "/f", strings.NewReader("12345")); err != nil {
		t.Fatal(err)
	}
	if length != 5 {
		t.Errorf("ContentLength = %d, want 5", length)
	}
}

func TestDownloadFile(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") != "/etc/hostname" {
			t.Errorf("path = %q", r.URL.Query().Get("path"))
		}
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "box\n")
	})
	c, _ := newClient(t, h)
	f, err := c.DownloadFile(t.Context(), "sb-0123456789abcdef", "/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "box\n" || f.Size != 4 {
		t.Errorf("download = %q, size %d, err %v; want %q, 4, nil", b, f.Size, err, "box\n")
	}
}

func TestAddDomain_ExistingBindingIsSuccess(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(409, "hostname_conflict", "bound", false),
		replyJSON(200, map[string]any{"items": []any{
			map[string]any{"hostname": "app.example.com", "port": 8080, "sandbox_id": "sb-0123456789abcdef"},
		}}),
	}}
	c, _ := newClient(t, rec)
	d, err := c.AddDomain(t.Context(), "sb-0123456789abcdef", "app.example.com", 8080)
	if err != nil {
		t.Fatalf("AddDomain: %v", err)
	}
	if d.Hostname != "app.example.com" || d.Port != 8080 {
		t.Errorf("domain = %+v", d)
	}
}

func TestAddDomain_OtherBindingIsConflict(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyError(409, "hostname_conflict", "bound elsewhere", false),
		replyJSON(200, map[string]any{"items": []any{}}),
	}}
	c, _ := newClient(t, rec)
	if _, err := c.AddDomain(t.Context(), "sb-0123456789abcdef", "app.example.com", 8080); !errors.Is(err, sandboxd.ErrHostnameConflict) {
		t.Fatalf("err = %v, want ErrHostnameConflict", err)
	}
}

func TestCreateToken_NotRetried(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replyHangUp}}
	c, _ := newClient(t, rec)
	if _, err := c.CreateToken(t.Context(), sandboxd.CreateTokenRequest{Name: "ci", Role: sandboxd.RoleUser}); err == nil {
		t.Fatal("CreateToken succeeded, want an error")
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("got %d attempts, want 1", n)
	}
}

func TestNew_BadBaseURL(t *testing.T) {
	c := sandboxd.New("127.0.0.1:7070", "")
	if _, err := c.GetSandbox(t.Context(), "x"); err == nil || !strings.Contains(err.Error(), "base URL") {
		t.Fatalf("err = %v, want a base URL error", err)
	}
}

func TestPathEscaping(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){replySandbox(200)}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{Path: r.URL.EscapedPath()})
		rec.mu.Unlock()
		replySandbox(200)(w, r)
	}))
	t.Cleanup(srv.Close)
	c := sandboxd.New(srv.URL+"/prefix/", "", sandboxd.WithHTTPClient(srv.Client()))
	if _, err := c.GetSandbox(t.Context(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.requests()[0].Path, "/prefix/v1/sandboxes/a%2Fb%20c"; got != want {
		t.Errorf("path = %s, want %s", got, want)
	}
}

// AddDomain sends the two fields the API takes, nothing else: the API
// refuses unknown fields (a sandbox_id in the body made every call 400).
func TestAddDomain_SendsOnlyHostnameAndPort(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyJSON(200, map[string]any{"hostname": "app.example.com", "port": 8080, "sandbox_id": "sb-0123456789abcdef"}),
	}}
	c, _ := newClient(t, rec)
	if _, err := c.AddDomain(t.Context(), "sb-0123456789abcdef", "app.example.com", 8080); err != nil {
		t.Fatal(err)
	}
	if got := rec.requests()[0].Body; got != `{"hostname":"app.example.com","port":8080}` {
		t.Errorf("body %s, want hostname and port only", got)
	}
}

// VerifyDomain posts to the binding's verify path and decodes the pending
// binding with its TXT record.
func TestVerifyDomain_PostsAndDecodes(t *testing.T) {
	rec := &recorder{t: t, replies: []func(http.ResponseWriter, *http.Request){
		replyJSON(200, map[string]any{"hostname": "app.example.com", "port": 8080, "sandbox_id": "sb-0123456789abcdef", "verified": false,
			"verification": map[string]any{"type": "TXT", "name": "_sandboxd-challenge.app.example.com", "value": "v", "error": "no TXT record"}}),
	}}
	c, _ := newClient(t, rec)
	d, err := c.VerifyDomain(t.Context(), "sb-0123456789abcdef", "app.example.com")
	if err != nil {
		t.Fatal(err)
	}
	want := sandboxd.Domain{Hostname: "app.example.com", Port: 8080, SandboxID: "sb-0123456789abcdef",
		Verification: sandboxd.Verification{Type: "TXT", Name: "_sandboxd-challenge.app.example.com", Value: "v", Error: "no TXT record"}}
	if *d != want {
		t.Errorf("VerifyDomain = %+v, want %+v", *d, want)
	}
	if r := rec.requests()[0]; r.Method != http.MethodPost || r.Path != "/v1/sandboxes/sb-0123456789abcdef/domains/app.example.com/verify" {
		t.Errorf("request %s %s", r.Method, r.Path)
	}
}
