package ingress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/ingress"
)

func dialHostPort(t *testing.T, hostPort int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCP_EchoThroughHostPort(t *testing.T) {
	e := newEnv(t)
	port := echoUpstream(t)
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.TCP})
	hostPort := freePort(t)
	ctx := t.Context()
	if err := e.r.ListenTCP(ctx, hostPort, sbA, port); err != nil {
		t.Fatal(err)
	}
	if err := e.r.ListenTCP(ctx, hostPort, sbA, port); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := e.r.ListenTCP(ctx, hostPort, sbA, port+1); !errors.Is(err, ingress.ErrHostPortConflict) {
		t.Fatalf("other target on the same host port: got %v, want ErrHostPortConflict", err)
	}
	if err := e.r.ListenTCP(ctx, freePort(t), sbA, port+1); !errors.Is(err, ingress.ErrNotExposed) {
		t.Fatalf("unexposed port: got %v, want ErrNotExposed", err)
	}

	const want = "hello over tcp, half-closed\n"
	if got := roundTrip(t, dialHostPort(t, hostPort), want); got != want {
		t.Fatalf("echo %q, want %q", got, want)
	}

	if err := e.r.CloseTCP(hostPort); err != nil {
		t.Fatal(err)
	}
	if err := e.r.CloseTCP(hostPort); err != nil {
		t.Fatalf("CloseTCP again: %v", err)
	}
	wantFree(t, hostPort)
}

func TestTCP_ForeignListenerIsHostPortInUse(t *testing.T) {
	e := newEnv(t)
	port := echoUpstream(t)
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.TCP})
	foreign, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	held := foreign.Addr().(*net.TCPAddr).Port

	err = e.r.ListenTCP(t.Context(), held, sbA, port)
	if !errors.Is(err, ingress.ErrHostPortInUse) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("got %v, want ErrHostPortInUse and EADDRINUSE", err)
	}
	// The caller walks on: the next candidate works.
	if err := e.r.ListenTCP(t.Context(), freePort(t), sbA, port); err != nil {
		t.Fatal(err)
	}
}

func TestUnexposePort_ClosesListenerAndLiveConnections(t *testing.T) {
	e := newEnv(t)
	port := echoUpstream(t)
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.TCP})
	hostPort := freePort(t)
	if err := e.r.ListenTCP(t.Context(), hostPort, sbA, port); err != nil {
		t.Fatal(err)
	}
	c := dialHostPort(t, hostPort)
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}

	if err := e.r.UnexposePort(t.Context(), sbA, port); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("live connection survived UnexposePort")
	}
	wantFree(t, hostPort)
	if err := e.r.UnexposePort(t.Context(), sbA, port); err != nil {
		t.Fatalf("again: %v", err)
	}
}

func TestRemove_URLAnswers404AndHostPortIsFree(t *testing.T) {
	e := newEnv(t)
	httpPort := httpUpstream(t, http.HandlerFunc(headerEcho))
	tcpPort := echoUpstream(t)
	e.expose(t, sbA, ingress.Port{Number: httpPort, Protocol: ingress.HTTP, Public: true})
	if err := e.r.ExposePort(t.Context(), sbA, ingress.Port{Number: tcpPort, Protocol: ingress.TCP}); err != nil {
		t.Fatal(err)
	}
	if err := e.r.BindDomain(t.Context(), "gone.example.com", sbA, httpPort); err != nil {
		t.Fatal(err)
	}
	hostPort := freePort(t)
	if err := e.r.ListenTCP(t.Context(), hostPort, sbA, tcpPort); err != nil {
		t.Fatal(err)
	}
	url := e.url(sbA, httpPort, "/")
	if code, _ := e.get(t, url, nil); code != http.StatusOK {
		t.Fatalf("before Remove: status %d", code)
	}

	for range 2 { // idempotent
		if err := e.r.Remove(t.Context(), sbA); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := e.get(t, url, nil); code != http.StatusNotFound {
		t.Fatalf("after Remove: status %d, want 404", code)
	}
	if _, body := e.get(t, "http://gone.example.com/", nil); body != "api" {
		t.Fatalf("custom domain after Remove: %q, want the API", body)
	}
	wantFree(t, hostPort)
	if err := e.r.ExposePort(t.Context(), sbA, ingress.Port{Number: httpPort, Protocol: ingress.HTTP}); !errors.Is(err, ingress.ErrNotInstalled) {
		t.Fatalf("expose after Remove: got %v, want ErrNotInstalled", err)
	}
}

// wantFree binds hostPort itself to prove nobody holds it.
func wantFree(t *testing.T, hostPort int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)))
	if err != nil {
		t.Fatalf("host port %d is not free: %v", hostPort, err)
	}
	ln.Close()
}

