package ingress_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/ingress"
)

// seen is what the upstream reports about the request it got.
type seen struct {
	Host, Path, Authorization, Token, Cookie string
	XFF, XFHost, XFProto                     string
}

func headerEcho(w http.ResponseWriter, r *http.Request) {
	json.NewEncoder(w).Encode(seen{
		Host: r.Host, Path: r.URL.RequestURI(),
		Authorization: r.Header.Get("Authorization"), Token: r.Header.Get("X-Sandboxd-Token"),
		Cookie: r.Header.Get("Cookie"),
		XFF:    r.Header.Get("X-Forwarded-For"), XFHost: r.Header.Get("X-Forwarded-Host"),
		XFProto: r.Header.Get("X-Forwarded-Proto"),
	})
}

func TestHTTP_PreviewHostReachesPublicPort(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})

	url := e.url(sbA, port, "/a/b?c=d")
	code, body := e.get(t, url, http.Header{"X-Forwarded-For": {"6.6.6.6"}})
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var got seen
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	host := e.r.PreviewHost(sbA, port) + ":" + portOf(e.addr)
	want := seen{Host: host, Path: "/a/b?c=d", XFF: "127.0.0.1", XFHost: host, XFProto: "http"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("upstream saw (-want +got):\n%s", diff)
	}
}

func TestHTTP_OtherHostsReachTheAPI(t *testing.T) {
	e := newEnv(t)
	for _, url := range []string{"http://" + e.addr + "/", "http://localhost:1/", "http://app.example.com/"} {
		if code, body := e.get(t, url, nil); code != http.StatusOK || body != "api" {
			t.Errorf("%s: got %d %q, want the API", url, code, body)
		}
	}
}

func TestHTTP_UnknownOrUnexposedIs404(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	e.expose(t, sbB, ingress.Port{Number: port, Protocol: ingress.TCP, Public: true})

	for name, url := range map[string]string{
		"unknown sandbox":  e.url("sb-00000000000000aa", port, "/"),
		"unexposed port":   e.url(sbA, port+1, "/"),
		"port exposed tcp": e.url(sbB, port, "/"),
	} {
		code, body := e.get(t, url, nil)
		if code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", name, code)
		}
		wantErrorBody(t, body, "not_found")
	}
}

func TestHTTP_PrivatePortNeedsAuthorization(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP})
	url := e.url(sbA, port, "/")

	code, body := e.get(t, url, http.Header{"Authorization": {"Bearer wrong"}})
	if code != http.StatusUnauthorized {
		t.Fatalf("without authorization: status %d, want 401", code)
	}
	wantErrorBody(t, body, "unauthenticated")

	code, body = e.get(t, url, http.Header{
		"Authorization":    {goodToken},
		"X-Sandboxd-Token": {"secret"},
		"Cookie":           {"theme=dark; sandboxd_token=secret; lang=en"},
	})
	if code != http.StatusOK {
		t.Fatalf("with authorization: status %d: %s", code, body)
	}
	var got seen
	json.Unmarshal([]byte(body), &got)
	if got.Authorization != "" || got.Token != "" || got.Cookie != "theme=dark; lang=en" {
		t.Fatalf("credentials reached the sandbox: %+v", got)
	}

}

