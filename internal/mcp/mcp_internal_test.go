package mcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/clientconf"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func TestCapture_WholeWhenItFits(t *testing.T) {
	c := newCapture(16)
	fmt.Fprint(c, "hello ")
	fmt.Fprint(c, "world")
	if got, want := c.String(), "hello world"; got != want || c.Truncated() {
		t.Errorf("got %q (truncated %v), want %q", got, c.Truncated(), want)
	}
}

func TestCapture_KeepsHeadAndTail(t *testing.T) {
	c := newCapture(8)
	for _, chunk := range []string{"ab", "cdef", "ghijklmn", "op"} { // 16 bytes
		if n, err := c.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	got := c.String()
	if !c.Truncated() || !strings.HasPrefix(got, "abcd") || !strings.HasSuffix(got, "mnop") || !strings.Contains(got, "8 bytes of output left out") {
		t.Errorf("got %q (truncated %v); want abcd, a note of 8 bytes, mnop", got, c.Truncated())
	}
}

func TestValidPrefix_HoldsBackACutCharacter(t *testing.T) {
	check := []byte("a✓") // ✓ is 3 bytes
	for cut, want := range map[int]int{1: 1, 2: 1, 3: 1, 4: 4} {
		if got := validPrefix(check[:cut]); got != want {
			t.Errorf("validPrefix(%q) = %d, want %d", check[:cut], got, want)
		}
	}
	if got := validPrefix([]byte{0xff, 0xfe}); got != 2 {
		t.Errorf("validPrefix of invalid bytes = %d, want 2: only a cut character is held back", got)
	}
}

func TestStreamer_JoinsCutCharactersAndStopsAtItsBound(t *testing.T) {
	var got []string
	var sent int64
	s := &streamer{send: func(text string) error { got = append(got, text); return nil }, limit: 8, sent: &sent}
	check := []byte("✓✓")
	s.Write(check[:2])
	s.Write(check[2:4])
	s.Write(check[4:])
	s.Write([]byte("toolong"))
	s.Write([]byte("more"))
	want := []string{"✓", "✓", "[streamed output stops here (8 bytes); the result carries the rest, bounded]"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sent %q, want %q", got, want)
	}
}

func TestFailure_APIErrorSaysCodeMessageAndWhatToDo(t *testing.T) {
	err := failure("exec in \"sb-1\"", fmt.Errorf("exec in sandbox %q: %w", "sb-1",
		&sandboxd.APIError{Status: 404, Code: sandboxd.CodeNotFound, Message: `sandbox "sb-1": not found`}))
	want := `exec in "sb-1" failed (not_found): sandbox "sb-1": not found. ` + hints["not_found"]
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
}

func TestFailure_RetryableClassesSaySo(t *testing.T) {
	err := failure("create_sandbox", &sandboxd.APIError{Status: 503, Code: sandboxd.CodeUnavailable, Message: "the engine is not answering; retry later"})
	if !strings.HasSuffix(err.Error(), "This may succeed if retried shortly.") {
		t.Errorf("got %q", err)
	}
	err = failure("create_sandbox", &sandboxd.APIError{Status: 400, Code: sandboxd.CodeInvalidArgument, Message: "cpu: too much"})
	if strings.Contains(err.Error(), "retried") {
		t.Errorf("a bad argument reads as retryable: %q", err)
	}
}

func TestFailure_UnknownCodeIsInternal(t *testing.T) {
	err := failure("op", &sandboxd.APIError{Status: 500, Code: "teapot", Message: "x"})
	if !strings.Contains(err.Error(), "(internal)") {
		t.Errorf("got %q", err)
	}
}

func TestFailure_DaemonNotRunningSaysWhere(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	err := failure("list_sandboxes", fmt.Errorf("list sandboxes: %w", fmt.Errorf("Get \"http://x\": %w", dial)))
	got := err.Error()
	if !strings.Contains(got, "(unavailable)") || !strings.Contains(got, "cannot reach the sandboxd daemon: connection refused") || !strings.Contains(got, "SBX_API_URL") {
		t.Errorf("got %q", got)
	}
}

func TestFailure_OtherErrorsShowOnlyTheCause(t *testing.T) {
	err := failure("read_file", fmt.Errorf("download x: %w", fmt.Errorf("sandboxd: read: %w", errors.New("unexpected EOF"))))
	if got := err.Error(); strings.Contains(got, "sandboxd: ") || !strings.Contains(got, "unexpected EOF") {
		t.Errorf("got %q", got)
	}
}

// TestCommand_TokenByClientconf: sandboxd mcp finds its token by package
// clientconf's rules, as sbx does: a --token-file that is not there is
// the same error, and exit 1 before serving.
func TestCommand_TokenByClientconf(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	var stderr strings.Builder
	env := Env{Getenv: func(string) string { return "" }, Getwd: os.Getwd}
	code := Command(t.Context(), []string{"--token-file", missing}, io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, &stderr, env, "test")
	_, want := clientconf.Resolve(clientconf.Flags{TokenFile: missing}, env)
	if code != 1 || want == nil || stderr.String() != "sandboxd mcp: "+want.Error()+"\n" {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// /mcp answers a request without a valid credential 401 in the API's
// shape, before the MCP handler or the API sees it.
func TestHTTPHandler_RefusesBeforeReadingMCP(t *testing.T) {
	apiCalled := false
	h := NewHTTPHandler(HTTPOptions{
		API:          http.HandlerFunc(func(http.ResponseWriter, *http.Request) { apiCalled = true }),
		APIHost:      "127.0.0.1:1",
		Authenticate: func(*http.Request) error { return fmt.Errorf("%w: no Authorization header", auth.ErrUnauthenticated) },
	})
	defer h.Close()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)))
	want := `{"error":{"code":"unauthenticated","message":"missing or invalid API token","retryable":false}}` + "\n"
	if rec.Code != http.StatusUnauthorized || rec.Body.String() != want || rec.Header().Get("WWW-Authenticate") == "" || apiCalled {
		t.Errorf("got %d %q (WWW-Authenticate %q, API called %v); want 401 %q", rec.Code, rec.Body, rec.Header().Get("WWW-Authenticate"), apiCalled, want)
	}
}
