package v1_test

import (
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// TestFiles_RoundTrip uploads 50 MB, downloads it and compares digests,
// then lists and removes it.
func TestFiles_RoundTrip(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	const size = 50 << 20
	url := env.URL + "/v1/sandboxes/" + id + "/files?path=/tmp/roundtrip/big.bin"

	up := sha256.New()
	body := io.TeeReader(io.LimitReader(rand.Reader, size), up)
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", url, body)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: status %d", resp.StatusCode)
	}

	req, _ = http.NewRequestWithContext(t.Context(), "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	down := sha256.New()
	n, err := io.Copy(down, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: status %d, %v", resp.StatusCode, err)
	}
	if n != size || string(down.Sum(nil)) != string(up.Sum(nil)) {
		t.Errorf("downloaded %d bytes with sha256 %x, uploaded %d with %x", n, down.Sum(nil), size, up.Sum(nil))
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(size) {
		t.Errorf("Content-Length = %q, want %d", cl, size)
	}

	type entry struct {
		Name, Path, Type string
		Size             int64
	}
	list := decode[struct{ Entries []entry }](t, do(t, tok, "GET", "/v1/sandboxes/"+id+"/files/list?path=/tmp/roundtrip", ""), http.StatusOK)
	if len(list.Entries) != 1 || list.Entries[0].Name != "big.bin" || list.Entries[0].Type != "file" || list.Entries[0].Size != size {
		t.Errorf("list = %+v", list.Entries)
	}
	for range 2 { // removing is idempotent
		if r := do(t, tok, "DELETE", "/v1/sandboxes/"+id+"/files?path=/tmp/roundtrip/big.bin", ""); r.status != http.StatusNoContent {
			t.Fatalf("remove: %v", r)
		}
	}
	wantError(t, do(t, tok, "GET", "/v1/sandboxes/"+id+"/files?path=/tmp/roundtrip/big.bin", ""), 404, "not_found")
}

func TestFiles_BadInput(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	base := "/v1/sandboxes/" + id + "/files"
	for _, q := range []string{"", "?path=", "?path=/a&path=/b", "?file=/a", "?path=/a%00b"} {
		wantError(t, do(t, tok, "GET", base+q, ""), 400, "invalid_argument")
		wantError(t, do(t, tok, "PUT", base+q, "x"), 400, "invalid_argument")
	}
}