// The daemon's credentials, in every header and form they come in, never
// reach the sandbox; the app's own Authorization (Basic, another
// service's bearer token) does.
func TestHTTP_OnlyTheAppsCredentialsPass(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(r.Header)
	}))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	url := e.url(sbA, port, "/")
	token := strings.TrimPrefix(goodToken, "Bearer ")
	daemons := http.Header{
		"X-Sandboxd-Token":         {token},
		"X-Api-Key":                {"e2b_" + hex.EncodeToString([]byte(token))},
		"X-Access-Token":           {"envd"},
		"E2b-Traffic-Access-Token": {"traffic"},
		"X-Daytona-Preview-Token":  {"preview"},
		"X-Sandboxd-Node":          {"n2"},
		"X-Sandboxd-Node-Auth":     {"t=1,mac=00"},
		"Cookie":                   {"theme=dark; sandboxd_token=x; s=" + token},
	}
	for _, tc := range []struct{ authz, want string }{
		{goodToken, ""},
		{"Bearer e2b_" + hex.EncodeToString([]byte(token)), ""},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+token)), ""},
		{"Basic dXNlcjpwYXNz", "Basic dXNlcjpwYXNz"},
		{"Bearer someone-elses-jwt", "Bearer someone-elses-jwt"},
	} {
		h := daemons.Clone()
		h.Set("Authorization", tc.authz)
		h.Set("X-App", "kept")
		code, body := e.get(t, url, h)
		var got http.Header
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%q: %d %s", tc.authz, code, body)
		}
		for k := range daemons {
			if k != "Cookie" && got.Get(k) != "" {
				t.Errorf("%q: %s reached the sandbox: %q", tc.authz, k, got.Get(k))
			}
		}
		if got.Get("Authorization") != tc.want || got.Get("Cookie") != "theme=dark" || got.Get("X-App") != "kept" {
			t.Errorf("%q: the sandbox saw Authorization %q, Cookie %q, X-App %q; want %q, \"theme=dark\", \"kept\"",
				tc.authz, got.Get("Authorization"), got.Get("Cookie"), got.Get("X-App"), tc.want)
		}
	}
}

func TestHTTP_PythonHTTPServer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	want := "hello from python\n"
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(py, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1", "--directory", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListening(t, port)

	e := newEnv(t)
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	code, body := e.get(t, e.url(sbA, port, "/hello.txt"), nil)
	if code != http.StatusOK || body != want {
		t.Fatalf("got %d %q, want 200 %q", code, body, want)
	}
}

