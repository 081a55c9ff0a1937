package v1_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The base image has python3; each test's servers are stdlib Python
// scripts started in the background inside the sandbox.
const baseSandbox = `{"image":"` + apitest.BaseImage + `"}`

// TestPorts_PreviewHTTP serves a directory with python3 -m http.server
// behind a private http exposure: no token is 401, a bearer token reaches
// it, a 50 MB file streams through intact, and an unexposed port or an
// unexposed-again port is 404.
func TestPorts_PreviewHTTP(t *testing.T) {
	t.Parallel()
	tok := token(t, "preview")
	sb := create(t, tok, baseSandbox)
	sum := sh(t, tok, sb.ID, "mkdir -p /srv && head -c 52428800 /dev/urandom > /srv/big.bin && sha256sum /srv/big.bin | cut -d' ' -f1")
	background(t, tok, sb.ID, "python3 -m http.server 8000 --bind 127.0.0.1 --directory /srv")

	p := expose(t, env.URL, tok, sb.ID, `{"port":8000,"protocol":"http"}`)
	want := exposed{Port: 8000, Protocol: "http", URL: previewURL(sb.ID, 8000)}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("expose answer (-want +got):\n%s", diff)
	}
	if again := expose(t, env.URL, tok, sb.ID, `{"port":8000,"protocol":"http"}`); again != p {
		t.Errorf("exposing again = %+v, want %+v", again, p)
	}
	list := decode[struct{ Items []exposed }](t, do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/ports", ""), http.StatusOK)
	if diff := cmp.Diff([]exposed{p}, list.Items); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}

	c := loopbackClient(t)
	waitReady(t, c, p.URL+"/", tok)
	if r := get(t, c, p.URL+"/", ""); r.status != http.StatusUnauthorized {
		t.Errorf("private port without a token: %v, want 401", r)
	}
	if r := get(t, c, p.URL+"/", "not-a-token"); r.status != http.StatusUnauthorized {
		t.Errorf("private port with a bad token: %v, want 401", r)
	}
	if r := get(t, c, p.URL+"/", tok); r.status != http.StatusOK || !bytes.Contains(r.body, []byte("big.bin")) {
		t.Errorf("private port with a token: %v, want 200 with the listing", r)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", p.URL+"/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download through the preview URL: status %d, %v", resp.StatusCode, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != 50<<20 || got != strings.TrimSpace(sum) {
		t.Errorf("downloaded %d bytes with sha256 %s, want %d with %s", n, got, 50<<20, sum)
	}

	// No route behind a preview host: the same 502 as for no sandbox
	// (internal/api/e2b's ServePort), telling no sandbox from another's.
	if r := get(t, c, previewURL(sb.ID, 8001)+"/", tok); r.status != http.StatusBadGateway {
		t.Errorf("unexposed port: %v, want 502", r)
	}
	for range 2 { // unexposing is safe to repeat
		if r := do(t, tok, "DELETE", "/v1/sandboxes/"+sb.ID+"/ports/8000", ""); r.status != http.StatusNoContent {
			t.Fatalf("unexpose: %v", r)
		}
	}
	if r := get(t, c, p.URL+"/", tok); r.status != http.StatusBadGateway {
		t.Errorf("after unexpose: %v, want 502", r)
	}
}

