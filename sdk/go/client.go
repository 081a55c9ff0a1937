package sandboxd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultBaseURL is where a local daemon listens unless told otherwise.
const DefaultBaseURL = "http://127.0.0.1:7070"

// defaultUserAgent names this SDK in the daemon's logs.
const defaultUserAgent = "sandboxd-go-sdk"

// maxJSONResponse bounds a JSON answer read into memory. The largest
// expected is a buffered exec result: two capped 1 MiB streams, escaped.
const maxJSONResponse = 16 << 20

// maxErrorBody bounds the bytes read from an error answer.
const maxErrorBody = 64 << 10

// Client talks to one sandboxd daemon over API v1. It is safe for
// concurrent use; create one and reuse it.
type Client struct {
	base      string // scheme://host[/prefix], no trailing slash
	baseErr   error  // a malformed base URL, reported by every call
	token     string
	http      *http.Client
	retry     RetryPolicy
	userAgent string

	// sleep waits for d or until ctx is done; replaced in tests.
	sleep func(ctx context.Context, d time.Duration) error
	// now is the clock used for Retry-After dates and deadline checks.
	now func() time.Time
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc instead of
// a client of its own. hc.Timeout, if set, bounds every request including
// file transfers; prefer contexts for deadlines.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithRetryPolicy replaces DefaultRetryPolicy. RetryPolicy{MaxAttempts: 1}
// disables retries.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *Client) { c.retry = p }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// New returns a Client for the daemon at baseURL (for example
// DefaultBaseURL) that authenticates with token; an empty token sends no
// Authorization header. New does not touch the network. A malformed
// baseURL is reported by every call rather than here.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		token:     token,
		http:      &http.Client{},
		retry:     DefaultRetryPolicy(),
		userAgent: defaultUserAgent,
		sleep:     sleepCtx,
		now:       time.Now,
	}
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		c.baseErr = fmt.Errorf("sandboxd: base URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		c.baseErr = fmt.Errorf("sandboxd: base URL %q: want http(s)://host[:port]", baseURL)
	default:
		u.RawQuery, u.Fragment = "", ""
		c.base = strings.TrimSuffix(u.String(), "/")
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// retryMode says how a call may be repeated.
type retryMode int

const (
	// retryNever: one attempt. For calls that are not idempotent (exec,
	// token creation) or whose body cannot be replayed (uploads).
	retryNever retryMode = iota
	// retrySafe: the call may be resent as is; the server returns the same
	// outcome (reads, PUT-like updates, create with an Idempotency-Key).
	retrySafe
	// retryDelete: like retrySafe, but a 404 after an attempt that may have
	// reached the server means that attempt did the work: success.
	retryDelete
)

// request is one logical API call, possibly sent several times.
type request struct {
	method string
	segs   []string // path segments after the base, unescaped
	query  url.Values
	body   []byte    // JSON body, resent as is on every attempt
	stream io.Reader // raw body, sent once (retry must be retryNever)
	size   int64     // length of stream, or -1 when unknown
	header http.Header
	retry  retryMode
	// buffer reads a successful answer fully inside the attempt, so that a
	// connection lost while reading it is retried like any other.
	buffer bool
}

// url returns the absolute URL of the request.
func (c *Client) url(r *request) string {
	var b strings.Builder
	b.WriteString(c.base)
	for _, s := range r.segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	if len(r.query) > 0 {
		b.WriteByte('?')
		b.WriteString(r.query.Encode())
	}
	return b.String()
}

// send performs r, retrying as r.retry and the policy allow, and returns
// the first 2xx answer; the caller closes its body. Any other outcome is an
// error: *APIError for an answer, the transport's error otherwise, or the
// context's error (wrapping the last failure) when ctx ends while waiting.
func (c *Client) send(ctx context.Context, r *request) (*http.Response, error) {
	if c.baseErr != nil {
		return nil, c.baseErr
	}
	var resp *http.Response
	err := c.withRetry(ctx, r.retry, func() (err error) {
		resp, err = c.attempt(ctx, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp == nil { // retryDelete: an earlier attempt did the work
		resp = &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}
	}
	return resp, nil
}

// withRetry calls fn until it succeeds, fails for good, or the policy's
// attempts are spent, waiting between attempts. In retryDelete mode, a
// not_found after an attempt that may have reached the server ends the
// loop with success (nil) although fn's last call failed.
func (c *Client) withRetry(ctx context.Context, mode retryMode, fn func() error) error {
	attempts := max(1, c.retry.MaxAttempts)
	if mode == retryNever {
		attempts = 1
	}
	mayHaveApplied := false
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if mode == retryDelete && mayHaveApplied && errors.Is(err, ErrNotFound) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		retryable, ambiguous := classify(err)
		mayHaveApplied = mayHaveApplied || ambiguous
		if !retryable || attempt >= attempts {
			return err
		}
		wait := c.retry.wait(attempt, err)
		if wait > maxRetryAfterWait {
			return err // the caller can read RetryAfter and decide
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			return err // waiting would only end in a deadline error
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (while waiting to retry after: %w)", serr, err)
		}
	}
}

// attempt sends r once.
func (c *Client) attempt(ctx context.Context, r *request) (*http.Response, error) {
	var body io.Reader
	switch {
	case r.body != nil:
		body = bytes.NewReader(r.body)
	case r.stream != nil && r.size == 0:
		body = http.NoBody
	case r.stream != nil:
		// Hide Close (and any WriterTo) so that the transport neither
		// closes the caller's reader nor treats it specially.
		body = struct{ io.Reader }{r.stream}
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r), body)
	if err != nil {
		return nil, err
	}
	if r.stream != nil {
		req.ContentLength = r.size
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.setHeaders(req.Header)
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, c.decodeError(resp)
	}
	if r.buffer {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONResponse+1))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
		if len(b) > maxJSONResponse {
			return nil, fmt.Errorf("response larger than %d bytes", maxJSONResponse)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	return resp, nil
}

func (c *Client) setHeaders(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	h.Set("User-Agent", c.userAgent)
	if h.Get("Accept") == "" {
		h.Set("Accept", "application/json")
	}
}

// decodeError turns a non-2xx answer into an *APIError.
func (c *Client) decodeError(resp *http.Response) *APIError {
	e := &APIError{
		Status:     resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), c.now()),
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body errorBody
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Retryable = body.Error.Code, body.Error.Message, body.Error.Retryable
	} else {
		e.Code = codeForStatus(resp.StatusCode)
	}
	e.Retryable = e.Retryable || transientStatus(resp.StatusCode)
	if e.Code == CodeQuotaExceeded {
		// The caller's own quota clears only when the caller stops or
		// destroys a sandbox: no retry of the same request helps, whatever
		// the status (daemons before quota_exceeded answered 429).
		e.Retryable = false
	}
	return e
}

