// Package tunnel carries TCP connections from the daemon to a port inside a
// sandbox through the agent's socket, so sandboxes need no network path
// from the host and the agent stays the one gate to them.
//
// The daemon sends an HTTP/1.1 CONNECT for "127.0.0.1:<port>" over the
// agent socket (with the agent token, like every request); the agent dials
// the port inside the sandbox, answers 200, and from then on both sides
// copy bytes. Everything above TCP — HTTP, WebSocket upgrades, TLS
// passthrough — rides on the raw connection unchanged.
package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ErrRefused is a port inside the sandbox that nobody listens on.
var ErrRefused = errors.New("tunnel: connection refused inside the sandbox")

// ErrAnswerTooLarge is a CONNECT answer whose headers exceed the bound: not
// the agent's.
var ErrAnswerTooLarge = errors.New("tunnel: CONNECT answer too large")

// dialTimeout bounds the agent's dial of the in-sandbox port.
const dialTimeout = 5 * time.Second

// What Dial reads of the agent's answer is bounded: whatever answers on
// the agent socket may be hostile (the sandbox may have replaced the
// agent), and an answer whose headers never end would otherwise grow the
// daemon's memory without limit.
const (
	// maxAnswerBytes bounds the CONNECT answer's status line and headers;
	// the agent's are under 200 bytes.
	maxAnswerBytes = 16 << 10
	// handshakeTimeout bounds sending CONNECT and reading the answer when
	// the caller's context sets no sooner deadline; the agent answers
	// within its own dialTimeout.
	handshakeTimeout = 2 * dialTimeout
)

// Handler serves CONNECT requests for loopback ports of this sandbox. Any
// other target host is refused: the tunnel reaches the sandbox's own
// ports, never the network beyond it.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		host, portStr, err := net.SplitHostPort(r.Host)
		port, perr := strconv.Atoi(portStr)
		if err != nil || perr != nil || port < 1 || port > 65535 || (host != "127.0.0.1" && host != "localhost") {
			http.Error(w, "target must be 127.0.0.1:<port>", http.StatusBadRequest)
			return
		}
		var d net.Dialer
		ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
		upstream, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", portStr))
		cancel()
		if err != nil {
			http.Error(w, "dial "+portStr+": "+err.Error(), http.StatusBadGateway)
			return
		}
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		if err := rc.Flush(); err != nil {
			upstream.Close()
			return
		}
		conn, brw, err := rc.Hijack()
		if err != nil {
			upstream.Close()
			return
		}
		// Bytes the client sent right behind its request are in brw.
		var client io.Reader = conn
		if n := brw.Reader.Buffered(); n > 0 {
			buffered, _ := brw.Reader.Peek(n)
			client = io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), conn)
		}
		splice(conn, client, upstream)
	})
}

// Dial opens a tunnel to port inside the sandbox over conn, a fresh
// connection to the agent socket, authenticating with token. On success
// the returned connection carries the raw TCP stream; on failure conn is
// closed. A port nobody listens on is ErrRefused.
func Dial(ctx context.Context, conn net.Conn, token string, port int) (net.Conn, error) {
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	// A cancelled context ends the handshake too.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nX-Access-Token: " + token + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tunnel: send CONNECT: %w", err)
	}
	// The answer is read through a limit that is lifted once it is parsed:
	// from then on the bytes are the sandbox port's stream.
	lr := &io.LimitedReader{R: conn, N: maxAnswerBytes}
	br := bufio.NewReader(lr)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		if lr.N <= 0 {
			err = fmt.Errorf("%w (more than %d bytes)", ErrAnswerTooLarge, maxAnswerBytes)
		}
		return nil, fmt.Errorf("tunnel: read CONNECT answer: %w", err)
	}
	lr.N = math.MaxInt64
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		conn.Close()
		if resp.StatusCode == http.StatusBadGateway {
			return nil, fmt.Errorf("%w: port %d: %s", ErrRefused, port, body)
		}
		return nil, fmt.Errorf("tunnel: CONNECT %s: %s: %s", target, resp.Status, body)
	}
	if !stop() { // the context ended: its deadline may already be set
		conn.Close()
		return nil, fmt.Errorf("tunnel: CONNECT %s: %w", target, ctx.Err())
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads first what the response reader buffered past the
// CONNECT answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the underlying connection when it can, so a
// client's EOF reaches the sandbox port.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Splice copies both ways between a and b until both directions end,
// half-closing each side's write when the other reaches EOF, then closes
// both.
func Splice(a, b net.Conn) { splice(a, a, b) }

func splice(a net.Conn, aReader io.Reader, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(b, aReader)
		closeWrite(b)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(a, b)
		closeWrite(a)
	}()
	wg.Wait()
	a.Close()
	b.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
