package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// archive makes a gzipped tar of entries (name → content; a content
// starting with "->" is a symbolic link to the rest, a name ending in '/'
// a directory).
func archive(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e[1][2:], 0
		case strings.HasSuffix(e[0], ".sh"):
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func describeSteps(steps []service.Step) []string {
	var out []string
	for _, s := range steps {
		switch {
		case s.Copy != nil && s.Copy.Link != "":
			out = append(out, s.Copy.Path+" -> "+s.Copy.Link)
		case s.Copy != nil:
			d := s.Copy.Path + "=" + string(s.Copy.Content)
			if s.Copy.Mode != 0 {
				d += " mode " + strconv.FormatUint(uint64(s.Copy.Mode), 8)
			}
			out = append(out, d)
		case s.Run != "":
			out = append(out, "run "+s.Run)
		}
	}
	return out
}

// TestCopySteps: files land where Docker's COPY puts them; names that
// are absolute or climb out, and entries that are not files, directories
// or links, are refused.
func TestCopySteps(t *testing.T) {
	ctx := archive(t, [2]string{"a.txt", "A"}, [2]string{"run.sh", "S"}, [2]string{"conf/", ""},
		[2]string{"conf/x.ini", "X"}, [2]string{"conf/sub/y.ini", "Y"}, [2]string{"conf/link", "->x.ini"})
	for _, tc := range []struct {
		src, dest, workdir string
		mode               uint32
		want               []string
	}{
		{"a.txt", "/app/", "/", 0, []string{"/app/a.txt=A"}},
		{"a.txt", "/app/b.txt", "/", 0, []string{"/app/b.txt=A"}},
		{"./a.txt", "rel/", "/srv", 0, []string{"/srv/rel/a.txt=A"}},
		{"run.sh", "/bin/", "/", 0, []string{"/bin/run.sh=S mode 755"}},
		{"a.txt", "/x", "/", 0o600, []string{"/x=A mode 600"}},
		{"conf", "/etc/app", "/", 0, []string{"/etc/app/x.ini=X", "/etc/app/sub/y.ini=Y", "/etc/app/link -> x.ini"}},
		{"*.txt", "/t", "/", 0, []string{"/t/a.txt=A"}},
		{"co*", "/c", "/", 0, []string{"/c/x.ini=X", "/c/sub/y.ini=Y", "/c/link -> x.ini"}},
	} {
		steps, err := copySteps(ctx, tc.src, tc.dest, tc.workdir, tc.mode)
		if err != nil {
			t.Errorf("copy %s %s: %v", tc.src, tc.dest, err)
			continue
		}
		if got := describeSteps(steps); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("copy %s %s:\n got %q\nwant %q", tc.src, tc.dest, got, tc.want)
		}
	}
	for _, bad := range [][2]string{{"../escape", "x"}, {"/etc/passwd", "x"}, {"a/../../b", "x"}} {
		if _, err := copySteps(archive(t, bad), ".", "/app", "/", 0); err == nil {
			t.Errorf("an archive with %q was taken", bad[0])
		}
	}
	if _, err := copySteps(ctx, "missing", "/app", "/", 0); err == nil {
		t.Error("a COPY of nothing in the archive was taken")
	}
	if _, err := copySteps([]byte("not an archive at all, not even close....................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................."), ".", "/app", "/", 0); err == nil {
		t.Error("garbage was taken as an archive")
	}
}

// TestUploads: a token is spent by its upload and only names its owner's
// hash; an owner past its bound loses its oldest archives, not another
// owner's; archives and tokens expire.
func TestUploads(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	u := newUploads(func() time.Time { return now })
	tok, err := u.token("alice", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if err := u.put(tok, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := u.put(tok, []byte("again")); err == nil {
		t.Error("a spent token was taken again")
	}
	if !u.has("alice", "h1") || u.has("bob", "h1") {
		t.Error("the archive is alice's alone")
	}
	bobTok, _ := u.token("bob", "b1")
	_ = u.put(bobTok, []byte("bob's"))
	big := bytes.Repeat([]byte("x"), maxUploadBytes)
	for i := range maxOwnerUploadBytes/maxUploadBytes + 1 {
		now = now.Add(time.Second)
		tok, _ := u.token("alice", "big"+string(rune('a'+i)))
		if err := u.put(tok, big); err != nil {
			t.Fatal(err)
		}
	}
	if u.has("alice", "h1") || u.has("alice", "biga") {
		t.Error("alice's oldest archives were kept past her bound")
	}
	if !u.has("bob", "b1") || !u.has("alice", "bige") {
		t.Error("bob's archive, or alice's newest, was dropped")
	}
	late, _ := u.token("alice", "late")
	now = now.Add(uploadKeep + time.Minute)
	if u.has("bob", "b1") {
		t.Error("an archive outlived uploadKeep")
	}
	if err := u.put(late, []byte("x")); err == nil {
		t.Error("an expired token was taken")
	}
}