// classify says whether a failed attempt may be retried, and whether it
// may have reached the server and done its work ("ambiguous").
func classify(err error) (retryable, ambiguous bool) {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		// 429 is a refusal before any work; a 5xx may come after some.
		return apiErr.Retryable, apiErr.Status >= 500
	}
	// A transport error. A failed dial sent nothing; anything later
	// (reset, EOF, timeout while waiting for the answer) may have.
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true, false
	}
	return true, true
}

// do sends a JSON request (in may be nil) and decodes a JSON answer into
// out (out may be nil to discard it).
func (c *Client) do(ctx context.Context, r *request, in, out any) error {
	if in != nil {
		b, err := encode(in)
		if err != nil {
			return err
		}
		r.body = b
	}
	r.buffer = true
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return decode(resp.Body, out)
}

// encode is a request's JSON body.
func encode(in any) ([]byte, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return b, nil
}

// decode decodes a JSON answer into out.
func decode(body io.Reader, out any) error {
	if err := json.NewDecoder(body).Decode(out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// NewIdempotencyKey returns a random 128-bit key in hex, the form
// CreateSandbox uses when CreateRequest.IdempotencyKey is empty.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// Health is the answer of GET /healthz.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
}

// Health reports whether the daemon is up. It needs no token and retries
// transient failures.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.do(ctx, &request{method: http.MethodGet, segs: []string{"healthz"}, retry: retrySafe}, nil, &h); err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	return &h, nil
}
