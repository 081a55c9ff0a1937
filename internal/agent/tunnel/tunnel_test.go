package tunnel_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
)

// agentSocket serves the tunnel handler on a unix socket, as the agent does.
func agentSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: tunnel.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

// echoServer answers every connection with what it reads, until EOF.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func dial(t *testing.T, sock string, port int) (net.Conn, error) {
	t.Helper()
	raw, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return tunnel.Dial(context.Background(), raw, "token", port)
}

func TestDial_EchoesBothWaysAndHalfCloses(t *testing.T) {
	sock, port := agentSocket(t), echoServer(t)
	conn, err := dial(t, sock, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	want := []byte("hello through the agent\n")
	if _, err := conn.Write(want); err != nil {
		t.Fatal(err)
	}
	// Half-close: the echo server sees EOF, answers everything, closes.
	conn.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestDial_RefusedPort(t *testing.T) {
	sock := agentSocket(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nobody listens there now
	_, err := dial(t, sock, port)
	if !errors.Is(err, tunnel.ErrRefused) {
		t.Fatalf("got %v, want ErrRefused", err)
	}
}

func TestHandler_RefusesOtherHosts(t *testing.T) {
	sock := agentSocket(t)
	raw, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	io.WriteString(raw, "CONNECT 10.0.0.1:"+strconv.Itoa(80)+" HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n")
	buf := make([]byte, 12)
	io.ReadFull(raw, buf)
	if string(buf) != "HTTP/1.1 400" {
		t.Fatalf("got %q, want a 400", buf)
	}
}
