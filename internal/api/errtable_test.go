package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/api/apierr/apierrtest"
	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/api/e2b"
	v1 "github.com/sandboxd/sandboxd/internal/api/v1"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// The services below are the real edges' Service interfaces with one
// method, Get, injecting the error under test; nothing else is called.

type nativeGet struct {
	v1.Service
	err error
}

func (s *nativeGet) Get(context.Context, service.Caller, string) (service.Sandbox, error) {
	return service.Sandbox{}, s.err
}

type e2bGet struct {
	e2b.Service
	err error
}

func (s *e2bGet) Get(context.Context, service.Caller, string) (service.Sandbox, error) {
	return service.Sandbox{}, s.err
}

type daytonaGet struct {
	daytona.Service
	err error
}

func (s *daytonaGet) Get(context.Context, service.Caller, string) (service.Sandbox, error) {
	return service.Sandbox{}, s.err
}

// tokens is an in-memory auth.TokenLookup for the real auth.Authenticator.
type tokens map[[32]byte]auth.StoredToken

func (t tokens) LookupAPITokenByHash(_ context.Context, h [32]byte) (auth.StoredToken, error) {
	st, ok := t[h]
	if !ok {
		return auth.StoredToken{}, auth.ErrTokenNotFound
	}
	return st, nil
}

// wires is the three edges over real HTTP, each answering every GET of a
// sandbox with the error set by inject.
type wires struct {
	token      string // an admin's
	maxBody    int64  // every edge's JSON body cap
	nativeSvc  *nativeGet
	e2bSvc     *e2bGet
	daytonaSvc *daytonaGet
	// base URLs
	nativeURL, e2bURL, dtURL string
	// logs is each wire's log, by wire name.
	logs map[string]*syncBuffer
}

// syncBuffer is a log sink that handlers on other goroutines write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was written and empties the buffer.
func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// logged reports whether wire logged a failed request since the last call.
// Each edge logs one, with the error in full, before it answers.
func (w *wires) logged(wire string) bool {
	return strings.Contains(w.logs[wire].take(), "request failed")
}

func newWires(t *testing.T) *wires {
	t.Helper()
	plaintext, tok, hash := auth.Generate(auth.RoleAdmin, "errtab")
	authn := auth.NewAuthenticator(tokens{hash: {ID: tok.ID, Role: string(tok.Role), Owner: tok.Owner, SecretSHA256: hash}})
	w := &wires{token: plaintext, maxBody: 64,
		nativeSvc: &nativeGet{}, e2bSvc: &e2bGet{}, daytonaSvc: &daytonaGet{},
		logs: map[string]*syncBuffer{"native": {}, "e2b": {}, "daytona": {}}}
	logger := func(wire string) *slog.Logger { return slog.New(slog.NewTextHandler(w.logs[wire], nil)) }

	native, err := v1.New(v1.Options{Service: w.nativeSvc, Auth: authn, Tokens: auth.NewIssuer(nil), MaxBodyBytes: w.maxBody, Logger: logger("native")})
	if err != nil {
		t.Fatal(err)
	}
	e := e2b.New(e2b.Options{Service: w.e2bSvc, Auth: authn, AccessTokenKey: []byte("errtab"), MaxBodyBytes: w.maxBody, Logger: logger("e2b")})
	d := daytona.New(daytona.Options{Service: w.daytonaSvc, Auth: authn, MaxBodyBytes: w.maxBody, Logger: logger("daytona")})
	t.Cleanup(func() { d.Close() })
	for _, s := range []struct {
		h   http.Handler
		url *string
	}{{native, &w.nativeURL}, {e, &w.e2bURL}, {d, &w.dtURL}} {
		srv := httptest.NewServer(s.h)
		t.Cleanup(srv.Close)
		*s.url = srv.URL
	}
	return w
}

func (w *wires) inject(err error) { w.nativeSvc.err, w.e2bSvc.err, w.daytonaSvc.err = err, err, err }

// answer is one wire's answer to an error, in the table's terms.
type answer struct {
	Status     int
	Code       apierr.Code // the native wire's; E2B and Daytona carry none
	Retryable  bool        // the native body's; E2B and Daytona: apierr.RetryableStatus
	Message    string
	RetryAfter string
}

