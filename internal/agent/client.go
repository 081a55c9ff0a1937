package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/gen/envd/filesystem/filesystemconnect"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
)

// baseURL is the URL every client request uses; the host is never resolved,
// the dial function decides where the connection goes.
const baseURL = "http://agent"

// HeaderToken carries the agent token on every request but GET /health;
// the server checks the same header (server.HeaderToken).
const HeaderToken = "X-Access-Token"

// DialFunc opens a connection to one agent, for example
// runtime.Runtime.DialAgent bound to a sandbox id.
type DialFunc func(ctx context.Context) (net.Conn, error)

// UnixDialer dials the agent socket at path.
func UnixDialer(path string) DialFunc {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
}

// Client talks to one agent over connections from a DialFunc, with the
// agent token on every request. It is safe for concurrent use and keeps
// idle connections for reuse; Close drops them. Everything it reads is
// bounded (limits.go): a hostile agent fails its own calls, nothing more.
type Client struct {
	token string
	hc    *http.Client
	proc  processconnect.ProcessClient
	fs    filesystemconnect.FilesystemClient
	// list is proc with ListProcesses' smaller read bound (list.go).
	list processconnect.ProcessClient
	// logReadTimeout, when set, replaces the constant of the same name
	// (tests).
	logReadTimeout time.Duration
}

// NewClient returns a client of the agent reached through dial and
// authenticated with token.
func NewClient(dial DialFunc, token string) *Client {
	return newClient(newTransport(dial), token)
}

// WithToken returns a client of the same agent authenticated with token
// that shares c's connections (the idle ones included: its first call
// dials nothing when c has one). It is for a token the agent was just
// told to take (Configuration.NewToken), so that the first call after a
// pool claim rides the claim's connection. Closing either client closes
// the idle connections of both.
func (c *Client) WithToken(token string) *Client {
	return newClient(c.hc.Transport.(*tokenTransport).base, token)
}

func newClient(base http.RoundTripper, token string) *Client {
	hc := &http.Client{Transport: &tokenTransport{token: token, base: base}}
	// The generated clients read through rpcTransport, which bounds
	// message bodies (see limits.go); downloads through hc stay streams.
	rpc := &http.Client{Transport: rpcTransport{base: hc.Transport}}
	return &Client{
		token: token,
		hc:    hc,
		proc:  processconnect.NewProcessClient(rpc, baseURL, connectOptions()...),
		fs:    filesystemconnect.NewFilesystemClient(rpc, baseURL, connectOptions()...),
		list: processconnect.NewProcessClient(rpc, baseURL,
			append(connectOptions(), connect.WithReadMaxBytes(maxListBytes))...),
	}
}

// Token is the agent token, for a caller that speaks to the agent over a
// connection of its own (the port tunnel).
func (c *Client) Token() string { return c.token }

// Close closes idle connections. Streams in flight are not affected.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Process is the generated process.Process client, token included. Set
// the user with [SetUser] on each request's header.
func (c *Client) Process() processconnect.ProcessClient { return c.proc }

// Filesystem is the generated filesystem.Filesystem client, token
// included. Set the user with [SetUser] on each request's header.
func (c *Client) Filesystem() filesystemconnect.FilesystemClient { return c.fs }

// SetUser makes a request act as user (envd's Basic scheme with an empty
// password). An empty user leaves h alone: the agent's default, root.
func SetUser(h http.Header, user string) {
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// Health returns nil when the agent answers GET /health with 204.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent health: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return httpError(resp)
	}
	return nil
}

// Configuration is what the daemon hands an agent once it runs
// (server.Configuration, the same JSON).
type Configuration struct {
	// Env replaces the variables every process the agent starts from now
	// on gets after the agent's own environment: the sandbox's secret env
	// (and, for a sandbox claimed from the pool, all of its env).
	Env map[string]string `json:"env"`
	// NewToken, when set, replaces the agent token from the agent's next
	// request on: this client's token then stops working.
	NewToken string `json:"token,omitempty"`
}

// Configure hands the agent cfg.
func (c *Client) Configure(ctx context.Context, cfg Configuration) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, baseURL+pathConfig, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("agent configuration: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return httpError(resp)
	}
	return nil
}

// pathConfig is the agent's route for Configure (server.PathConfig);
// daemonPaths is the prefix of the routes only the daemon calls, and
// daemonHeaders that of the headers only the daemon sends (kept output and
// replay).
const (
	pathConfig    = "/sandboxd/config"
	daemonPaths   = "/sandboxd/"
	daemonHeaders = "X-Sandboxd-"
)

// Check makes one authenticated call that changes nothing (a process
// list): nil when the agent answers and accepts this client's token.
func (c *Client) Check(ctx context.Context) error {
	_, err := c.proc.List(ctx, connect.NewRequest(&rpc.ListRequest{}))
	return err
}

// Transport is the client's round tripper: it reaches this agent whatever
// the request's host, and adds the agent token. A facade that forwards
// envd requests unchanged proxies through it (any X-Access-Token the caller
// sent is replaced); the daemon's own routes (Configure's) answer 404 through
// it without reaching the agent, so no caller of a facade can replace a
// sandbox's secret env, and the daemon's own headers (X-Sandboxd-*, in any
// case) are dropped, so none can make a process keep output. Reply headers are bounded; bodies are streams the
// proxy copies through, so they are not.
func (c *Client) Transport() http.RoundTripper { return forwardTransport{c.hc.Transport} }

// forwardTransport is Transport: the agent's routes but the daemon's.
type forwardTransport struct{ base http.RoundTripper }

func (t forwardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if p := path.Clean("/" + r.URL.Path); strings.HasPrefix(p+"/", daemonPaths) {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		const body = "404 page not found\n"
		return &http.Response{
			StatusCode: http.StatusNotFound, Status: "404 Not Found",
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:  http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body:    io.NopCloser(strings.NewReader(body)),
			Request: r, ContentLength: int64(len(body)),
		}, nil
	}
	// Header names are matched without case: a caller that fills the map
	// itself may leave a name uncanonical, and the agent reads any case.
	for k := range r.Header {
		if daemonHeader(k) {
			r = r.Clone(r.Context())
			for k := range r.Header {
				if daemonHeader(k) {
					delete(r.Header, k)
				}
			}
			break
		}
	}
	return t.base.RoundTrip(r)
}

// daemonHeader reports whether header name k is one of the daemon's
// (daemonHeaders, in any case).
func daemonHeader(k string) bool {
	return len(k) >= len(daemonHeaders) && strings.EqualFold(k[:len(daemonHeaders)], daemonHeaders)
}

// BaseURL is the URL prefix requests through Transport use.
const BaseURL = baseURL

// tokenTransport adds the agent token to every request.
type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (t *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(HeaderToken, t.token)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections closes the base's idle connections: without it
// http.Client.CloseIdleConnections, and so Close, would do nothing.
func (t *tokenTransport) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// HTTPError is a non-success answer of the agent's plain-HTTP endpoints.
// errors.Is(err, fs.ErrNotExist) holds for a 404.
type HTTPError struct {
	StatusCode int
	Message    string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("agent: HTTP %d: %s", e.StatusCode, e.Message)
}

// Is reports a 404 as fs.ErrNotExist.
func (e *HTTPError) Is(target error) bool {
	return e.StatusCode == http.StatusNotFound && target == fs.ErrNotExist
}

func httpError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10)) // the rest is dropped with the connection
	return &HTTPError{StatusCode: resp.StatusCode, Message: strings.TrimSpace(string(b))}
}
