package files_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func archiveURL(q url.Values) string { return "http://agent/sandboxd/archive?" + q.Encode() }

func oneFileTar(t *testing.T, name, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o640, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, body)
	tw.Close()
	return b.Bytes()
}

func (e *env) putArchive(t *testing.T, q url.Values, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, archiveURL(q), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An archive unpacked for a user is unpacked with the user's file-system
// identity: what it makes is the user's, and a directory the user may not
// write refuses it (403) with nothing written, though the agent is root.
func TestArchive_UnpacksAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	e := newEnv(t)
	// As in a sandbox: the way to the home is open, the home is the user's.
	for d := filepath.Dir(e.home); d != filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(e.home)))); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(e.home, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	code, body := e.putArchive(t, url.Values{"path": {"~/in"}, "username": {"user"}}, oneFileTar(t, "d/f", "hello"))
	if code != http.StatusOK {
		t.Fatalf("PUT archive as user into its home: %d %s", code, body)
	}
	for _, p := range []string{"in", "in/d", "in/d/f"} {
		fi, err := os.Lstat(filepath.Join(e.home, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(e.home, "in/d/f")); fi == nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("in/d/f mode %v, want 0640", fi)
	}
	// e.dir is root's, 0755: the user may not write there.
	code, body = e.putArchive(t, url.Values{"path": {e.dir}, "username": {"user"}}, oneFileTar(t, "d/f", "x"))
	if code != http.StatusForbidden {
		t.Errorf("PUT archive as user into root's directory: %d %s, want 403", code, body)
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "d")); err == nil {
		t.Error("the refused archive wrote into root's directory")
	}
}

// GET archive never follows a link out of the tree: the link is archived
// as a link, and what it names is not in the stream.
func TestArchive_GetKeepsLinksAsLinks(t *testing.T) {
	e := newEnv(t)
	secret := filepath.Join(e.dir, "secret")
	if err := os.WriteFile(secret, []byte("SECRET-BYTES"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(e.dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "f"), []byte("f"), 0o644)
	os.Symlink(secret, filepath.Join(tree, "out"))
	os.Symlink(e.dir, filepath.Join(tree, "outdir"))

	resp, err := e.client.Get(archiveURL(url.Values{"path": {tree}}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("GET archive: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	b, _ := io.ReadAll(resp.Body)
	if bytes.Contains(b, []byte("SECRET-BYTES")) {
		t.Error("the archive holds the content of a file outside the tree")
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fmt.Sprintf("%c %s", h.Typeflag, h.Name))
	}
	want := "5 tree/|2 tree/out|2 tree/outdir|5 tree/sub/|0 tree/sub/f"
	if got := strings.Join(names, "|"); got != want {
		t.Errorf("entries %s, want %s", got, want)
	}
	resp, err = e.client.Get(archiveURL(url.Values{"path": {filepath.Join(e.dir, "missing")}}))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET archive of a missing path: %d, want 404", resp.StatusCode)
	}
}

// A raw upload of known length is spliced from the connection (the
// handler hijacks it): the bytes arrive whole, the answer is the usual
// JSON, and the client's next request works on a new connection.
func TestUpload_SizedBodyIsSpliced(t *testing.T) {
	e := newEnv(t)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	p := filepath.Join(e.dir, "big.bin")
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, filesURL(url.Values{"path": {p}}), bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/octet-stream")
		code, w, bad := e.do(t, req)
		if code != http.StatusOK || len(w) != 1 || w[0].Path != p {
			t.Fatalf("sized upload: %d %+v %+v", code, w, bad)
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, data) {
			t.Fatalf("the file holds %d bytes, not the %d sent", len(got), len(data))
		}
	}
}

// A sized body cut short (the client gone mid-upload) is the client's
// fault (400), and the new file is removed.
func TestUpload_SizedBodyCutShort(t *testing.T) {
	e := newEnv(t)
	p := filepath.Join(e.dir, "cut.bin")
	conn, err := e.client.Transport.(*http.Transport).DialContext(t.Context(), "unix", "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: agent\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		"/files?"+url.Values{"path": {p}}.Encode(), 4<<20)
	conn.Write(make([]byte, 2<<20))
	conn.(*net.UnixConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a sized body cut short: %d, want 400", resp.StatusCode)
	}
	if _, err := os.Lstat(p); err == nil {
		t.Error("the cut upload left its file")
	}
}