func waitListening(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d never listened: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHTTP_WebSocketEcho(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+e.url(sbA, port, "/ws")[len("http"):], &websocket.DialOptions{HTTPClient: e.client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i := range 3 {
		want := "message " + strconv.Itoa(i)
		if err := c.Write(ctx, websocket.MessageText, []byte(want)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("echo %q, want %q", got, want)
		}
	}

	// Unexposing the port cuts the live WebSocket.
	if err := e.r.UnexposePort(ctx, sbA, port); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); err == nil {
		t.Fatal("WebSocket survived UnexposePort")
	}
}

func TestHTTP_Streams50MBIntact(t *testing.T) {
	const size = 50 << 20
	e := newEnv(t)
	wantSum := sha256.New()
	io.Copy(wantSum, io.LimitReader(rand.NewChaCha8([32]byte{7}), size))
	port := httpUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.Copy(w, io.LimitReader(rand.NewChaCha8([32]byte{7}), size)) // chunked, streamed
	}))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})

	resp, err := e.client.Get(e.url(sbA, port, "/big"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	gotSum := sha256.New()
	n, err := io.Copy(gotSum, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if n != size || string(gotSum.Sum(nil)) != string(wantSum.Sum(nil)) {
		t.Fatalf("got %d bytes, sha256 %x; want %d bytes, sha256 %x", n, gotSum.Sum(nil), size, wantSum.Sum(nil))
	}
}

func TestHTTP_CustomDomain(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	e.expose(t, sbB, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	ctx := t.Context()
	const host = "app.example.com"

	if err := e.r.BindDomain(ctx, "App.Example.COM.", sbA, port); err != nil {
		t.Fatal(err)
	}
	if err := e.r.BindDomain(ctx, host, sbA, port); err != nil {
		t.Fatalf("same binding again: %v", err)
	}
	if err := e.r.BindDomain(ctx, host, sbB, port); !errors.Is(err, ingress.ErrHostnameConflict) {
		t.Fatalf("other sandbox: got %v, want ErrHostnameConflict", err)
	}
	if err := e.r.BindDomain(ctx, e.r.PreviewHost(sbB, port), sbB, port); !errors.Is(err, ingress.ErrInvalidRoute) {
		t.Fatalf("preview host as custom domain: got %v, want ErrInvalidRoute", err)
	}
	code, body := e.get(t, "http://"+host+"/x", nil)
	if code != http.StatusOK || !json.Valid([]byte(body)) {
		t.Fatalf("custom domain: %d %q", code, body)
	}

	// Another sandbox cannot unbind it; its owner can.
	e.r.UnbindDomain(ctx, sbB, host)
	if code, _ := e.get(t, "http://"+host+"/x", nil); code != http.StatusOK {
		t.Fatalf("after a foreign unbind: status %d, want 200", code)
	}
	e.r.UnbindDomain(ctx, sbA, host)
	if code, body := e.get(t, "http://"+host+"/x", nil); body != "api" {
		t.Fatalf("after unbind: %d %q, want the API", code, body)
	}
	if err := e.r.BindDomain(ctx, host, sbB, port); err != nil {
		t.Fatalf("bind after release: %v", err)
	}
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestHTTP_FallbackServesUnexposedPreviewPorts: WrapFallback asks its
// fallback about a preview host whose port has no http route (the E2B
// facade serves any port of its sandboxes by host), never about an exposed
// port or another host; a fallback that declines leaves the router's 404,
// byte for byte the answer for an unknown sandbox.
func TestHTTP_FallbackServesUnexposedPreviewPorts(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	e.expose(t, sbB, ingress.Port{Number: port, Protocol: ingress.TCP, Public: true})

	type asked struct {
		id   string
		port int
	}
	var got []asked
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "api") })
	h := e.r.WrapFallback(api, func(w http.ResponseWriter, _ *http.Request, id string, p int) bool {
		got = append(got, asked{id, p})
		if id == sbA {
			io.WriteString(w, "fallback")
			return true
		}
		return false
	})
	serve := func(host string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}

	if code, body := serve(e.r.PreviewHost(sbA, port) + ":7070"); code != http.StatusOK || !strings.Contains(body, `"Path":"/x"`) {
		t.Errorf("exposed port: %d %s, want the upstream", code, body)
	}
	if code, body := serve(e.r.PreviewHost(sbA, 3000)); code != http.StatusOK || body != "fallback" {
		t.Errorf("unexposed port: %d %q, want the fallback's answer", code, body)
	}
	if code, body := serve("app.example.com"); code != http.StatusOK || body != "api" {
		t.Errorf("another host: %d %q, want the API", code, body)
	}
	declined, declinedBody := serve(e.r.PreviewHost(sbB, port))
	unknownCode, unknownBody := serve(e.r.PreviewHost("sb-00000000000000aa", 3000))
	if declined != http.StatusNotFound || declinedBody != unknownBody || unknownCode != http.StatusNotFound {
		t.Errorf("declined: %d %s; unknown: %d %s; want the same 404", declined, declinedBody, unknownCode, unknownBody)
	}
	want := []asked{{sbA, 3000}, {sbB, port}, {"sb-00000000000000aa", 3000}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(asked{})); diff != "" {
		t.Errorf("fallback asked about (-want +got):\n%s", diff)
	}
}

// TestHTTP_HugeReplyHeadersAre502: a sandbox port answering with more than
// 64 KiB of headers fails that request (502) instead of being held in the
// daemon's memory; an honest answer beside it passes.
func TestHTTP_HugeReplyHeadersAre502(t *testing.T) {
	e := newEnv(t)
	port := httpUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 8 << 10
		if r.URL.Path == "/huge" {
			n = 200 << 10
		}
		w.Header().Set("X-Pad", strings.Repeat("a", n))
		io.WriteString(w, "ok")
	}))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	if code, body := e.get(t, e.url(sbA, port, "/huge"), nil); code != http.StatusBadGateway {
		t.Errorf("200 KiB of reply headers: %d %.100s, want 502", code, body)
	}
	if code, body := e.get(t, e.url(sbA, port, "/fine"), nil); code != http.StatusOK || body != "ok" {
		t.Errorf("8 KiB of reply headers: %d %.100s, want 200 ok", code, body)
	}
}