// tlsEchoUpstream is a TLS server inside "the sandbox" with certificates
// from ca for whatever server name it is asked; it echoes until EOF.
func tlsEchoUpstream(t *testing.T, ca *ingress.LocalCA) int {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ca.TLSConfig(func(string) bool { return true }))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestTLS_SNIPassthrough(t *testing.T) {
	e := newEnv(t, func(o *ingress.Options) { o.TLSAddr = "127.0.0.1:0" })
	ca, err := ingress.NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	port := tlsEchoUpstream(t, ca)
	host := e.r.PreviewHost(sbA, port)

	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.TLS})
	sni := e.r.TLSAddr().String()

	c, err := tls.Dial("tcp", sni, &tls.Config{ServerName: host, RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The router holds no certificate: the one the client verified is the
	// sandbox's, so TLS went through untouched.
	if got := c.ConnectionState().PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != host {
		t.Fatalf("peer certificate for %v, want %s", got, host)
	}
	const want = "hello over tls\n"
	if got := roundTrip(t, c, want); got != want {
		t.Fatalf("echo %q, want %q", got, want)
	}

	e.expose(t, sbB, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	for name, server := range map[string]string{
		"unknown sandbox":   e.r.PreviewHost("sb-00000000000000aa", port),
		"port exposed http": e.r.PreviewHost(sbB, port),
		"unbound hostname":  "app.example.com",
		"no sni":            "",
	} {
		cfg := &tls.Config{ServerName: server, RootCAs: ca.Pool(), InsecureSkipVerify: server == ""}
		c, err := tls.Dial("tcp", sni, cfg)
		if err == nil {
			c.Close()
			t.Errorf("%s: handshake succeeded, want the connection closed", name)
		}
	}
}

func TestL4Latch_FailedBootstrapIsRetriedThenFastPath(t *testing.T) {
	e := newEnv(t, func(o *ingress.Options) { o.TLSAddr = "127.0.0.1:0" })
	var calls atomic.Int64
	ingress.SetL4Bootstrap(e.r, func(ctx context.Context, start func(context.Context) error) error {
		if calls.Add(1) == 1 {
			return errors.New("injected bootstrap failure")
		}
		return start(ctx)
	})
	e.expose(t, sbA, ingress.Port{Number: 80, Protocol: ingress.HTTP})
	tlsPort := ingress.Port{Number: 443, Protocol: ingress.TLS}
	ctx := t.Context()

	if err := e.r.ExposePort(ctx, sbA, tlsPort); !errors.Is(err, ingress.ErrL4Unavailable) {
		t.Fatalf("first call: got %v, want ErrL4Unavailable", err)
	}
	if got := e.r.Ports(sbA); len(got) != 1 {
		t.Fatalf("a failed exposure changed the table: %v", got)
	}
	if err := e.r.ExposePort(ctx, sbA, tlsPort); err != nil {
		t.Fatalf("second call: %v", err)
	}
	if e.r.TLSAddr() == nil {
		t.Fatal("SNI listener not started")
	}
	slow := ingress.L4SlowPathEntries(e.r)
	for range 1000 {
		if err := e.r.ExposePort(ctx, sbA, tlsPort); err != nil {
			t.Fatal(err)
		}
	}
	if got := ingress.L4SlowPathEntries(e.r) - slow; got != 0 {
		t.Fatalf("%d of 1000 calls took the slow path, want 0", got)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("bootstrap ran %d times, want 2", got)
	}
}

func TestL4Latch_ConcurrentFirstCallsBootstrapOnce(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	ingress.SetL4Bootstrap(e.r, func(ctx context.Context, start func(context.Context) error) error {
		calls.Add(1)
		time.Sleep(10 * time.Millisecond) // widen the race
		return start(ctx)
	})
	port := echoUpstream(t)
	if err := e.r.Install(t.Context(), sbA); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			errs <- e.r.ExposePort(t.Context(), sbA, ingress.Port{Number: port, Protocol: ingress.TCP})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("bootstrap ran %d times, want exactly 1", got)
	}
}