// wsEcho is a minimal RFC 6455 echo server in stdlib Python (the base
// image has no websockets module): it answers the handshake, then echoes
// every text and binary frame, answers ping with pong and echoes close.
const wsEcho = `
import base64, hashlib, socket, struct, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def recvn(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b
def frame(op, data):
    n = len(data)
    if n < 126:
        h = struct.pack("!BB", 0x80 | op, n)
    elif n < 65536:
        h = struct.pack("!BBH", 0x80 | op, 126, n)
    else:
        h = struct.pack("!BBQ", 0x80 | op, 127, n)
    return h + data
def serve(c):
    try:
        req = b""
        while b"\r\n\r\n" not in req:
            d = c.recv(4096)
            if not d:
                return
            req += d
        key = [l.split(b":", 1)[1].strip() for l in req.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            b0, b1 = recvn(c, 2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n, = struct.unpack("!H", recvn(c, 2))
            elif n == 127:
                n, = struct.unpack("!Q", recvn(c, 8))
            mask = recvn(c, 4) if b1 & 0x80 else b"\0\0\0\0"
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(recvn(c, n)))
            if op == 8:
                c.sendall(frame(8, data))
                return
            c.sendall(frame(10 if op == 9 else op, data))
    except EOFError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// TestPorts_WebSocket echoes text and binary messages (one of them past
// the 64 KiB length form) through a public preview URL: the upgrade is
// spliced through the ingress and the agent tunnel.
func TestPorts_WebSocket(t *testing.T) {
	t.Parallel()
	tok := token(t, "websocket")
	sb := create(t, tok, baseSandbox)
	upload(t, tok, sb.ID, "/opt/wsecho.py", []byte(wsEcho))
	background(t, tok, sb.ID, "python3 /opt/wsecho.py 8765")
	p := expose(t, env.URL, tok, sb.ID, `{"port":8765,"protocol":"http","public":true}`)
	if !p.Public {
		t.Errorf("expose answer %+v, want public", p)
	}

	c := loopbackClient(t)
	var conn *websocket.Conn
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		conn, _, err = websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(p.URL, "http"), &websocket.DialOptions{HTTPClient: c})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("websocket dial: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)

	big := make([]byte, 100<<10)
	rand.Read(big)
	for _, m := range []struct {
		typ  websocket.MessageType
		data []byte
	}{
		{websocket.MessageText, []byte("hello through the preview URL")},
		{websocket.MessageBinary, big},
		{websocket.MessageText, bytes.Repeat([]byte("x"), 300)},
	} {
		if err := conn.Write(t.Context(), m.typ, m.data); err != nil {
			t.Fatal(err)
		}
		typ, got, err := conn.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if typ != m.typ || !bytes.Equal(got, m.data) {
			t.Errorf("echo of a %v message of %d bytes: got a %v of %d bytes", m.typ, len(m.data), typ, len(got))
		}
	}
	if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Errorf("close: %v", err)
	}
}

// tcpEcho echoes every connection's bytes until the client half-closes.
const tcpEcho = `
import socket, sys, threading
def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
`

// TestPorts_TCPAndDestroy exposes a TCP echo server on a host port from
// the pool and an http server on its preview URL; after the sandbox is
// destroyed the URL answers 404 and the host port can be bound again.
func TestPorts_TCPAndDestroy(t *testing.T) {
	t.Parallel()
	tok := token(t, "tcp")
	sb := create(t, tok, baseSandbox)
	upload(t, tok, sb.ID, "/opt/tcpecho.py", []byte(tcpEcho))
	background(t, tok, sb.ID, "python3 /opt/tcpecho.py 9000")
	background(t, tok, sb.ID, "python3 -m http.server 8000 --bind 127.0.0.1 --directory /")

	p := expose(t, env.URL, tok, sb.ID, `{"port":9000,"protocol":"tcp","public":true}`)
	if p.HostPort < 40000 || p.HostPort > 40999 || p.URL != fmt.Sprintf("tcp://%s:%d", exposureHost, p.HostPort) || p.Protocol != "tcp" {
		t.Fatalf("expose answer %+v, want a host port of the pool 40000-40999 and its tcp:// URL", p)
	}
	if again := expose(t, env.URL, tok, sb.ID, `{"port":9000,"protocol":"tcp","public":true}`); again != p {
		t.Errorf("exposing again = %+v, want %+v", again, p)
	}
	wantError(t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":9000,"protocol":"http"}`), http.StatusConflict, "conflict")
	echoTCP(t, p.HostPort, 30*time.Second)

	web := expose(t, env.URL, tok, sb.ID, `{"port":8000,"public":true}`)
	if web.Protocol != "http" {
		t.Errorf("protocol defaults to %q, want http", web.Protocol)
	}
	c := loopbackClient(t)
	waitReady(t, c, web.URL+"/", "")

	destroy(t, sb.ID)
	// A preview host with no sandbox behind it is a gateway without an
	// upstream: 502, in the body E2B's edge gives (internal/api/e2b).
	if r := get(t, c, web.URL+"/", ""); r.status != http.StatusBadGateway {
		t.Errorf("preview URL after destroy: %v, want 502", r)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(exposureHost, strconv.Itoa(p.HostPort)))
	if err != nil {
		t.Fatalf("host port %d after destroy: %v", p.HostPort, err)
	}
	ln.Close()
	wantError(t, do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/ports", ""), http.StatusNotFound, "not_found")
}

