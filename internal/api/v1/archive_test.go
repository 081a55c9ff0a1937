package v1_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// Under both runtimes (runc and gVisor's kernel): an upload of known
// length (the agent splices it from its socket) arrives whole, and a tree
// goes in and out through /files/archive.
func TestFiles_SizedUploadAndArchive(t *testing.T) {
	t.Parallel()
	tok := token(t, "archive-user")
	runtimes := []string{"runc", "gvisor"}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			body := `{` + busybox + `,"memory_mb":256}`
			if rt == "gvisor" {
				requireGVisor(t, tok)
				body = `{` + busybox + `,"runtime":"gvisor","memory_mb":256}`
			}
			sb := create(t, tok, body)
			data := make([]byte, 3<<20+5)
			rand.Read(data)
			r := doBody(t, tok, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/sized.bin", "", bytes.NewReader(data))
			if r.status != http.StatusNoContent {
				t.Fatalf("sized upload: %s", r)
			}
			got := do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/sized.bin", "")
			if got.status != http.StatusOK || !bytes.Equal(got.body, data) {
				t.Fatalf("download of the sized upload: %d, %d bytes (want %d)", got.status, len(got.body), len(data))
			}

			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			tw.WriteHeader(&tar.Header{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o755})
			tw.WriteHeader(&tar.Header{Name: "t/f", Typeflag: tar.TypeReg, Mode: 0o600, Size: 5})
			tw.Write([]byte("hello"))
			tw.WriteHeader(&tar.Header{Name: "t/l", Typeflag: tar.TypeSymlink, Linkname: "f"})
			tw.Close()
			r = doBody(t, tok, "PUT", "/v1/sandboxes/"+sb.ID+"/files/archive?path=/tmp/in", "application/x-tar", &b)
			if r.status != http.StatusNoContent {
				t.Fatalf("PUT archive: %s", r)
			}
			wantError(t, doBody(t, tok, "PUT", "/v1/sandboxes/"+sb.ID+"/files/archive?path=/tmp/in", "application/octet-stream", bytes.NewReader(nil)),
				http.StatusBadRequest, "invalid_argument")
			got = do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/files/archive?path=/tmp/in/t", "")
			if got.status != http.StatusOK || got.header.Get("Content-Type") != "application/x-tar" {
				t.Fatalf("GET archive: %s", got)
			}
			var names []string
			tr := tar.NewReader(bytes.NewReader(got.body))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, h.Name+":"+h.Linkname)
			}
			if want := "[t/: t/f: t/l:f]"; fmt.Sprint(names) != want {
				t.Errorf("archive entries %v, want %s", names, want)
			}
			wantError(t, do(t, tok, "GET", "/v1/sandboxes/"+sb.ID+"/files/archive?path=/tmp/missing", ""), http.StatusNotFound, "not_found")
		})
	}
}

// doBody sends body (its length known when it has one) with contentType.
func doBody(t *testing.T, tok, method, path, contentType string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, needEnv(t).URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
