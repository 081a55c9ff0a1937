package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// Whatever answers on an agent socket may be hostile: code in the sandbox
// may have replaced the agent, or taken it over. So everything the client
// reads is bounded, in size and in time, and a reply that breaks a bound
// fails its own call without touching the daemon's other calls. These are
// the bounds.
const (
	// MaxMessageBytes bounds one Connect message from the agent. The
	// largest the real agent sends are output chunks (32 KiB) and ListDir
	// answers (~200 bytes an entry: some 20,000 entries fit). Reading one
	// costs up to ~3.5 times this in buffers, per call in flight.
	MaxMessageBytes = 4 << 20
	// MaxHeaderBytes bounds a reply's status line and headers (the
	// agent's are a few hundred bytes; net/http would allow 10 MiB). The
	// proxies to sandboxes' own servers apply it to their replies too.
	MaxHeaderBytes = 64 << 10
	// maxReplyBytes bounds a plain-HTTP reply that carries no data (the
	// upload's answer, an error message).
	maxReplyBytes = 64 << 10
	// dialTimeout bounds connecting to the agent socket, a local
	// operation that takes microseconds when the agent is alive.
	dialTimeout = 10 * time.Second
	// responseHeaderTimeout bounds the wait for a reply's headers once the
	// request is sent. Streams answer at once (the start event); the
	// slowest honest reply is a unary filesystem call over a large tree.
	responseHeaderTimeout = time.Minute
)

// ErrReplyTooLarge is a reply from the agent that exceeds one of the
// client's bounds. Connect calls report it with code resource_exhausted.
var ErrReplyTooLarge = errors.New("agent: reply exceeds the client's size limit")

// connectOptions are the options of every generated client: a message
// size bound, and no compression, so that a few bytes on the wire can
// never inflate into gigabytes in the daemon (the agent never compresses).
func connectOptions() []connect.ClientOption {
	return []connect.ClientOption{
		connect.WithReadMaxBytes(MaxMessageBytes),
		connect.WithAcceptCompression("gzip", nil, nil),
	}
}

// newTransport is the HTTP transport to one agent: HTTP/1.1 over dial,
// with bounded headers and bounded waits.
func newTransport(dial DialFunc) *http.Transport {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			return dial(ctx)
		},
		MaxIdleConnsPerHost:    32,
		DisableCompression:     true,
		MaxResponseHeaderBytes: MaxHeaderBytes,
		ResponseHeaderTimeout:  responseHeaderTimeout,
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true) // the agent speaks HTTP/1.1 only
	return tr
}

// rpcTransport bounds the bodies of Connect replies. Connect's own
// ReadMaxBytes is not enough on its own: a message that announces more
// than the bound is read to its announced end (up to 4 GiB) and a unary
// body past the bound is read to EOF, which never comes, before the error
// is returned. Here the call fails at the first byte past the bound.
type rpcTransport struct{ base http.RoundTripper }

func (t rpcTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+") {
		resp.Body = &envelopeLimit{body: resp.Body, max: MaxMessageBytes}
	} else {
		resp.Body = &bodyLimit{body: resp.Body, left: MaxMessageBytes}
	}
	return resp, nil
}

func tooLarge() error { return connect.NewError(connect.CodeResourceExhausted, ErrReplyTooLarge) }

// bodyLimit fails a read past left bytes.
type bodyLimit struct {
	body io.ReadCloser
	left int64
}

func (b *bodyLimit) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Only EOF is fine at the bound; probe for it with one byte.
		var one [1]byte
		n, err := b.body.Read(one[:])
		if n > 0 || err == nil {
			return 0, tooLarge()
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *bodyLimit) Close() error { return b.body.Close() }

// envelopeLimit watches the framing of a Connect stream (a flags byte and
// a 4-byte big-endian length before every message) as it is read and
// fails at the first prefix that announces more than max bytes.
type envelopeLimit struct {
	body   io.ReadCloser
	max    int64
	prefix [5]byte
	seen   int   // bytes of the current prefix read so far
	left   int64 // bytes of the current message still to come
}

func (e *envelopeLimit) Read(p []byte) (int, error) {
	n, err := e.body.Read(p)
	if serr := e.scan(p[:n]); serr != nil {
		return 0, serr
	}
	return n, err
}

func (e *envelopeLimit) scan(b []byte) error {
	for len(b) > 0 {
		if e.left > 0 {
			k := min(int64(len(b)), e.left)
			e.left -= k
			b = b[k:]
			continue
		}
		k := copy(e.prefix[e.seen:], b)
		e.seen += k
		b = b[k:]
		if e.seen == len(e.prefix) {
			e.left, e.seen = int64(binary.BigEndian.Uint32(e.prefix[1:])), 0
			if e.left > e.max {
				return tooLarge()
			}
		}
	}
	return nil
}

func (e *envelopeLimit) Close() error { return e.body.Close() }
