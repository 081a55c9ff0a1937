package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// Target is the node a request goes to.
type Target struct {
	Node string // the node's id
	URL  string // the node's API base URL, "http://10.0.0.2:7070"
}

// Locator is what the middleware needs of the cluster: its view of who
// serves what. It is called on the request path, so it should answer
// from memory (a watch-fed cache); it may read r's headers (to
// authenticate a name's owner) and must leave r.Body unread.
type Locator interface {
	// Locate says which node serves ref (Kind Sandbox or Host). For Kind
	// Host, ref.ID or ref.Name, when set, is what the request names should
	// ref.Host be bound to no sandbox (it is then an API host the operator
	// did not list). A Name is per owner: resolve it for the caller r
	// authenticates as. ok=false means serve locally: this node owns it,
	// it is unknown, or the cluster cannot say. A non-nil err means it
	// must not be served here either (say, its placement is moving): the
	// caller answers Options.OnError. A Host bound to a sandbox is
	// ok=true whoever has it (a Target naming this node when it is this
	// node's): only an unbound Host is the API's.
	Locate(ctx context.Context, r *http.Request, ref Ref) (t Target, ok bool, err error)
}

// Options configures Middleware.
type Options struct {
	// Self is this node's id; a Target naming it is served locally.
	// Default: Signer.Node.
	Self string
	// Signer signs forwarded requests and verifies incoming ones; its
	// Node is this node's id (Self), so a MAC naming this node is refused.
	Signer Signer
	// Locator finds owners and places creates. Nil: nothing is forwarded
	// (node headers are still verified or stripped).
	Locator Locator
	// Domain is the preview domain, APIHosts the daemon's own host
	// names (its reserved hosts) and Route what the API edges registered:
	// RefOf's arguments.
	Domain   string
	APIHosts []string
	Route    Route
	// Logger receives a warning per failed forward, a debug line per
	// forward. Default: discard.
	Logger *slog.Logger
	// Transport carries forwarded requests. Nil: NewTransport().
	Transport http.RoundTripper
	// OnError answers a request that cannot be forwarded: the Locator
	// failed, the target's URL is unusable, or the target did not answer.
	// It is not called when the caller has gone. Nil: 503
	// {"error":{"code":"unavailable","message":…,"retryable":true}}.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Arrived, when set, checks a request another node sent here (its
	// MAC verified) that names a sandbox (ref.Kind Sandbox), before it is
	// served: such a request is never located again, so what this node
	// knows and its sender did not (say, the sandbox is being taken over
	// here and has no row yet) is said here. A non-nil error answers
	// OnError.
	Arrived func(r *http.Request, ref Ref) error
}

// Dial and TLS handshake bounds for a node: an unreachable node fails
// fast instead of hanging the caller. There is no overall bound: exec
// streams, WebSockets and downloads last as long as the caller wants.
const (
	dialTimeout      = 5 * time.Second
	handshakeTimeout = 5 * time.Second
)