// TestPorts_PrivateTCPAndTLSRefused: raw TCP on a host port and TLS
// passed through by SNI carry no token, so "private" could only be a lie
// (the review reached a public:false tcp port with curl and no token).
// Such an exposure, public false or absent, is 400 invalid_argument naming
// the public field, and nothing is reserved: no row, no route, no host
// port listening.
func TestPorts_PrivateTCPAndTLSRefused(t *testing.T) {
	t.Parallel()
	tok := token(t, "private-l4")
	sb := create(t, tok, `{"image":"`+apitest.BusyboxImage+`"}`)
	for _, body := range []string{
		`{"port":9000,"protocol":"tcp","public":false}`,
		`{"port":9000,"protocol":"tcp"}`,
		`{"port":8443,"protocol":"tls","public":false}`,
		`{"port":8443,"protocol":"tls"}`,
	} {
		r := do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/ports", body)
		wantError(t, r, http.StatusBadRequest, "invalid_argument")
		if e := decode[errorBody](t, r, http.StatusBadRequest); !strings.HasPrefix(e.Error.Message, "public: ") {
			t.Errorf("%s: message %q does not name the public field", body, e.Error.Message)
		}
	}
	list := decode[struct{ Items []exposed }](t, do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/ports", ""), http.StatusOK)
	if len(list.Items) != 0 {
		t.Errorf("ports after refused exposures: %+v, want none", list.Items)
	}
	if rows, err := env.Store.ListExposedPorts(t.Context(), sb.ID); err != nil || len(rows) != 0 {
		t.Errorf("rows after refused exposures: %+v, %v; want none", rows, err)
	}
	if ps := env.Service.Router.(*ingress.Router).Ports(sb.ID); len(ps) != 0 {
		t.Errorf("routes after refused exposures: %+v, want none", ps)
	}
}

// TestPorts_PreviewHostIsTheAppsWhateverThePath: on the API's one
// listener a preview host (<port>-<id>.localhost) and a custom domain are
// the sandbox app's for every path. The E2B facade used to answer its
// "missing API key" to http://8080-<id>.localhost:<api port>/sandboxes,
// and the Daytona one took /daytona/api; now the app answers them all,
// whatever E2B header the client adds.
func TestPorts_PreviewHostIsTheAppsWhateverThePath(t *testing.T) {
	t.Parallel()
	tok := token(t, "preview-paths")
	sb := create(t, tok, `{"image":"`+apitest.BusyboxImage+`"}`)
	paths := []string{"/sandboxes", "/v2/sandboxes", "/daytona/api/sandbox"}
	var script strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&script, "mkdir -p /www%s && echo app > /www%s/index.html && ", p, p)
	}
	sh(t, tok, sb.ID, script.String()+"httpd -p 8080 -h /www")
	p := expose(t, env.URL, tok, sb.ID, `{"port":8080,"public":true}`)
	host := "preview-paths-" + strings.TrimPrefix(sb.ID, "sb-") + ".example.test"
	// An admin's binding: verified at once (a user's would wait for DNS).
	decode[domain](t, do(t, needEnv(t).AdminToken, "POST", "/v1/sandboxes/"+sb.ID+"/domains", `{"hostname":"`+host+`","port":8080}`), http.StatusOK)

	c := loopbackClient(t)
	for _, base := range []string{p.URL, "http://" + host + ":" + listenPort()} {
		waitReady(t, c, base+"/sandboxes/", "")
		for _, path := range paths {
			for _, header := range [][]string{nil, {"E2b-Sandbox-Id", sb.ID}} {
				r := get(t, c, base+path+"/", "", header...)
				if r.status != http.StatusOK || string(r.body) != "app\n" {
					t.Errorf("GET %s%s/ (headers %q): %v, want the app's 200 app", base, path, header, r)
				}
			}
		}
	}
}

