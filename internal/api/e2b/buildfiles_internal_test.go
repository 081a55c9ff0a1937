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
		steps, err := copySteps(ctx, copyArgs{src: tc.src, dest: tc.dest, workdir: tc.workdir, mode: tc.mode}, newCopyBudget())
		if err != nil {
			t.Errorf("copy %s %s: %v", tc.src, tc.dest, err)
			continue
		}
		if got := describeSteps(steps); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("copy %s %s:\n got %q\nwant %q", tc.src, tc.dest, got, tc.want)
		}
	}
	// The SDK's copy('.', '/app'): its archive starts with "./".
	dot := archive(t, [2]string{"./", ""}, [2]string{"a.txt", "A"}, [2]string{"d/", ""}, [2]string{"d/b.txt", "B"})
	if steps, err := copySteps(dot, copyArgs{src: ".", dest: "/app", owner: "user"}, newCopyBudget()); err != nil {
		t.Errorf("copy . /app: %v", err)
	} else if got := describeSteps(steps); strings.Join(got, ",") != "/app/a.txt=A,/app/d/b.txt=B" || steps[0].Copy.Owner != "user" {
		t.Errorf("copy . /app: %q, owner %q", got, steps[0].Copy.Owner)
	}
	// A hard link to a file the step copies is a copy of it; to one it
	// does not, refused.
	linked := func(extra ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("F"))
		_ = tw.WriteHeader(&tar.Header{Name: "g", Typeflag: tar.TypeLink, Linkname: "f"})
		for _, h := range extra {
			_ = tw.WriteHeader(h)
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	if steps, err := copySteps(linked(), copyArgs{src: "g", dest: "/x"}, newCopyBudget()); err == nil {
		t.Errorf("a hard link to a file the step does not copy was taken: %q", describeSteps(steps))
	}
	if _, err := copySteps(linked(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside"}), copyArgs{src: "h", dest: "/x"}, newCopyBudget()); err == nil {
		t.Error("a hard link out of the archive was taken")
	}
	if steps, err := copySteps(linked(), copyArgs{src: "[fg]", dest: "/x/"}, newCopyBudget()); err != nil {
		t.Errorf("copy [fg]: %v", err)
	} else if got := describeSteps(steps); strings.Join(got, ",") != "/x/f=F,/x/g=F" {
		t.Errorf("copy [fg]: %q", got)
	}
	// The budget is spent across steps: bytes, then files.
	budget := newCopyBudget()
	huge := archive(t, [2]string{"big", strings.Repeat("z", 5<<20)})
	if _, err := copySteps(huge, copyArgs{src: "big", dest: "/1"}, budget); err != nil {
		t.Fatal(err)
	}
	if _, err := copySteps(huge, copyArgs{src: "big", dest: "/2"}, budget); err == nil || !strings.Contains(err.Error(), "bytes together") {
		t.Errorf("a second 5 MiB copy past the 8 MiB budget: %v", err)
	}
	budget = &copyBudget{steps: 1, bytes: 1 << 20}
	if _, err := copySteps(ctx, copyArgs{src: "conf", dest: "/c"}, budget); err == nil {
		t.Error("three files past a budget of one were taken")
	}
	for _, bad := range [][2]string{{"../escape", "x"}, {"/etc/passwd", "x"}, {"a/../../b", "x"}} {
		if _, err := copySteps(archive(t, bad), copyArgs{src: ".", dest: "/app"}, newCopyBudget()); err == nil {
			t.Errorf("an archive with %q was taken", bad[0])
		}
	}
	if _, err := copySteps(ctx, copyArgs{src: "missing", dest: "/app"}, newCopyBudget()); err == nil {
		t.Error("a COPY of nothing in the archive was taken")
	}
	if _, err := copySteps([]byte("not an archive at all, not even close....................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................."), copyArgs{src: ".", dest: "/app"}, newCopyBudget()); err == nil {
		t.Error("garbage was taken as an archive")
	}
}

// TestUploads: a token names its owner's hash only; a PUT again with a
// spent token changes nothing; an unspent token is handed out again for
// the same hash; an owner past its bound loses its own oldest archives,
// never another owner's; past the host's bound an upload is refused;
// archives and tokens expire.
func TestUploads(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	u := newUploads(func() time.Time { return now })
	tok, err := u.token("alice", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := u.token("alice", "h1"); again != tok {
		t.Error("a second upload URL for the same unspent hash")
	}
	if err := u.put(tok, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if done, err := u.check(tok); err != nil || !done {
		t.Errorf("check of a spent token: %v, %v", done, err)
	}
	if err := u.put(tok, []byte("again")); err != nil {
		t.Errorf("a retried PUT: %v", err)
	}
	if got, _ := u.get("alice", "h1"); string(got) != "one" {
		t.Errorf("a retried PUT replaced the archive: %q", got)
	}
	if u.has("bob", "h1") {
		t.Error("bob sees alice's archive")
	}
	if _, err := u.check("forged"); err == nil {
		t.Error("a forged token passed the check")
	}
	bobTok, _ := u.token("bob", "b1")
	_ = u.put(bobTok, []byte("bob's"))
	big := bytes.Repeat([]byte("x"), maxUploadBytes)
	for i := range 3 {
		now = now.Add(time.Second)
		tok, _ := u.token("alice", "big"+strconv.Itoa(i))
		if err := u.put(tok, big); err != nil {
			t.Fatal(err)
		}
	}
	if u.has("alice", "h1") || u.has("alice", "big0") {
		t.Error("alice's oldest archives were kept past her bound")
	}
	if !u.has("bob", "b1") || !u.has("alice", "big2") {
		t.Error("bob's archive, or alice's newest, was dropped")
	}
	// The host's bound: owners fill it; the next is refused, nothing dropped.
	for i := 0; u.bytes+maxUploadBytes <= maxUploadsBytes; i++ {
		tok, _ := u.token("filler"+strconv.Itoa(i), "f")
		if err := u.put(tok, big); err != nil {
			t.Fatal(err)
		}
	}
	tok, _ = u.token("carol", "c")
	if err := u.put(tok, big); err == nil {
		t.Error("an upload past the host's bound was taken")
	}
	if !u.has("bob", "b1") {
		t.Error("the host's bound dropped another owner's archive")
	}
	late, _ := u.token("alice", "late")
	now = now.Add(uploadKeep + time.Minute)
	if u.has("bob", "b1") {
		t.Error("an archive outlived uploadKeep")
	}
	if err := u.put(late, []byte("x")); err == nil {
		t.Error("an expired token was taken")
	}
	if len(u.owners) != 0 || u.bytes != 0 {
		t.Errorf("after every archive and token expired: owners %v, %d bytes", u.owners, u.bytes)
	}
}