// NewTransport returns the transport Middleware uses when
// Options.Transport is nil: no environment proxy, a 5 s dial and TLS
// handshake timeout, a warm pool per node, bodies passed through
// uncompressed, response headers capped at 1 MiB. Pass your own to close
// its idle connections at shutdown.
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  nil, // node to node, never through an environment proxy
		DialContext:            d.DialContext,
		TLSHandshakeTimeout:    handshakeTimeout,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // pass bodies through as the owner sent them
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Middleware puts cluster forwarding in front of next (the daemon's
// edges). For each request it:
//
//  1. Verifies the node MAC (Signer.Verify). A request with a valid MAC
//     came from another node and goes to next untouched, headers and all,
//     marked as such (FromNode): it is never forwarded again (the loop
//     guard), so a node that does not own what it was sent answers from
//     its own view, and a create it carries is not placed again. Any
//     other request has every node header stripped before anything reads
//     it.
//  2. Asks RefOf what it names. Sandbox and Host go to Locator.Locate;
//     Create goes to next, its body kept as next reads it, so that the
//     edge that places it elsewhere can Forward it whole; None goes to
//     next.
//  3. Serves locally (next) when the Locator says so or names this node;
//     answers Options.OnError when the Locator fails; else reverse-proxies
//     the request to the target's URL (Forward).
func Middleware(next http.Handler, o Options) *Handler {
	if o.Self == "" {
		o.Self = o.Signer.Node
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	if o.OnError == nil {
		o.OnError = unavailable
	}
	m := &Handler{next: next, o: o, log: o.Logger}
	m.proxy = &httputil.ReverseProxy{
		Rewrite:       m.rewrite,
		Transport:     o.Transport,
		FlushInterval: -1, // flush every write: exec output, Connect streams, SSE
		ErrorHandler:  m.proxyError,
		ErrorLog:      slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return m
}

// Handler is the forwarding middleware (Middleware).
type Handler struct {
	next  http.Handler
	o     Options
	log   *slog.Logger
	proxy *httputil.ReverseProxy
}

// target is a resolved Target, carried to rewrite and proxyError in the
// request's context.
type target struct {
	Target
	url *url.URL
}

type targetKey struct{}

// nodeKey marks a request whose node MAC verified (FromNode).
type nodeKey struct{}

// FromNode reports whether r came from another node, whose MAC the
// middleware verified, and which: such a request is served where it
// lands, and a create it carries was placed by its sender.
func FromNode(r *http.Request) (node string, ok bool) {
	node, ok = r.Context().Value(nodeKey{}).(string)
	return node, ok
}

// RefOf is RefOf with the middleware's options.
func (m *Handler) RefOf(r *http.Request) Ref {
	return RefOf(r, m.o.Domain, m.o.APIHosts, m.o.Route)
}

func (m *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if node, ok := m.o.Signer.Verify(r); ok {
		// Loop guard: a node sent it here.
		r = r.WithContext(context.WithValue(r.Context(), nodeKey{}, node))
		if m.o.Arrived != nil {
			if ref := m.RefOf(r); ref.Kind == Sandbox {
				if err := m.o.Arrived(r, ref); err != nil {
					if r.Context().Err() == nil {
						m.o.OnError(w, r, fmt.Errorf("sent here by node %s: %w", node, err))
					}
					return
				}
			}
		}
		m.next.ServeHTTP(w, r)
		return
	}
	StripNodeHeaders(r.Header)
	ref := m.RefOf(r)
	var (
		t   Target
		ok  bool
		err error
	)
	if m.o.Locator != nil && (ref.Kind == Sandbox || ref.Kind == Host) {
		t, ok, err = m.o.Locator.Locate(r.Context(), r, ref)
	}
	if err == nil && (ref.Kind == Create || ref.Kind == Host && ref.PathKind == Create && !ok) {
		// Placed by the edge that decodes it (package internal/api/router),
		// which may then Forward it: keep its body as the edge reads it.
		// (A Host bound to a sandbox is its app's, whatever the path: the
		// Locator names its node, this one included, and nothing is kept.)
		r = keepBody(r)
	}
	if err != nil {
		if r.Context().Err() == nil {
			m.log.Warn("forward: locate", "kind", ref.Kind, "id", ref.ID, "name", ref.Name, "host", ref.Host, "err", err)
			m.o.OnError(w, r, fmt.Errorf("locate %s: %w", ref.Kind, err))
		}
		return
	}
	if !ok || t.Node == m.o.Self {
		m.next.ServeHTTP(w, r)
		return
	}
	m.log.Debug("forward", "kind", ref.Kind, "id", ref.ID, "name", ref.Name, "host", ref.Host, "node", t.Node, "method", r.Method, "path", r.URL.Path)
	m.forward(w, r, t)
}

// Forward serves r on node t, signed by this node (so t serves it where
// it lands and does not place it again): the way an edge sends a create
// it placed on another node. r's body goes whole, as the client sent it:
// what the edge already read of it (kept since the middleware saw r as a
// Create), then the rest. A target that cannot be reached, or whose URL
// is unusable, is Options.OnError. Call it at most once per request,
// before anything is written to w.
func (m *Handler) Forward(w http.ResponseWriter, r *http.Request, t Target) {
	if t.Node == m.o.Self {
		m.o.OnError(w, r, fmt.Errorf("forward to node %s: that is this node", t.Node))
		return
	}
	if b, ok := r.Context().Value(keptKey{}).(*keptBody); ok {
		body, err := b.rewound()
		if err != nil {
			m.o.OnError(w, r, fmt.Errorf("forward to node %s: %w", t.Node, err))
			return
		}
		r.Body = body
	} else if r.Body != nil && r.Body != http.NoBody {
		// Not a create as the edges registered it: what the edge read of
		// its body is gone.
		m.o.OnError(w, r, fmt.Errorf("forward to node %s: %s %s is no create the edges registered; its body was not kept", t.Node, r.Method, r.URL.Path))
		return
	}
	m.log.Debug("forward: placed", "node", t.Node, "method", r.Method, "path", r.URL.Path)
	m.forward(w, r, t)
}

// forward reverse-proxies r to t.
func (m *Handler) forward(w http.ResponseWriter, r *http.Request, t Target) {
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if err == nil {
			err = errors.New("not an http(s) base URL")
		}
		m.log.Warn("forward: bad node URL", "node", t.Node, "url", t.URL, "err", err)
		m.o.OnError(w, r, fmt.Errorf("node %s URL %q: %w", t.Node, t.URL, err))
		return
	}
	// Full duplex: without it an HTTP/1 server closes the request body as
	// soon as the response starts, and a stream that still sends (a
	// Connect stream, an upload answered early) breaks (golang/go#40747).
	_ = http.NewResponseController(w).EnableFullDuplex()
	m.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target{t, u})))
}