// tlsEcho terminates TLS with the certificate in /opt/tls and echoes a
// line per connection.
const tlsEcho = `
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/opt/tls/cert.pem", "/opt/tls/key.pem")
def serve(c):
    try:
        with ctx.wrap_socket(c, server_side=True) as t:
            t.sendall(b"echo: " + t.recv(4096))
    except Exception:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// TestPorts_TLS reaches a TLS server in the sandbox through the SNI
// listener: the daemon routes by server name without terminating TLS, so
// the client verifies the sandbox's own certificate.
func TestPorts_TLS(t *testing.T) {
	t.Parallel()
	tok := token(t, "tls")
	sb := create(t, tok, baseSandbox)
	host := fmt.Sprintf("8443-%s.localhost", sb.ID)
	certPEM, keyPEM, roots := selfSigned(t, host)
	upload(t, tok, sb.ID, "/opt/tls/cert.pem", certPEM)
	upload(t, tok, sb.ID, "/opt/tls/key.pem", keyPEM)
	upload(t, tok, sb.ID, "/opt/tlsecho.py", []byte(tlsEcho))
	background(t, tok, sb.ID, "python3 /opt/tlsecho.py 8443")

	p := expose(t, env.URL, tok, sb.ID, `{"port":8443,"protocol":"tls","public":true}`)
	if p.Protocol != "tls" || !strings.HasPrefix(p.URL, "tls://"+host) || p.HostPort != 0 {
		t.Errorf("expose answer %+v, want a tls://%s URL and no host port", p, host)
	}
	addr := env.Service.Router.(*ingress.Router).TLSAddr()
	if addr == nil {
		t.Fatal("the SNI listener is not running after a tls exposure")
	}
	var line string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		line, err = tlsRoundTrip(t, addr.String(), host, roots)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS through the SNI listener: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if line != "echo: ping\n" {
		t.Errorf("TLS echo = %q, want %q", line, "echo: ping\n")
	}
	if _, err := tlsRoundTrip(t, addr.String(), fmt.Sprintf("8444-%s.localhost", sb.ID), roots); err == nil {
		t.Error("a TLS connection to an unexposed port succeeded")
	}
}

// TestPorts_ConcurrentExpose races 64 exposes of one tcp port of one
// sandbox: every caller gets the same answer and one row holds one host
// port.
func TestPorts_ConcurrentExpose(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	const n = 64
	t.Cleanup(func() {
		if err := env.Service.UnexposePort(context.Background(), service.Caller{Admin: true}, id, 7000); err != nil {
			t.Error(err)
		}
	})
	got := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			got[i], err = send(t.Context(), env.URL, tok, "POST", "/v1/sandboxes/"+id+"/ports", `{"port":7000,"protocol":"tcp","public":true}`)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	first := decode[exposed](t, got[0], http.StatusOK)
	for i, r := range got[1:] {
		if e := decode[exposed](t, r, http.StatusOK); e != first {
			t.Errorf("caller %d got %+v, caller 0 %+v", i+1, e, first)
		}
	}
	eps, err := env.Store.ListExposedPorts(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	for _, ep := range eps {
		if ep.Port == 7000 {
			rows++
			if ep.HostPort != first.HostPort {
				t.Errorf("row host port %d, answers say %d", ep.HostPort, first.HostPort)
			}
		}
	}
	if rows != 1 {
		t.Errorf("%d rows for port 7000, want 1", rows)
	}
}

func TestPorts_BadInput(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	base := "/v1/sandboxes/" + id + "/ports"
	for _, body := range []string{
		``, `{}`, `{"port":0}`, `{"port":65536}`, `{"port":-1}`, `{"port":"80"}`,
		`{"port":80,"protocol":"udp"}`, `{"port":80,"host_port":40000}`, `{"port":80}{}`,
	} {
		wantError(t, do(t, tok, "POST", base, body), http.StatusBadRequest, "invalid_argument")
	}
	for _, port := range []string{"x", "0", "65536", "-1", "+80", "080"} {
		wantError(t, do(t, tok, "DELETE", base+"/"+port, ""), http.StatusBadRequest, "invalid_argument")
	}
	if r := do(t, tok, "DELETE", base+"/6553", ""); r.status != http.StatusNoContent {
		t.Errorf("unexpose of a port never exposed: %v, want 204", r)
	}
	other := token(t, "someone-else")
	wantError(t, do(t, other, "POST", base, `{"port":80}`), http.StatusNotFound, "not_found")
	wantError(t, do(t, other, "GET", base, ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, other, "DELETE", base+"/80", ""), http.StatusNotFound, "not_found")
	wantError(t, do(t, "", "GET", base, ""), http.StatusUnauthorized, "unauthenticated")
}

// TestPorts_PoolExhausted has 16 sandboxes race for a pool of 8 host
// ports: 8 succeed on 8 distinct ports of the pool, the other 8 get
// capacity_exhausted with Retry-After.
func TestPorts_PoolExhausted(t *testing.T) {
	t.Parallel()
	lo := freeRange(t, 8)
	d := startDaemon(t, t.TempDir(), "127.0.0.1:0", fmt.Sprintf("%d-%d", lo, lo+7))
	tok := d.token(t, "pool")
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := send(t.Context(), d.url, tok, "POST", "/v1/sandboxes", `{"image":"`+apitest.BusyboxImage+`"}`)
			var sb sandbox
			if err == nil && r.status == http.StatusCreated {
				err = json.Unmarshal(r.body, &sb)
			}
			if err != nil || sb.ID == "" {
				t.Errorf("create: %v %v", r, err)
			}
			ids[i] = sb.ID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	got := make([]response, n)
	for i, id := range ids {
		wg.Go(func() {
			var err error
			got[i], err = send(t.Context(), d.url, tok, "POST", "/v1/sandboxes/"+id+"/ports", `{"port":5432,"protocol":"tcp","public":true}`)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[int]bool{}
	var exhausted int
	for _, r := range got {
		if r.status == http.StatusTooManyRequests {
			wantError(t, r, http.StatusTooManyRequests, "capacity_exhausted")
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("Retry-After = %q, want whole seconds", r.header.Get("Retry-After"))
			}
			exhausted++
			continue
		}
		e := decode[exposed](t, r, http.StatusOK)
		if e.HostPort < lo || e.HostPort > lo+7 || seen[e.HostPort] {
			t.Errorf("host port %d: outside %d-%d or given twice", e.HostPort, lo, lo+7)
		}
		seen[e.HostPort] = true
	}
	if len(seen) != 8 || exhausted != 8 {
		t.Errorf("%d exposed, %d exhausted; want 8 and 8", len(seen), exhausted)
	}
	all, err := d.Store.ListAllExposedPorts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 8 {
		t.Errorf("%d exposure rows, want 8", len(all))
	}
}

// TestPorts_ForeignHolder holds 3 of a pool of 4 host ports in the test
// process: wherever the walk starts, the expose skips them and takes the
// fourth.
func TestPorts_ForeignHolder(t *testing.T) {
	t.Parallel()
	lo := freeRange(t, 4)
	for p := lo; p < lo+3; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(exposureHost, strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	d := startDaemon(t, t.TempDir(), "127.0.0.1:0", fmt.Sprintf("%d-%d", lo, lo+3))
	tok := d.token(t, "foreign")
	r := d.do(t, tok, "POST", "/v1/sandboxes", `{"image":"`+apitest.BusyboxImage+`"}`)
	sb := decode[sandbox](t, r, http.StatusCreated)
	e := decode[exposed](t, d.do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":22,"protocol":"tcp","public":true}`), http.StatusOK)
	if e.HostPort != lo+3 {
		t.Errorf("host port %d, want %d (the only one no other process holds)", e.HostPort, lo+3)
	}
	rows, err := d.Store.ListExposedPorts(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].HostPort != lo+3 {
		t.Errorf("rows %+v, want one on host port %d (candidates that failed to bind are released)", rows, lo+3)
	}
}

