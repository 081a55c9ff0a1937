package filemeta_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/agent/server/filemeta"
)

func TestFromHeader(t *testing.T) {
	h := http.Header{}
	h.Set("X-Metadata-Author", "alice")
	h.Set("Content-Type", "text/plain")
	h.Set("X-Metadata-", "ignored: no key")
	got, err := filemeta.FromHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"author": "alice"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, err := filemeta.FromHeader(http.Header{"Accept": {"*/*"}}); got != nil || err != nil {
		t.Errorf("no metadata: %v %v", got, err)
	}
	many := http.Header{}
	for i := range filemeta.MaxPairs + 1 {
		many.Set("X-Metadata-K"+strings.Repeat("x", i), "v")
	}
	if _, err := filemeta.FromHeader(many); err == nil {
		t.Errorf("%d pairs accepted", filemeta.MaxPairs+1)
	}
	for _, bad := range []http.Header{
		{"X-Metadata-K": {"tab\there"}},
		{"X-Metadata-K": {strings.Repeat("v", 65<<10)}},
		{"X-Metadata-" + strings.Repeat("k", 300): {"v"}},
	} {
		if _, err := filemeta.FromHeader(bad); err == nil {
			t.Errorf("accepted %.60v", bad)
		}
	}
}

// TestRead_SkipsWhatProtoJSONCannotCarry: metadata set inside the sandbox
// (setfattr) is reported, but a value that is not UTF-8, or an attribute
// outside user.e2b., is not; a missing file has none.
func TestRead_SkipsWhatProtoJSONCannotCarry(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"user.e2b.ok": "yes", "user.e2b.bin": "\xff\xfe", "user.elsewhere": "x"} {
		if err := syscall.Setxattr(p, name, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[string]string{"ok": "yes"}, filemeta.Read(p)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := filemeta.Read(p + ".missing"); got != nil {
		t.Errorf("missing file: %v", got)
	}
}
