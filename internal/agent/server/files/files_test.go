package files_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/files"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an agent serving /files on a unix socket in a temp dir, with a
// passwd file that knows root and user (uid 1000, home under the temp dir).
type env struct {
	client *http.Client
	home   string // user's home
	dir    string // scratch directory for test files
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	home := filepath.Join(base, "home", "user")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(base, "passwd")
	content := fmt.Sprintf("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::%s:/bin/bash\n", home)
	if err := os.WriteFile(passwd, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	files.New(files.Options{Users: account.NewDirectory(passwd)}).Handle(mux)

	sock := filepath.Join(base, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true,
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	scratch := filepath.Join(base, "scratch")
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	return &env{client: &http.Client{Transport: tr}, home: home, dir: scratch}
}

func filesURL(q url.Values) string { return "http://agent/files?" + q.Encode() }

type written = files.WrittenFile

// do sends req and decodes a 200 answer into the written-file list, or
// returns the status and error body.
func (e *env) do(t *testing.T, req *http.Request) (int, []written, apiError) {
	t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var ok []written
	var bad apiError
	dst := any(&ok)
	if resp.StatusCode != http.StatusOK {
		dst = &bad
	}
	if err := json.NewDecoder(resp.Body).Decode(dst); err != nil {
		t.Fatalf("decode %d answer: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, ok, bad
}

type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type part struct{ field, filename, content string }

func multipartBody(t *testing.T, parts ...part) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		fn := fmt.Sprintf("filename=%q", p.filename)
		if strings.ContainsRune(p.filename, 0) { // only RFC 2231 encoding gets a NUL past textproto
			fn = "filename*=UTF-8''" + url.PathEscape(p.filename)
		}
		h.Set("Content-Disposition", fmt.Sprintf("form-data; name=%q; %s", p.field, fn))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func (e *env) upload(t *testing.T, q url.Values, parts ...part) (int, []written, apiError) {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	req, _ := http.NewRequest(http.MethodPost, filesURL(q), body)
	req.Header.Set("Content-Type", ct)
	return e.do(t, req)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpload_MultipartSeveralFiles(t *testing.T) {
	e := newEnv(t)
	a := filepath.Join(e.dir, "a.txt")
	b := filepath.Join(e.dir, "deep", "er", "b.bin")
	code, got, apiErr := e.upload(t, nil,
		part{"file", a, "alpha"},
		part{"other", "/ignored", "x"},
		part{"file", b, "beta"},
	)
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	want := []written{{Name: "a.txt", Type: "file", Path: a}, {Name: "b.bin", Type: "file", Path: b}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if got := readFile(t, a); got != "alpha" {
		t.Errorf("a = %q", got)
	}
	if got := readFile(t, b); got != "beta" {
		t.Errorf("b = %q", got)
	}
	if _, err := os.Stat("/ignored"); err == nil {
		t.Error("a part not named file was written")
	}
	leftovers, _ := filepath.Glob(filepath.Join(e.dir, ".*upload*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestUpload_PathParamWinsOverFilename(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "dest")
	code, got, apiErr := e.upload(t, url.Values{"path": {dest}}, part{"file", "blob", "x"})
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	if diff := cmp.Diff([]written{{Name: "dest", Type: "file", Path: dest}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := readFile(t, dest); got != "x" {
		t.Errorf("content %q", got)
	}
}

func TestUpload_ReplacesKeepingMode(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "script.sh")
	if err := os.WriteFile(dest, []byte("old, longer content"), 0o750); err != nil {
		t.Fatal(err)
	}
	if code, _, apiErr := e.upload(t, nil, part{"file", dest, "new"}); code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	if got := readFile(t, dest); got != "new" {
		t.Errorf("content %q", got)
	}
	fi, _ := os.Stat(dest)
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("mode %v, want 0750", fi.Mode().Perm())
	}
}

func TestUpload_RelativePathIsUnderHome(t *testing.T) {
	e := newEnv(t)
	code, got, apiErr := e.upload(t, url.Values{"username": {"user"}}, part{"file", "notes/a.txt", "hi"})
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	want := filepath.Join(e.home, "notes", "a.txt")
	if got[0].Path != want {
		t.Errorf("path %q, want %q", got[0].Path, want)
	}
	if got := readFile(t, want); got != "hi" {
		t.Errorf("content %q", got)
	}
}

func TestUpload_OwnedByUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to uid 1000 needs root")
	}
	e := newEnv(t)
	dest := filepath.Join(e.dir, "new", "dir", "f")
	code, _, apiErr := e.upload(t, url.Values{"username": {"user"}}, part{"file", dest, "x"})
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	for _, p := range []string{dest, filepath.Dir(dest), filepath.Join(e.dir, "new")} {
		if uid, gid := owner(t, p); uid != 1000 || gid != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, uid, gid)
		}
	}
	if uid, _ := owner(t, e.dir); uid != 0 {
		t.Errorf("existing dir re-owned to %d", uid)
	}
	// root is the default.
	rootFile := filepath.Join(e.dir, "rootfile")
	e.upload(t, nil, part{"file", rootFile, "x"})
	if uid, _ := owner(t, rootFile); uid != 0 {
		t.Errorf("default upload owned by %d, want root", uid)
	}
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestUpload_OctetStream(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "raw")
	req, _ := http.NewRequest(http.MethodPost, filesURL(url.Values{"path": {dest}}), strings.NewReader("raw bytes"))
	req.Header.Set("Content-Type", "application/octet-stream")
	code, got, apiErr := e.do(t, req)
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	if diff := cmp.Diff([]written{{Name: "raw", Type: "file", Path: dest}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := readFile(t, dest); got != "raw bytes" {
		t.Errorf("content %q", got)
	}
}

func TestUpload_OctetStreamGzip(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "unzipped")
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	io.WriteString(zw, strings.Repeat("compressible ", 1000))
	zw.Close()
	req, _ := http.NewRequest(http.MethodPost, filesURL(url.Values{"path": {dest}}), &zbuf)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	if code, _, apiErr := e.do(t, req); code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	if got := readFile(t, dest); got != strings.Repeat("compressible ", 1000) {
		t.Errorf("content not decoded: %d bytes", len(got))
	}
}

func TestUpload_Errors(t *testing.T) {
	e := newEnv(t)
	dir := e.dir
	fileInTheWay := filepath.Join(dir, "plain")
	os.WriteFile(fileInTheWay, nil, 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	for _, tc := range []struct {
		name        string
		ct, enc     string
		q           url.Values
		body        string
		wantCode    int
		wantMessage string
	}{
		{"path with NUL", "application/octet-stream", "", url.Values{"path": {dir + "/a\x00b"}}, "x", 400, "NUL"},
		{"unknown user", "application/octet-stream", "", url.Values{"path": {dir + "/a"}, "username": {"ghost"}}, "x", 400, "unknown user"},
		{"directory", "application/octet-stream", "", url.Values{"path": {dir}}, "x", 400, "is a directory"},
		{"file in the way", "application/octet-stream", "", url.Values{"path": {fileInTheWay + "/x"}}, "x", 400, "not a directory"},
		{"raw without path", "application/octet-stream", "", nil, "x", 400, "path parameter is required"},
		{"bad gzip", "application/octet-stream", "gzip", url.Values{"path": {dir + "/z"}}, "not gzip", 400, "gzip"},
		{"bad content type", "text/plain", "", url.Values{"path": {dir + "/t"}}, "x", 400, "Content-Type"},
		{"multipart without boundary", "multipart/form-data", "", url.Values{"path": {dir + "/m"}}, "x", 400, "boundary"},
		// Not plain files: a FIFO would block the open, a socket may be the
		// agent's own, a kernel file is no file at all.
		{"fifo", "application/octet-stream", "", url.Values{"path": {fifo}}, "x", 400, "not a regular file"},
		{"socket", "application/octet-stream", "", url.Values{"path": {sock}}, "x", 400, "not a regular file"},
		{"proc mem", "application/octet-stream", "", url.Values{"path": {"/proc/self/mem"}}, "x", 400, "kernel file"},
		{"proc status", "application/octet-stream", "", url.Values{"path": {"/proc/self/status"}}, "x", 400, "kernel file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, filesURL(tc.q), strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ct)
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			code, _, got := e.do(t, req)
			if code != tc.wantCode || got.Code != tc.wantCode || !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("got %d %+v, want %d with %q", code, got, tc.wantCode, tc.wantMessage)
			}
		})
	}
}

func TestUpload_MultipartErrors(t *testing.T) {
	e := newEnv(t)
	code, _, got := e.upload(t, nil, part{"other", "/tmp/x", "x"})
	if code != 400 || !strings.Contains(got.Message, `no multipart part named "file"`) {
		t.Errorf("no file part: %d %+v", code, got)
	}
	code, _, got = e.upload(t, nil, part{"file", "", "x"})
	if code != 400 || !strings.Contains(got.Message, "no filename") {
		t.Errorf("no filename: %d %+v", code, got)
	}
	code, _, got = e.upload(t, nil, part{"file", e.dir + "/a\x00", "x"})
	if code != 400 || !strings.Contains(got.Message, "NUL") {
		t.Errorf("NUL filename: %d %+v", code, got)
	}
}

func TestUpload_TruncatedMultipart(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "partial")
	body, ct := multipartBody(t, part{"file", dest, strings.Repeat("x", 1<<16)})
	b, _ := io.ReadAll(body)
	req, _ := http.NewRequest(http.MethodPost, filesURL(nil), bytes.NewReader(b[:len(b)/2]))
	req.Header.Set("Content-Type", ct)
	code, _, got := e.do(t, req)
	if code != 400 {
		t.Errorf("truncated body: %d %+v, want 400", code, got)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Error("a truncated upload of a new file left it behind")
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t)
	p := filepath.Join(e.dir, "report final.txt")
	os.WriteFile(p, []byte("hello"), 0o644)
	resp, err := e.client.Get(filesURL(url.Values{"path": {p}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	got := map[string]string{
		"status":              resp.Status,
		"body":                string(body),
		"Content-Type":        resp.Header.Get("Content-Type"),
		"Content-Length":      resp.Header.Get("Content-Length"),
		"Content-Disposition": resp.Header.Get("Content-Disposition"),
	}
	want := map[string]string{
		"status":              "200 OK",
		"body":                "hello",
		"Content-Type":        "application/octet-stream",
		"Content-Length":      "5",
		"Content-Disposition": `attachment; filename="report final.txt"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDownload_EmptyAndRange(t *testing.T) {
	e := newEnv(t)
	empty := filepath.Join(e.dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	resp, err := e.client.Get(filesURL(url.Values{"path": {empty}}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "0" {
		t.Errorf("empty file: %s, Content-Length %q", resp.Status, resp.Header.Get("Content-Length"))
	}

	p := filepath.Join(e.dir, "digits")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	req, _ := http.NewRequest(http.MethodGet, filesURL(url.Values{"path": {p}}), nil)
	req.Header.Set("Range", "bytes=2-4")
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || string(b) != "234" {
		t.Errorf("range: %s %q", resp.Status, b)
	}
}

func TestDownload_RelativeToUserHome(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.home, "h.txt"), []byte("home"), 0o644)
	resp, err := e.client.Get(filesURL(url.Values{"path": {"~/h.txt"}, "username": {"user"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "home" {
		t.Errorf("got %s %q", resp.Status, b)
	}
}

func TestDownload_Errors(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(e.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		q        url.Values
		wantCode int
	}{
		{"missing", url.Values{"path": {filepath.Join(e.dir, "nope")}}, 404},
		{"directory", url.Values{"path": {e.dir}}, 400},
		{"NUL", url.Values{"path": {e.dir + "/x\x00y"}}, 400},
		{"unknown user", url.Values{"path": {e.dir}, "username": {"ghost"}}, 400},
		{"fifo", url.Values{"path": {fifo}}, 400},
		// Mapped at no offset the agent's first read reaches: EIO.
		{"proc mem", url.Values{"path": {"/proc/self/mem"}}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, filesURL(tc.q), nil)
			code, _, got := e.do(t, req)
			if code != tc.wantCode || got.Code != tc.wantCode || got.Message == "" {
				t.Errorf("got %d %+v, want %d", code, got, tc.wantCode)
			}
		})
	}
}

// TestDownload_KernelFile: a /proc file (size 0, no seeking to its end)
// streams its content (ServeContent fails on it: "seeker can't seek").
func TestDownload_KernelFile(t *testing.T) {
	e := newEnv(t)
	resp, err := e.client.Get(filesURL(url.Values{"path": {"/proc/self/status"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Pid:") {
		t.Fatalf("got %d %q, want 200 with the status lines", resp.StatusCode, body)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
	}
}

// xattrs returns the user.e2b.* attributes of p, as the kernel has them.
func xattrs(t *testing.T, p string) map[string]string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := syscall.Listxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if key, ok := strings.CutPrefix(name, "user.e2b."); ok {
			v := make([]byte, 64<<10)
			m, err := syscall.Getxattr(p, name, v)
			if err != nil {
				t.Fatal(err)
			}
			got[key] = string(v[:m])
		}
	}
	return got
}

// TestUpload_MetadataBecomesXattrs (envd 0.6.2): X-Metadata-<key> headers
// are kept as user.e2b.<lowercased key> attributes and answered back; an
// upload over the file replaces them, none kept; bad keys or values are
// 400 and write nothing.
func TestUpload_MetadataBecomesXattrs(t *testing.T) {
	e := newEnv(t)
	dest := filepath.Join(e.dir, "meta.txt")
	send := func(body string, header map[string]string, multipartUpload bool) (int, []written, apiError) {
		t.Helper()
		var req *http.Request
		if multipartUpload {
			rd, ct := multipartBody(t, part{"file", dest, body})
			req, _ = http.NewRequest(http.MethodPost, filesURL(nil), rd)
			req.Header.Set("Content-Type", ct)
		} else {
			req, _ = http.NewRequest(http.MethodPost, filesURL(url.Values{"path": {dest}}), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return e.do(t, req)
	}

	code, got, apiErr := send("one", map[string]string{"X-Metadata-Author": "alice", "x-metadata-purpose": "demo run"}, true)
	if code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, apiErr)
	}
	want := map[string]string{"author": "alice", "purpose": "demo run"}
	if diff := cmp.Diff([]written{{Name: "meta.txt", Type: "file", Path: dest, Metadata: want}}, got); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, xattrs(t, dest)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}

	// Another attribute, set outside the SDK's namespace, is left alone.
	if err := syscall.Setxattr(dest, "user.other", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	if code, _, apiErr := send("two", map[string]string{"X-Metadata-Source": "import"}, false); code != http.StatusOK {
		t.Fatalf("overwrite: %d %+v", code, apiErr)
	}
	if diff := cmp.Diff(map[string]string{"source": "import"}, xattrs(t, dest)); diff != "" {
		t.Errorf("after an overwrite (-want +got):\n%s", diff)
	}
	if code, _, _ := send("three", nil, false); code != http.StatusOK || len(xattrs(t, dest)) != 0 {
		t.Errorf("an overwrite without metadata kept %v", xattrs(t, dest))
	}
	v := make([]byte, 16)
	if n, err := syscall.Getxattr(dest, "user.other", v); err != nil || string(v[:n]) != "kept" {
		t.Errorf("user.other: %v, want kept", err)
	}

	for name, hdr := range map[string]map[string]string{
		"non-ASCII value": {"X-Metadata-K": "caf\xc3\xa9"},
		"a value too big": {"X-Metadata-K": strings.Repeat("v", 65<<10)},
	} {
		if code, _, _ := send("bad", hdr, false); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
		if got := readFile(t, dest); got != "three" {
			t.Errorf("%s: the refused upload wrote %q", name, got)
		}
	}
}