// TestPorts_Restart exposes an http and a tcp port, closes the daemon and
// builds a new one on the same data directory and listen address: the
// same URL and the same host port answer again.
func TestPorts_Restart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lo := freeRange(t, 4)
	ports := fmt.Sprintf("%d-%d", lo, lo+3)
	d := startDaemon(t, dir, "127.0.0.1:0", ports)
	tok := d.token(t, "restart")
	sb := decode[sandbox](t, d.do(t, tok, "POST", "/v1/sandboxes", baseSandbox), http.StatusCreated)
	d.upload(t, tok, sb.ID, "/opt/tcpecho.py", []byte(tcpEcho))
	d.sh(t, tok, sb.ID, "nohup python3 /opt/tcpecho.py 9000 >/dev/null 2>&1 </dev/null &")
	d.sh(t, tok, sb.ID, "nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory / >/dev/null 2>&1 </dev/null &")
	web := decode[exposed](t, d.do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":8000,"public":true}`), http.StatusOK)
	raw := decode[exposed](t, d.do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"port":9000,"protocol":"tcp","public":true}`), http.StatusOK)
	c := loopbackClient(t)
	waitReady(t, c, web.URL+"/", "")
	echoTCP(t, raw.HostPort, 30*time.Second)

	addr := d.addr
	d.stop(t)
	if c, err := net.Dial("tcp", net.JoinHostPort(exposureHost, strconv.Itoa(raw.HostPort))); err == nil {
		c.Close()
		t.Fatal("the host port still answers with the daemon closed")
	}

	d = startDaemon(t, dir, addr, ports)
	if r := get(t, c, web.URL+"/", ""); r.status != http.StatusOK {
		t.Errorf("preview URL after restart: %v, want 200", r)
	}
	echoTCP(t, raw.HostPort, 10*time.Second)
	list := decode[struct{ Items []exposed }](t, d.do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/ports", ""), http.StatusOK)
	if diff := cmp.Diff([]exposed{web, raw}, list.Items); diff != "" {
		t.Errorf("ports after restart (-before +after):\n%s", diff)
	}
}

// exposed is the wire's exposure, as a client sees it.
type exposed struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Public   bool   `json:"public"`
	URL      string `json:"url"`
	HostPort int    `json:"host_port"`
}

// expose posts body to the ports route of sandbox id at the API base URL
// and decodes the 200 answer.
func expose(t *testing.T, base, tok, id, body string) exposed {
	t.Helper()
	return decode[exposed](t, doAt(t, base, tok, "POST", "/v1/sandboxes/"+id+"/ports", body), http.StatusOK)
}

// previewURL is the shared Env's preview URL of a sandbox port.
func previewURL(id string, port int) string {
	return fmt.Sprintf("http://%d-%s.localhost:%s", port, id, listenPort())
}

// listenPort is the port of the shared Env's listener, where preview
// hosts and custom domains are served too.
func listenPort() string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(env.URL, "http://"))
	return port
}

// sh runs command in the sandbox through the shared Env's API and returns
// its stdout; a non-zero exit fails the test.
func sh(t *testing.T, tok, id, command string) string {
	t.Helper()
	return shAt(t, env.URL, tok, id, command)
}

func shAt(t *testing.T, base, tok, id, command string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command, "timeout_s": 120})
	res := decode[struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}](t, doAt(t, base, tok, "POST", "/v1/sandboxes/"+id+"/exec", string(body)), http.StatusOK)
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d, stderr %s", command, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// background starts command in the sandbox, detached, and returns at once.
func background(t *testing.T, tok, id, command string) {
	t.Helper()
	sh(t, tok, id, "nohup "+command+" >/tmp/server.log 2>&1 </dev/null &")
}

// upload writes data to path in the sandbox.
func upload(t *testing.T, tok, id, path string, data []byte) {
	t.Helper()
	uploadAt(t, env.URL, tok, id, path, data)
}

func uploadAt(t *testing.T, base, tok, id, path string, data []byte) {
	t.Helper()
	if r := doAt(t, base, tok, "PUT", "/v1/sandboxes/"+id+"/files?path="+path, string(data)); r.status != http.StatusNoContent {
		t.Fatalf("upload %s: %v", path, r)
	}
}

// doAt is do against the API at base.
func doAt(t *testing.T, base, tok, method, path, body string) response {
	t.Helper()
	r, err := send(t.Context(), base, tok, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is doAt for goroutines other than the test's: it returns the error.
func send(ctx context.Context, base, tok, method, path, body string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// loopbackClient sends every request to 127.0.0.1 on the URL's port,
// whatever its host: preview URLs (<port>-<id>.localhost) and custom
// domains need no resolver. Its idle connections close with the test.
func loopbackClient(t *testing.T) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// get fetches url with c, with tok as the bearer token unless it is "".
func get(t *testing.T, c *http.Client, url, tok string, header ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// waitReady polls url until the server behind it answers 200: a server
// started in the background takes a moment to bind (the ingress answers
// 502 until then).
func waitReady(t *testing.T, c *http.Client, url, tok string, header ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := get(t, c, url, tok, header...)
		if r.status == http.StatusOK {
			return
		}
		if r.status != http.StatusBadGateway || time.Now().After(deadline) {
			t.Fatalf("GET %s: %v, want 200", url, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exposureHost is the address raw TCP exposures listen on: the daemons of
// these tests listen on 127.0.0.1, so --tcp-host defaults to 127.0.0.2,
// apart from the dashboard's address (config.DefaultTCPHost).
var exposureHost = config.DefaultTCPHost("127.0.0.1:0")

// echoTCP sends a line to exposureHost:hostPort and expects it back, retrying
// until wait has passed (the server may still be starting).
func echoTCP(t *testing.T, hostPort int, wait time.Duration) {
	t.Helper()
	addr := net.JoinHostPort(exposureHost, strconv.Itoa(hostPort))
	deadline := time.Now().Add(wait)
	for {
		got, err := tcpRoundTrip(addr, "ping over tcp\n")
		if err == nil && got == "ping over tcp\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo through host port %d: got %q, %v", hostPort, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tcpRoundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// tlsRoundTrip connects to the SNI listener at addr with server name
// host, verifying the chain against roots, sends "ping\n" and returns the
// line that comes back.
func tlsRoundTrip(t *testing.T, addr, host string, roots *x509.CertPool) (string, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// selfSigned makes a self-signed ECDSA certificate for host and returns
// it and its key in PEM, and a pool that trusts it.
func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), roots
}

// freeRange finds n consecutive loopback ports that are free right now,
// for a daemon's host-port pool.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		lo := 20000 + mrand.IntN(16000) // below the default pool (40000) and the ephemeral range
		free := true
		for p := lo; p < lo+n && free; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort(exposureHost, strconv.Itoa(p)))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return lo
		}
	}
	t.Fatalf("no %d consecutive free ports found", n)
	return 0
}

// ownDaemon is a daemon of the test's own, for what the shared Env cannot
// do: a small host-port pool, a restart on the same data directory. It
// assembles the stack with internal/daemon, as apitest does.
type ownDaemon struct {
	*daemon.Daemon
	url  string // http://127.0.0.1:port
	addr string // 127.0.0.1:port
	srv  *httptest.Server
}

// startDaemon builds and serves a daemon on dataDir listening on listen,
// with the host-port pool hostPorts ("lo-hi"). The test's cleanup
// destroys its sandboxes and closes it (unless stop did).
func startDaemon(t *testing.T, dataDir, listen, hostPorts string) *ownDaemon {
	t.Helper()
	needEnv(t)
	agent, err := runtimetest.BuildAgent(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("build agent: %v", err)
	}
	sum := sha256.Sum256([]byte(dataDir))
	node := "v1test-" + hex.EncodeToString(sum[:6])
	// Whatever happens to the daemon (a test may stop it and fail before
	// the restart), its containers go when the test ends.
	testenv.TrackNode(t, node)
	cfg, err := config.Parse([]string{
		"--engine", "docker", // its containers are what testenv.TrackNode removes
		"--data-dir", dataDir,
		"--listen", listen,
		"--node-id", node,
		"--agent-binary", agent,
		"--default-image", apitest.BaseImage,
		"--tls-listen", "127.0.0.1:0",
		"--pool", "none",
		"--host-ports", hostPorts,
		"--cpu-budget", "1000000", "--memory-budget", "1000000",
	}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := daemon.New(t.Context(), cfg, ln, slog.New(slog.DiscardHandler), daemon.Options{})
	if err != nil {
		ln.Close()
		t.Fatalf("daemon.New: %v", err)
	}
	d := &ownDaemon{Daemon: dm, addr: ln.Addr().String()}
	d.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: dm.Handler}}
	d.srv.Start()
	d.url = d.srv.URL
	t.Cleanup(func() {
		if d.srv == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sbs, _, err := d.Service.List(ctx, service.Caller{Admin: true}, service.ListFilter{Limit: 1000})
		if err != nil {
			t.Error(err)
		}
		for _, sb := range sbs {
			if err := d.Service.Destroy(ctx, service.Caller{Admin: true}, sb.ID); err != nil {
				t.Errorf("destroy %s: %v", sb.ID, err)
			}
		}
		d.stop(t)
	})
	return d
}

// stop closes the server and the daemon; sandboxes keep running.
func (d *ownDaemon) stop(t *testing.T) {
	t.Helper()
	d.srv.Close()
	d.srv = nil
	if err := d.Close(); err != nil {
		t.Errorf("close daemon: %v", err)
	}
}

func (d *ownDaemon) token(t *testing.T, owner string) string {
	t.Helper()
	b, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	r := d.do(t, strings.TrimSpace(string(b)), "POST", "/v1/tokens", `{"name":"test","role":"user","owner":"`+owner+`"}`)
	return decode[struct{ Token string }](t, r, http.StatusCreated).Token
}

func (d *ownDaemon) do(t *testing.T, tok, method, path, body string) response {
	t.Helper()
	return doAt(t, d.url, tok, method, path, body)
}

func (d *ownDaemon) sh(t *testing.T, tok, id, command string) string {
	t.Helper()
	return shAt(t, d.url, tok, id, command)
}

func (d *ownDaemon) upload(t *testing.T, tok, id, path string, data []byte) {
	t.Helper()
	uploadAt(t, d.url, tok, id, path, data)
}
