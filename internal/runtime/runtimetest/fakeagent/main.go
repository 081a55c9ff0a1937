// Command fakeagent is a hostile stand-in for the sandbox agent, for tests
// only: it runs inside a real sandbox, as any code there could, listens on
// a unix socket and answers every request the way an attacker would, to
// prove that the daemon's side bounds what it reads.
//
//	fakeagent -listen PATH -mode MODE
//
// Modes:
//
//	health           answers GET /health with 204 like the real agent and
//	                 everything else with 404: an impostor that looks ready
//	gzip-bomb        a 200 whose body is ~1 MiB of gzip inflating to 1 GiB,
//	                 framed for whatever the request was (Connect stream
//	                 envelope, Connect unary, plain HTTP)
//	endless-body     a 200 with a body that never ends (a stream envelope
//	                 announcing 4 GiB; a chunked unary body)
//	endless-headers  a status line, then header lines forever
//
// It uses the standard library only and is built static (CGO_ENABLED=0) so
// that it runs in any image.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
)

// bombMember inflates to 16 MiB; bombRepeat copies of it make one
// multi-member gzip stream (which gzip readers decode as one) of 1 GiB.
const (
	bombMember = 16 << 20
	bombRepeat = 64
)

func main() {
	listen := flag.String("listen", "", "unix socket to listen on")
	mode := flag.String("mode", "health", "how to answer (see the package doc)")
	flag.Parse()
	answer, ok := modes()[*mode]
	if !ok || *listen == "" {
		log.Fatalf("usage: fakeagent -listen PATH -mode {health,gzip-bomb,endless-body,endless-headers}")
	}
	_ = os.Remove(*listen)
	ln, err := net.Listen("unix", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening") // the test waits for this line
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(conn, answer)
	}
}

// serve answers every request on conn until the client goes away.
func serve(conn net.Conn, answer func(w *bufio.Writer, req *http.Request)) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	bw := bufio.NewWriterSize(conn, 64<<10)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		answer(bw, req)
		if bw.Flush() != nil {
			return
		}
	}
}

func modes() map[string]func(*bufio.Writer, *http.Request) {
	return map[string]func(*bufio.Writer, *http.Request){
		"health":          health,
		"gzip-bomb":       gzipBomb(),
		"endless-body":    endlessBody,
		"endless-headers": endlessHeaders,
	}
}

func health(w *bufio.Writer, req *http.Request) {
	if req.URL.Path == "/health" {
		fmt.Fprint(w, "HTTP/1.1 204 No Content\r\n\r\n")
		return
	}
	fmt.Fprint(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
}

// isStream reports a Connect streaming request (Process.Start, Connect,
// WatchDir): its messages are framed in 5-byte envelopes.
func isStream(req *http.Request) bool {
	return strings.HasPrefix(req.Header.Get("Content-Type"), "application/connect+")
}

func gzipBomb() func(*bufio.Writer, *http.Request) {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	_, _ = zw.Write(make([]byte, bombMember))
	_ = zw.Close()
	bomb := bytes.Repeat(member.Bytes(), bombRepeat)
	return func(w *bufio.Writer, req *http.Request) {
		if isStream(req) {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnect-Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", contentType(req), 5+len(bomb))
			writeEnvelope(w, 1, uint32(len(bomb)))
		} else {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", contentType(req), len(bomb))
		}
		_, _ = w.Write(bomb)
	}
}

// contentType is the type the client asked in, so that it reads on into
// the body (a Connect client rejects any other); plain HTTP gets JSON.
func contentType(req *http.Request) string {
	if ct := req.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/") && ct != "application/octet-stream" {
		return ct
	}
	return "application/json"
}

func writeEnvelope(w io.Writer, flags byte, size uint32) {
	var prefix [5]byte
	prefix[0] = flags
	binary.BigEndian.PutUint32(prefix[1:], size)
	_, _ = w.Write(prefix[:])
}

// endlessBody never returns while the client reads.
func endlessBody(w *bufio.Writer, req *http.Request) {
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	if isStream(req) {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n\r\n", contentType(req))
		writeEnvelope(w, 0, 0xffffffff)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n", contentType(req))
	for {
		if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
			return
		}
	}
}

// endlessHeaders never ends the header block.
func endlessHeaders(w *bufio.Writer, _ *http.Request) {
	fmt.Fprint(w, "HTTP/1.1 200 OK\r\n")
	line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
	for {
		if _, err := w.WriteString(line); err != nil {
			return
		}
	}
}
