package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httplimit"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestLimiter_CapHolds: with every slot taken the listener serves no
// further connection; one closing lets the next in.
func TestLimiter_CapHolds(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := httplimit.NewLimiter(2, nil)
	ln := lim.Wrap(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	testenv.WaitFor(t, "the third connection waits for a slot", func() error {
		if lim.Waits() != 1 {
			return fmt.Errorf("waits %d", lim.Waits())
		}
		return nil
	})
	if lim.Open() != 2 || len(accepted) != 0 {
		t.Fatalf("open %d, %d more accepted; want 2 and none past the cap", lim.Open(), len(accepted))
	}
	first.Close()
	third := <-accepted // served once a slot is free
	second.Close()
	third.Close()
	if lim.Open() != 0 {
		t.Errorf("open %d after every connection closed, want 0", lim.Open())
	}
}

// TestLimiter_CloseEndsAWaitingAccept: closing the listener ends an
// Accept that waits for a slot, so a server can shut down at the cap.
func TestLimiter_CloseEndsAWaitingAccept(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := httplimit.NewLimiter(1, nil)
	ln := lim.Wrap(raw)
	for range 2 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error)
	go func() { _, err := ln.Accept(); done <- err }()
	testenv.WaitFor(t, "the second Accept waits", func() error {
		if lim.Waits() != 1 {
			return fmt.Errorf("waits %d", lim.Waits())
		}
		return nil
	})
	ln.Close()
	if err := <-done; err == nil {
		t.Error("Accept after Close succeeded")
	}
}

// TestBound_DoesNotOutliveItsRequest: a bounded request sets deadlines on
// its kept-alive connection; the next request on it, answering after the
// bound passed (a stream, say), is not cut short.
func TestBound_DoesNotOutliveItsRequest(t *testing.T) {
	const bound = 100 * time.Millisecond
	var boundAt time.Time
	mux := http.NewServeMux()
	mux.Handle("/bounded", httplimit.Bound(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		boundAt = time.Now().Add(bound)
		io.WriteString(w, "ok")
	}), bound))
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "late")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func(path string) (*http.Response, error) {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if _, err := get("/bounded"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the bounded request's deadline passes", func() error {
		if time.Now().Before(boundAt) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	resp, err := get("/stream")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the next request on the connection: %v, %v; want 200", resp, err)
	}
}

// TestBound_SlowBodyIsCut: a client that sends headers and then trickles
// nothing of its body loses the connection at the bound.
func TestBound_SlowBodyIsCut(t *testing.T) {
	srv := httptest.NewServer(httplimit.Bound(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}), 200*time.Millisecond))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(testenv.Deadline))
	b, err := io.ReadAll(c) // until the server closes the connection
	if err != nil {
		t.Fatalf("read until the server closes: %v (got %q)", err, b)
	}
	if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Errorf("answer %q, want none or a 400", b)
	}
}