// keptBody is a create's body that keeps what is read of it, so that
// Forward can send it whole after the edge decoded it. What it keeps is
// what the edge read, which the edge bounds (its JSON limit, 1 MiB), and
// never more than maxKept: a body read beyond that (a custom domain's app
// behind a create's path, which a create's edge never decodes) is kept no
// more, and cannot be forwarded.
type keptBody struct {
	io.ReadCloser
	read     bytes.Buffer
	overflow bool
}

// maxKept bounds what a keptBody keeps: above every edge's JSON limit.
const maxKept = 4 << 20

func (b *keptBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.overflow:
	case b.read.Len()+n > maxKept:
		b.overflow = true
		b.read = bytes.Buffer{}
	default:
		b.read.Write(p[:n])
	}
	return n, err
}

// rewound is the whole body again: what was read, then the rest.
func (b *keptBody) rewound() (io.ReadCloser, error) {
	if b.overflow {
		return nil, fmt.Errorf("a create body of more than %d bytes cannot be forwarded", maxKept)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b.read.Bytes()), b.ReadCloser), b.ReadCloser}, nil
}

// keptKey holds a request's keptBody in its context, where Forward finds
// it whatever the edge wrapped around r.Body since.
type keptKey struct{}

// keepBody is r with its body a keptBody.
func keepBody(r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	b := &keptBody{ReadCloser: r.Body}
	r = r.WithContext(context.WithValue(r.Context(), keptKey{}, b))
	r.Body = b
	return r
}

// rewrite points the outgoing request at the target node, keeping the
// path and query (under the base URL's path, if it has one), the caller's
// Host and credentials, and signs it last, once its URL is final.
func (m *Handler) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.SetURL(t.url)
	pr.Out.Host = pr.In.Host
	// Keep the chain a load balancer in front of this node started
	// (ReverseProxy drops inbound X-Forwarded-* before Rewrite);
	// SetXForwarded appends the caller's address.
	if xff := pr.In.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
	}
	pr.SetXForwarded()
	StripNodeHeaders(pr.Out.Header)
	m.o.Signer.Sign(pr.Out)
}

func (m *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	t, _ := r.Context().Value(targetKey{}).(target)
	m.log.Warn("forward: node did not answer", "node", t.Node, "url", t.URL, "method", r.Method, "path", r.URL.Path, "err", err)
	if r.ContentLength != 0 {
		// The transport closed the body it did not send, and with full
		// duplex on the server does not drain it: it would close the
		// connection after this answer without saying so, and the
		// client's next request on it would fail. Say so.
		w.Header().Set("Connection", "close")
	}
	m.o.OnError(w, r, fmt.Errorf("forward to node %s: %w", t.Node, err))
}

// unavailable is the default OnError: 503 in the native API's error shape,
// retryable. err stays in the log: it names internal addresses.
func unavailable(w http.ResponseWriter, _ *http.Request, _ error) {
	type body struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{body{"unavailable", "the cluster node that serves this request cannot be reached; retry", true}})
}
