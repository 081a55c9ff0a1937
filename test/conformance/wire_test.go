package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/auth"
)

// wire is one API, as a client speaks it. Every method sends real HTTP to
// the shared daemon. A failure the daemon answered is a *wireError; any
// other error (transport, a body that is not the wire's shape) fails the
// case that sees it.
type wire interface {
	Name() string
	// Create makes a sandbox of image with env and labels; with key, the
	// wire's Idempotency-Key header.
	Create(ctx context.Context, r createReq) (string, error)
	Get(ctx context.Context, id string) (view, error)
	// List returns the sandboxes whose labels include every one of labels.
	List(ctx context.Context, labels map[string]string) ([]view, error)
	// Stop is the wire's way to stop a sandbox keeping its files (E2B:
	// pause); Start brings it back (E2B: connect).
	Stop(ctx context.Context, id string) error
	Start(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Upload(ctx context.Context, id, path string, data []byte) error
	Download(ctx context.Context, id, path string) ([]byte, error)
	ListDir(ctx context.Context, id, path string) ([]string, error)
	Exec(ctx context.Context, id string, r execReq) (execResult, error)
	// CreateRaw posts body to the wire's create, $IMAGE, $ENV and
	// $LABELS replaced by the names of the wire's image, env and labels
	// fields.
	CreateRaw(ctx context.Context, body string) error
	// As returns the wire speaking with credential cred instead of the
	// daemon's admin token (on E2B's envd, instead of the sandbox's
	// access token too).
	As(cred credential) wire
}

// credential is what a request carries instead of a valid token.
type credential int

const (
	credNone  credential = iota + 1 // no credential at all
	credWrong                       // a well-formed token the daemon never issued
	credOther                       // a valid user token of another owner (otherToken)
)

// otherToken is a user token of an owner who has no sandbox of the
// table's: TestConformance mints it.
var otherToken string

// wrongToken is a well-formed token of the daemon's kind that it never
// issued.
var wrongToken, _, _ = auth.Generate(auth.RoleAdmin, "conformance-nobody")

type createReq struct {
	Env    map[string]string
	Labels map[string]string
	Key    string // Idempotency-Key; "" none
}

// view is a sandbox as a wire shows it, in the suite's terms.
type view struct {
	ID     string
	State  string // stateRunning or stateStopped; else the wire's own word
	Labels map[string]string
}

const (
	stateRunning = "running"
	stateStopped = "stopped"
)

type execReq struct {
	// Command is a shell command line; "" is the wire's empty command
	// (bad input).
	Command string
	Env     map[string]string
	Cwd     string
}

type execResult struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Combined: the wire merges stderr into stdout (Daytona's execute).
	Combined bool
}

// wireError is an error the daemon answered, read in its wire's shape.
type wireError struct {
	Wire   string
	Status int         // the HTTP status; for a Connect error, its code's
	Class  apierr.Code // the class of the edges' table; "" when none maps
	Raw    string      // the body, for the failure message
	// Msg is the message a person reads, when the body is not JSON
	// (a Connect error's, without Connect's code word).
	Msg string
}

// messages returns the messages of e's body: every "message" string of
// its JSON, or Msg.
func (e *wireError) messages() []string {
	if e.Msg != "" {
		return []string{e.Msg}
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "message" {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var body any
	if json.Unmarshal([]byte(e.Raw), &body) == nil {
		walk(body)
	}
	return out
}

func (e *wireError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Wire, e.Status, e.Class, e.Raw)
}

// classOf returns err's class, and "" with a message when err is not an
// answer of the daemon.
func classOf(err error) (apierr.Code, string) {
	var we *wireError
	if errors.As(err, &we) {
		return we.Class, ""
	}
	if err == nil {
		return "", "no error"
	}
	return "", err.Error()
}

// statusClass is the class a wire that carries no code means by status:
// the table's class for it, the more general one of several (409 is
// conflict).
func statusClass(status int) apierr.Code {
	if status == http.StatusBadGateway {
		return classBadGateway
	}
	for _, c := range apierr.Classes() {
		if c.Status == status {
			return c.Code
		}
	}
	return ""
}

// classBadGateway is no class of the table: E2B's edge answers 502 for an
// envd request it cannot route (see e2bEnvdUnreachable).
const classBadGateway apierr.Code = "bad_gateway"

// connectClass is the class of a Connect error's code.
func connectClass(code connect.Code) apierr.Code {
	switch code {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return apierr.InvalidArgument
	case connect.CodeUnauthenticated:
		return apierr.Unauthenticated
	case connect.CodePermissionDenied:
		return apierr.PermissionDenied
	case connect.CodeNotFound:
		return apierr.NotFound
	case connect.CodeAlreadyExists, connect.CodeAborted, connect.CodeFailedPrecondition:
		return apierr.Conflict
	case connect.CodeResourceExhausted:
		return apierr.CapacityExhausted
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return apierr.Unavailable
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		return apierr.Internal
	}
	return ""
}

// connectStatus is the HTTP status Connect gives code.
func connectStatus(code connect.Code) int {
	switch code {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// httpClient is every adapter's client: no connection reuse across the
// daemon's restarts is needed, and each request has its own deadline.
var httpClient = &http.Client{Timeout: 2 * time.Minute}

// call sends one request and returns the response body on a 2xx; on any
// other status, the wire's parse of the body (an error: a *wireError, or
// a shape error).
func call(ctx context.Context, method, url string, hdr http.Header, body io.Reader,
	parse func(status int, body []byte) error) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, 0, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	if resp.StatusCode/100 == 2 {
		return b, resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, resp.StatusCode, fmt.Errorf("%s %s: %d with Content-Type %q, want JSON: %q", method, url, resp.StatusCode, ct, b)
	}
	return nil, resp.StatusCode, parse(resp.StatusCode, b)
}

// strict decodes b into v, refusing a field v lacks: each wire's error
// shape exactly.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// jsonBody encodes v for a request.
func jsonBody(v any) io.Reader {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps and strings always marshal
	}
	return bytes.NewReader(b)
}

// testContext is t's context bounded by d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
