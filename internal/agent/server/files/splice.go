package files

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"
)

// A raw upload of known length is read straight from the connection: the
// handler hijacks it and the body goes from the socket into the file with
// splice(2) (os.File.ReadFrom does it for a unix or TCP connection), never
// through the agent's memory. The agent runs inside the sandbox's CPU
// limit, and copying each byte into and out of user space twice was most
// of an upload's cost under it. The answer is then written by hand with
// Connection: close.

// spliceMin is the smallest body worth a hijack (and a new connection for
// the client's next request).
const spliceMin = 1 << 20

// canSplice reports whether r's body can be read from its connection: a
// raw, identity-encoded HTTP/1.x body of known length past spliceMin,
// without Expect, on a writer that can be hijacked.
func canSplice(w http.ResponseWriter, r *http.Request) bool {
	// Expect: 100-continue is answered by the server's body reader, which
	// a hijack bypasses: such a client would wait for its timeout.
	if r.ProtoMajor != 1 || r.ContentLength < spliceMin || len(r.TransferEncoding) > 0 || r.Header.Get("Expect") != "" {
		return false
	}
	switch r.Header.Get("Content-Encoding") {
	case "", "identity":
	default:
		return false
	}
	_, ok := w.(http.Hijacker)
	return ok
}

// connBody is a request body read from a hijacked connection: first what
// the server had buffered, then the connection itself, Content-Length
// bytes in all.
type connBody struct {
	buffered io.Reader // bufio's read-ahead, limited to the body
	conn     net.Conn
	left     int64 // bytes of the body still on conn
	n        int64 // bytes of the body read so far
	size     int64
}

func (b *connBody) Read(p []byte) (int, error) {
	n, err := b.buffered.Read(p)
	if err == io.EOF {
		if b.left <= 0 {
			return n, io.EOF
		}
		err = nil
		if n == 0 {
			n, err = b.conn.Read(p[:min(int64(len(p)), b.left)])
			b.left -= int64(n)
		}
	}
	b.n += int64(n)
	if err == io.EOF && b.n < b.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *connBody) Close() error { return nil }

// writeTo writes the whole body to f: the buffered part through buf, the
// rest spliced from the connection. Read failures are *bodyError; a
// short body is one too.
func (b *connBody) writeTo(f *os.File, buf []byte) error {
	n, err := io.CopyBuffer(onlyWriter{f}, b.buffered, buf)
	b.n += n
	if err != nil {
		return err // buffered is in memory: a write error
	}
	if b.left > 0 {
		m, err := f.ReadFrom(io.LimitReader(b.conn, b.left))
		b.left -= m
		b.n += m
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) {
				return err
			}
			return &bodyError{err}
		}
	}
	if b.n < b.size {
		return &bodyError{io.ErrUnexpectedEOF}
	}
	return nil
}

// hijackBody takes r's connection for its body. The returned response
// writer buffers the answer; send writes it to the connection and closes
// it.
func hijackBody(w http.ResponseWriter, r *http.Request) (*connResponse, error) {
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return nil, err
	}
	buffered := int64(brw.Reader.Buffered())
	if buffered > r.ContentLength { // a pipelined request behind the body: not ours to read
		buffered = r.ContentLength
	}
	body := &connBody{
		buffered: io.LimitReader(brw.Reader, buffered),
		conn:     conn,
		left:     r.ContentLength - buffered,
		size:     r.ContentLength,
	}
	r.Body = body
	return &connResponse{conn: conn, body: body, header: http.Header{}}, nil
}

// lingerUnread is how long an answer sent before the body's end waits
// before the connection is closed, as net/http's server waits: closing
// at once makes the client's next write fail (EPIPE) before it reads the
// answer, and it reports the broken pipe instead of, say, the 507.
const lingerUnread = 500 * time.Millisecond

// connResponse is an http.ResponseWriter that buffers a short answer for a
// hijacked connection.
type connResponse struct {
	conn   net.Conn
	body   *connBody // the request's
	header http.Header
	code   int
	out    bytes.Buffer
}

func (c *connResponse) Header() http.Header { return c.header }

func (c *connResponse) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *connResponse) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.out.Write(p)
}

// send writes the answer with Connection: close and closes the connection.
func (c *connResponse) send() {
	defer c.conn.Close()
	c.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(c.conn)
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(c.code) + " " + http.StatusText(c.code) + "\r\n")
	c.header.Set("Content-Length", strconv.Itoa(c.out.Len()))
	c.header.Set("Connection", "close")
	_ = c.header.Write(bw)
	bw.WriteString("\r\n")
	bw.Write(c.out.Bytes())
	if bw.Flush() != nil || c.body.n >= c.body.size {
		return
	}
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	// Linger by reading what the client still sends, for at most
	// lingerUnread: a client that closes ends the wait at once.
	if c.conn.SetReadDeadline(time.Now().Add(lingerUnread)) == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(c.conn, lingerMax))
	}
}

// lingerMax bounds what a linger reads (at 10 Gbit/s, half a second's worth).
const lingerMax = 1 << 30