// do sends req and reads its answer in the wire's error shape.
func do(t *testing.T, wire string, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", wire, ct)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields() // each wire's shape exactly
	switch wire {
	case "native":
		var body struct {
			Error struct {
				Code      apierr.Code `json:"code"`
				Message   string      `json:"message"`
				Retryable bool        `json:"retryable"`
			} `json:"error"`
		}
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("native: body %q: %v", raw, err)
		}
		a.Code, a.Message, a.Retryable = body.Error.Code, body.Error.Message, body.Error.Retryable
		// A server error's message ends with the request id (its log line's).
		if id := resp.Header.Get("X-Request-Id"); id != "" {
			a.Message = strings.TrimSuffix(a.Message, " (request id "+id+")")
		}
	case "e2b":
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("e2b: body %q: %v", raw, err)
		}
		if body.Code != resp.StatusCode {
			t.Errorf("e2b: body code %d, status %d: the SDKs read the body's", body.Code, resp.StatusCode)
		}
		a.Message, a.Retryable = body.Message, apierr.RetryableStatus(resp.StatusCode)
	case "daytona":
		var body struct {
			StatusCode int    `json:"statusCode"`
			Message    string `json:"message"`
			Error      string `json:"error"`
		}
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("daytona: body %q: %v", raw, err)
		}
		if body.StatusCode != resp.StatusCode || body.Error != http.StatusText(resp.StatusCode) {
			t.Errorf("daytona: body %s, status %d", raw, resp.StatusCode)
		}
		a.Message, a.Retryable = body.Message, apierr.RetryableStatus(resp.StatusCode)
	}
	// Every message the table produces says what failed once: no lower
	// package's prefix, no code word twice.
	if why := apierrtest.Unclear(a.Message); why != "" {
		t.Errorf("%s: message %q has %s", wire, a.Message, why)
	}
	return a
}

// request builds wire's request: GET of a sandbox, or with body a create.
func (w *wires) request(t *testing.T, wire, token string, body io.Reader) *http.Request {
	t.Helper()
	method, url := http.MethodGet, ""
	switch wire {
	case "native":
		url = w.nativeURL + "/v1/sandboxes/sb-00000000000000aa"
		if body != nil {
			url = w.nativeURL + "/v1/sandboxes"
		}
	case "e2b":
		url = w.e2bURL + "/sandboxes/sb-00000000000000aa"
		if body != nil {
			url = w.e2bURL + "/sandboxes"
		}
	case "daytona":
		url = w.dtURL + daytona.Prefix + "/sandbox/sb-00000000000000aa"
		if body != nil {
			url = w.dtURL + daytona.Prefix + "/sandbox"
		}
	}
	if body != nil {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		if wire == "e2b" {
			req.Header.Set("X-API-KEY", token)
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

var allWires = []string{"native", "e2b", "daytona"}

// want is the answer every wire gives for class code with message msg.
func want(wire string, code apierr.Code, msg, retryAfter string) answer {
	c := apierr.Lookup(code)
	a := answer{Status: c.Status, Retryable: c.Retryable, Message: msg, RetryAfter: retryAfter}
	if wire == "native" {
		a.Code = code
	}
	return a
}

// TestErrorTable_EveryClassOnEveryWire: every class of the edges' one
// error table (package apierr), reached through the real handlers of the
// native API, the E2B facade and the Daytona facade over HTTP, answers the
// same status, retryability and message on all three (the code name on
// the native wire, which carries it; E2B's and Daytona's retryability is
// their status, apierr.RetryableStatus), in each wire's own shape, with
// Retry-After exactly on 429, and is logged as a failed request exactly
// when it is the daemon's fault (a 5xx but 507). A class added to the
// table without a case here fails the test.
func TestErrorTable_EveryClassOnEveryWire(t *testing.T) {
	w := newWires(t)
	wrap := func(sentinel error) error { return fmt.Errorf("sandbox \"web\": %w", sentinel) }
	imageRefused := &service.ImageError{Reason: `registry 127.0.0.1:5000 refused the credentials`, Kind: service.ErrPermissionDenied}
	imageMissing := &service.ImageError{Reason: `127.0.0.1:5000/t/x:v1: no such image in the registry`, Kind: service.ErrNotFound}
	cases := []struct {
		name       string
		err        error
		code       apierr.Code
		status     int // the table's, written out: a change to the table must change this too
		message    string
		retryAfter string
	}{
		{"FieldError", &service.FieldError{Field: "cpu", Reason: "must be between 0.1 and 16 cores"},
			apierr.InvalidArgument, 400, "cpu: must be between 0.1 and 16 cores", ""},
		{"ImageTooLarge", &service.FieldError{Field: "image", Kind: service.ErrImageTooLarge, Reason: "image is 2 MB, more than the cap of 1 MB"},
			apierr.InvalidArgument, 400, "image: image is 2 MB, more than the cap of 1 MB", ""},
		{"ImageNotPresent", &service.FieldError{Field: "image", Kind: service.ErrImageNotPresent, Reason: `image "x" is not present on this host`},
			apierr.InvalidArgument, 400, `image: image "x" is not present on this host`, ""},
		{"StoreInvalid", wrap(store.ErrInvalidArgument), apierr.InvalidArgument, 400, `sandbox "web": invalid argument`, ""},
		{"Unauthenticated", fmt.Errorf("token abc: %w", auth.ErrUnauthenticated), apierr.Unauthenticated, 401, apierr.MsgUnauthenticated, ""},
		{"PermissionDenied", wrap(service.ErrPermissionDenied), apierr.PermissionDenied, 403, `sandbox "web": permission denied`, ""},
		{"PullRefused", imageRefused, apierr.PermissionDenied, 403, imageRefused.Reason, ""},
		{"NotFound", wrap(service.ErrNotFound), apierr.NotFound, 404, `sandbox "web": not found`, ""},
		{"StoreNotFound", wrap(store.ErrNotFound), apierr.NotFound, 404, `sandbox "web": not found`, ""},
		{"PullNotFound", imageMissing, apierr.NotFound, 404, imageMissing.Reason, ""},
		{"TokenNotFound", fmt.Errorf("revoke abc: %w", auth.ErrTokenNotFound), apierr.NotFound, 404, "revoke abc: auth: token not found", ""},
		{"Conflict", wrap(service.ErrConflict), apierr.Conflict, 409, `sandbox "web": conflict`, ""},
		{"Paused", wrap(service.ErrPaused), apierr.Conflict, 409, `sandbox "web": sandbox is paused; resume it: conflict`, ""},
		{"StoreStateConflict", wrap(store.ErrStateConflict), apierr.Conflict, 409, `sandbox "web": sandbox state conflict`, ""},
		{"NameConflict", wrap(service.ErrNameConflict), apierr.NameConflict, 409, `sandbox "web": name conflict`, ""},
		{"HostnameConflict", wrap(service.ErrHostnameConflict), apierr.HostnameConflict, 409, `sandbox "web": hostname conflict`, ""},
		{"StoreHostnameConflict", wrap(store.ErrHostnameConflict), apierr.HostnameConflict, 409, `sandbox "web": hostname already bound`, ""},
		{"PayloadTooLarge", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 1024}), apierr.PayloadTooLarge, 413, "request body exceeds 1024 bytes", ""},
		{"IdempotencyKeyReused", wrap(service.ErrIdempotencyKeyReused), apierr.IdempotencyKeyReused, 422, apierr.MsgIdempotencyKeyReused, ""},
		{"StoreIdempotencyKeyReused", wrap(store.ErrIdempotencyKeyReused), apierr.IdempotencyKeyReused, 422, apierr.MsgIdempotencyKeyReused, ""},
		{"CapacityWithHint", &service.RetryAfterError{Err: wrap(service.ErrCapacityExhausted), After: 1500 * time.Millisecond},
			apierr.CapacityExhausted, 429, apierr.MsgCapacityExhausted, "2"},
		{"CapacityWithoutHint", wrap(service.ErrCapacityExhausted), apierr.CapacityExhausted, 429, apierr.MsgCapacityExhausted, "1"},
		{"Quota", &service.RetryAfterError{Err: &service.QuotaError{Reason: `quota exceeded: owner "a" may run 2 sandboxes`}, After: 5 * time.Second},
			apierr.QuotaExceeded, 403, `quota exceeded: owner "a" may run 2 sandboxes`, ""},
		{"Internal", errors.New("dial /run/secret.sock: refused"), apierr.Internal, 500, apierr.MsgInternal, ""},
		{"StoreIDConflictIsInternal", wrap(store.ErrIDConflict), apierr.Internal, 500, apierr.MsgInternal, ""},
		{"Unavailable", wrap(service.ErrUnavailable), apierr.Unavailable, 503, apierr.MsgUnavailable, ""},
		{"UnavailableWithReason", service.Unavailable(service.ReasonNoQuorum, errors.New("etcd 10.0.0.7:2379: deadline")),
			apierr.Unavailable, 503, service.ReasonNoQuorum + "; retry later", ""},
		{"DeadlineExceeded", wrap(context.DeadlineExceeded), apierr.Unavailable, 503, apierr.MsgUnavailable, ""},
		{"EngineDown", fmt.Errorf("create sandbox sb-1: %w: dial unix /var/run/docker.sock", runtime.ErrUnavailable),
			apierr.Unavailable, 503, service.FaultMessage(service.CauseEngine), ""},
		{"HostDiskFull", wrap(store.ErrDiskFull), apierr.Unavailable, 503, service.FaultMessage(service.CauseDisk), ""},
		{"StoreReadOnly", wrap(store.ErrUnwritable), apierr.Unavailable, 503, service.FaultMessage(service.CauseStore), ""},
		{"RegistryDown", &service.FaultError{Cause: service.CauseRegistry, Err: errors.New("dial tcp 127.0.0.1:5000: refused")},
			apierr.Unavailable, 503, service.FaultMessage(service.CauseRegistry), ""},
		{"SandboxDiskFull", fmt.Errorf("upload: %w: no space left on device", service.ErrDiskFull), apierr.DiskFull, 507, apierr.MsgDiskFull, ""},
	}
	covered := map[apierr.Code]bool{}
	for _, tc := range cases {
		covered[tc.code] = true
		t.Run(tc.name, func(t *testing.T) {
			if got := apierr.Lookup(tc.code).Status; got != tc.status {
				t.Errorf("the table says %s is %d, this case %d", tc.code, got, tc.status)
			}
			w.inject(tc.err)
			for _, wire := range allWires {
				w.logs[wire].take()
				got := do(t, wire, w.request(t, wire, w.token, nil))
				if diff := cmp.Diff(want(wire, tc.code, tc.message, tc.retryAfter), got); diff != "" {
					t.Errorf("%s wire (-want +got):\n%s", wire, diff)
				}
				if logged, fault := w.logged(wire), tc.status >= 500 && tc.status != 507; logged != fault {
					t.Errorf("%s wire: logged as a failed request: %v, want %v", wire, logged, fault)
				}
			}
		})
	}
	for _, c := range apierr.Classes() {
		if !covered[c.Code] {
			t.Errorf("class %s (%d) has no case here: add one, with what every wire answers", c.Code, c.Status)
		}
	}
}

// TestErrorTable_EdgesOwnPaths: the edges' own ways into two classes — no
// credential at all, and a JSON body past the cap — answer as the table
// says on every wire, not in words of each edge's own.
func TestErrorTable_EdgesOwnPaths(t *testing.T) {
	w := newWires(t)
	w.inject(errors.New("not reached"))
	for _, wire := range allWires {
		got := do(t, wire, w.request(t, wire, "", nil))
		if diff := cmp.Diff(want(wire, apierr.Unauthenticated, apierr.MsgUnauthenticated, ""), got); diff != "" {
			t.Errorf("%s wire, no credential (-want +got):\n%s", wire, diff)
		}
		got = do(t, wire, w.request(t, wire, "e2b_0123", nil))
		if diff := cmp.Diff(want(wire, apierr.Unauthenticated, apierr.MsgUnauthenticated, ""), got); diff != "" {
			t.Errorf("%s wire, a malformed key (-want +got):\n%s", wire, diff)
		}
		big := `{"metadata":{"k":"` + strings.Repeat("x", int(w.maxBody)) + `"}}`
		got = do(t, wire, w.request(t, wire, w.token, strings.NewReader(big)))
		msg := fmt.Sprintf("request body exceeds %d bytes", w.maxBody)
		if diff := cmp.Diff(want(wire, apierr.PayloadTooLarge, msg, ""), got); diff != "" {
			t.Errorf("%s wire, a body past the cap (-want +got):\n%s", wire, diff)
		}
	}
}
