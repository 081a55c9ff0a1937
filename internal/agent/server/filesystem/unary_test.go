package filesystem_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// ignoreVolatile leaves modified_time out of entry comparisons.
var ignoreVolatile = protocmp.IgnoreFields(&rpc.EntryInfo{}, "modified_time")

func ptr[T any](v T) *T { return &v }

func TestStat(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "f.txt")
	mustWrite(t, f, "hello")
	os.Chmod(f, 0o640)
	link := filepath.Join(e.dir, "link")
	os.Symlink("f.txt", link)
	dangling := filepath.Join(e.dir, "dangling")
	os.Symlink("nowhere", dangling)
	sticky := filepath.Join(e.dir, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, 0o777|os.ModeSticky)

	for _, tc := range []struct {
		path string
		want *rpc.EntryInfo
	}{
		{f, &rpc.EntryInfo{Name: "f.txt", Type: rpc.FileType_FILE_TYPE_FILE, Path: f, Size: 5, Mode: 0o640,
			Permissions: "-rw-r-----", Owner: "root", Group: "root"}},
		{link, &rpc.EntryInfo{Name: "link", Type: rpc.FileType_FILE_TYPE_FILE, Path: link, Size: 5, Mode: 0o640,
			Permissions: "Lrwxrwxrwx", Owner: "root", Group: "root", SymlinkTarget: ptr(f)}},
		{dangling, &rpc.EntryInfo{Name: "dangling", Type: rpc.FileType_FILE_TYPE_SYMLINK, Path: dangling, Size: 7, Mode: 0o777,
			Permissions: "Lrwxrwxrwx", Owner: "root", Group: "root", SymlinkTarget: ptr("nowhere")}},
		{sticky, &rpc.EntryInfo{Name: "sticky", Type: rpc.FileType_FILE_TYPE_DIRECTORY, Path: sticky, Size: 4096, Mode: 0o1777,
			Permissions: "dtrwxrwxrwx", Owner: "root", Group: "root"}},
	} {
		resp, err := e.client.Stat(t.Context(), connect.NewRequest(&rpc.StatRequest{Path: tc.path}))
		if err != nil {
			t.Fatalf("Stat(%s): %v", tc.path, err)
		}
		got := resp.Msg.GetEntry()
		if diff := cmp.Diff(tc.want, got, protocmp.Transform(), ignoreVolatile); diff != "" {
			t.Errorf("Stat(%s) (-want +got):\n%s", tc.path, diff)
		}
		if mt := got.GetModifiedTime().AsTime(); time.Since(mt) > time.Minute {
			t.Errorf("Stat(%s) modified_time %v", tc.path, mt)
		}
	}
}

func TestStat_RelativeToUserHome(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	mustWrite(t, filepath.Join(e.home, "notes", "a"), "x")
	for _, p := range []string{"notes/a", "~/notes/a"} {
		resp, err := e.client.Stat(t.Context(), as("user", connect.NewRequest(&rpc.StatRequest{Path: p})))
		if err != nil {
			t.Fatalf("Stat(%s): %v", p, err)
		}
		if got, want := resp.Msg.GetEntry().GetPath(), filepath.Join(e.home, "notes", "a"); got != want {
			t.Errorf("Stat(%s).path = %q, want %q", p, got, want)
		}
	}
}

func TestStat_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	_, err := e.client.Stat(t.Context(), connect.NewRequest(&rpc.StatRequest{Path: filepath.Join(e.dir, "missing")}))
	wantCode(t, "missing", err, connect.CodeNotFound)
	_, err = e.client.Stat(t.Context(), connect.NewRequest(&rpc.StatRequest{Path: e.dir + "/a\x00b"}))
	wantCode(t, "NUL", err, connect.CodeInvalidArgument)
	_, err = e.client.Stat(t.Context(), as("ghost", connect.NewRequest(&rpc.StatRequest{Path: e.dir})))
	wantCode(t, "unknown user", err, connect.CodeInvalidArgument)
}

func TestMakeDir(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	p := filepath.Join(e.dir, "a", "b", "c")
	resp, err := e.client.MakeDir(t.Context(), as("user", connect.NewRequest(&rpc.MakeDirRequest{Path: p})))
	if err != nil {
		t.Fatal(err)
	}
	want := &rpc.EntryInfo{Name: "c", Type: rpc.FileType_FILE_TYPE_DIRECTORY, Path: p, Size: 4096, Mode: 0o755,
		Permissions: "drwxr-xr-x", Owner: "user", Group: "user"}
	if os.Geteuid() != 0 {
		want.Owner, want.Group = resp.Msg.GetEntry().GetOwner(), resp.Msg.GetEntry().GetGroup()
	}
	if diff := cmp.Diff(want, resp.Msg.GetEntry(), protocmp.Transform(), ignoreVolatile); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if os.Geteuid() == 0 {
		for _, d := range []string{p, filepath.Dir(p), filepath.Join(e.dir, "a")} {
			if uid, gid := owner(t, d); uid != userUID || gid != userGID {
				t.Errorf("%s owned by %d:%d, want %d:%d", d, uid, gid, userUID, userGID)
			}
		}
		if uid, _ := owner(t, e.dir); uid != 0 {
			t.Errorf("existing parent re-owned to %d", uid)
		}
	}
}

func TestMakeDir_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "file")
	mustWrite(t, f, "")
	for _, tc := range []struct {
		name, path string
		want       connect.Code
	}{
		{"exists", e.dir, connect.CodeAlreadyExists},
		{"file exists", f, connect.CodeInvalidArgument},
		{"file in the way", filepath.Join(f, "sub"), connect.CodeInvalidArgument},
		{"NUL", e.dir + "/x\x00", connect.CodeInvalidArgument},
	} {
		_, err := e.client.MakeDir(t.Context(), connect.NewRequest(&rpc.MakeDirRequest{Path: tc.path}))
		wantCode(t, tc.name, err, tc.want)
	}
}

func TestMakeDir_ConcurrentOneWins(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	p := filepath.Join(e.dir, "x", "race")
	const n = 16
	var wg sync.WaitGroup
	codes := make([]connect.Code, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.client.MakeDir(t.Context(), connect.NewRequest(&rpc.MakeDirRequest{Path: p}))
			if err != nil {
				codes[i] = connect.CodeOf(err)
			}
		})
	}
	wg.Wait()
	wins := 0
	for _, c := range codes {
		switch c {
		case 0:
			wins++
		case connect.CodeAlreadyExists:
		default:
			t.Errorf("unexpected code %v", c)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d MakeDir calls succeeded, want exactly 1", wins, n)
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	src := filepath.Join(e.dir, "src.txt")
	mustWrite(t, src, "data")
	dst := filepath.Join(e.dir, "new", "parent", "dst.txt")
	resp, err := e.client.Move(t.Context(), as("user", connect.NewRequest(&rpc.MoveRequest{Source: src, Destination: dst})))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetEntry(); got.GetPath() != dst || got.GetName() != "dst.txt" || got.GetType() != rpc.FileType_FILE_TYPE_FILE {
		t.Errorf("entry = %v", got)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "data" {
		t.Errorf("destination: %q, %v", b, err)
	}
	if _, err := os.Lstat(src); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("source still there: %v", err)
	}
	if os.Geteuid() == 0 {
		if uid, _ := owner(t, filepath.Join(e.dir, "new")); uid != userUID {
			t.Errorf("created parent owned by %d, want %d", uid, userUID)
		}
	}
	// A file destination is replaced.
	other := filepath.Join(e.dir, "other")
	mustWrite(t, other, "other")
	if _, err := e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: dst, Destination: other})); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(other); string(b) != "data" {
		t.Errorf("replaced destination holds %q", b)
	}
}

func TestMove_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	full := filepath.Join(e.dir, "full")
	mustWrite(t, filepath.Join(full, "f"), "")
	dir := filepath.Join(e.dir, "dir")
	os.Mkdir(dir, 0o755)
	for _, tc := range []struct {
		name, src, dst string
		want           connect.Code
	}{
		{"missing source", filepath.Join(e.dir, "nope"), filepath.Join(e.dir, "x"), connect.CodeNotFound},
		{"onto non-empty dir", dir, full, connect.CodeAlreadyExists},
		{"into itself", dir, filepath.Join(dir, "sub"), connect.CodeInvalidArgument},
		{"NUL", dir, e.dir + "/\x00", connect.CodeInvalidArgument},
	} {
		_, err := e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: tc.src, Destination: tc.dst}))
		wantCode(t, tc.name, err, tc.want)
	}
}

func names(entries []*rpc.EntryInfo, root string) []string {
	var out []string
	for _, e := range entries {
		rel, _ := filepath.Rel(root, e.GetPath())
		out = append(out, rel+":"+e.GetType().String())
	}
	return out
}

func TestListDir_Depth(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	mustWrite(t, filepath.Join(e.dir, "a", "b", "c", "deep.txt"), "")
	mustWrite(t, filepath.Join(e.dir, "a", "one.txt"), "1")
	mustWrite(t, filepath.Join(e.dir, "top.txt"), "")
	os.Symlink(filepath.Join(e.dir, "a"), filepath.Join(e.dir, "link"))

	const (
		dir  = "FILE_TYPE_DIRECTORY"
		file = "FILE_TYPE_FILE"
	)
	for _, tc := range []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"a:" + dir, "link:" + dir, "top.txt:" + file}},
		{1, []string{"a:" + dir, "link:" + dir, "top.txt:" + file}},
		{2, []string{"a:" + dir, "a/b:" + dir, "a/one.txt:" + file, "link:" + dir, "top.txt:" + file}},
		{9, []string{"a:" + dir, "a/b:" + dir, "a/b/c:" + dir, "a/b/c/deep.txt:" + file, "a/one.txt:" + file, "link:" + dir, "top.txt:" + file}},
	} {
		resp, err := e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: e.dir, Depth: tc.depth}))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, names(resp.Msg.GetEntries(), e.dir)); diff != "" {
			t.Errorf("depth %d (-want +got):\n%s", tc.depth, diff)
		}
	}
}

func TestListDir_ThroughSymlinkKeepsRequestedPath(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	mustWrite(t, filepath.Join(e.dir, "real", "f"), "")
	link := filepath.Join(e.dir, "link")
	os.Symlink("real", link)
	resp, err := e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: link}))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg.GetEntries()
	if len(got) != 1 || got[0].GetPath() != filepath.Join(link, "f") {
		t.Errorf("entries = %v, want one at %s", got, filepath.Join(link, "f"))
	}
}

func TestListDir_EmptyDirIsEmptyList(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	resp, err := e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: e.dir}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*rpc.EntryInfo{}, resp.Msg.GetEntries(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestListDir_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "f")
	mustWrite(t, f, "")
	_, err := e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: filepath.Join(e.dir, "nope")}))
	wantCode(t, "missing", err, connect.CodeNotFound)
	_, err = e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: f}))
	wantCode(t, "file", err, connect.CodeInvalidArgument)
	_, err = e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: "\x00"}))
	wantCode(t, "NUL", err, connect.CodeInvalidArgument)
}

func TestRemove(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "f")
	tree := filepath.Join(e.dir, "tree")
	mustWrite(t, f, "")
	mustWrite(t, filepath.Join(tree, "a", "b", "c"), "")
	target := filepath.Join(e.dir, "target")
	mustWrite(t, target, "keep")
	link := filepath.Join(e.dir, "link")
	os.Symlink(target, link)

	for _, p := range []string{f, tree, link, filepath.Join(e.dir, "never-existed")} {
		if _, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: p})); err != nil {
			t.Errorf("Remove(%s): %v", p, err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("removing a symlink removed its target: %v", err)
	}
}

func TestRemove_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	_, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: "/"}))
	wantCode(t, "root", err, connect.CodeInvalidArgument)
	_, err = e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: e.dir + "\x00"}))
	wantCode(t, "NUL", err, connect.CodeInvalidArgument)
	if _, err := os.Stat(e.dir); err != nil {
		t.Errorf("NUL path removed its prefix: %v", err)
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

// TestRemoveAndMove_RefuseTheAgentsPaths: no file call takes the agent's
// socket directory or binary with it — not naming them, a path under
// them, a directory above them, or a symlinked parent — while their
// neighbours stay removable.
func TestRemoveAndMove_RefuseTheAgentsPaths(t *testing.T) {
	root := t.TempDir()
	run := filepath.Join(root, "run")
	sockDir := filepath.Join(run, "sandboxd")
	bin := filepath.Join(root, "opt", "sandboxd", "toolboxd")
	mustWrite(t, filepath.Join(sockDir, "agent.sock"), "")
	mustWrite(t, bin, "")
	mustWrite(t, filepath.Join(run, "other"), "")
	e := newEnv(t, filesystem.Options{Protected: []string{sockDir, bin}})
	viaLink := filepath.Join(e.dir, "link")
	if err := os.Symlink(sockDir, viaLink); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		sockDir, filepath.Join(sockDir, "agent.sock"), run, root, bin, filepath.Dir(bin),
		filepath.Join(viaLink, "agent.sock"),
	} {
		_, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: p}))
		wantCode(t, "remove "+p, err, connect.CodeInvalidArgument)
		_, err = e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: p, Destination: filepath.Join(e.dir, "moved")}))
		wantCode(t, "move "+p, err, connect.CodeInvalidArgument)
	}
	mustWrite(t, filepath.Join(e.dir, "f"), "")
	_, err := e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: filepath.Join(e.dir, "f"), Destination: filepath.Join(sockDir, "agent.sock")}))
	wantCode(t, "move over the socket", err, connect.CodeInvalidArgument)
	for _, p := range []string{filepath.Join(sockDir, "agent.sock"), bin} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
	if _, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: filepath.Join(run, "other")})); err != nil {
		t.Errorf("remove a neighbour of the socket directory: %v", err)
	}
}

// TestRemoveAndMove_RefuseSystemPaths: no file call
// removes or renames a device node, wherever it is, or anything under
// /dev, /proc or /sys (the agent runs every process with /dev/null as its
// stdin); the entries of /dev/shm stay the user's. Only paths that do not
// exist and a device node of the test's own are named, so that the test
// cannot harm the host it runs on, whatever the code does.
func TestRemoveAndMove_RefuseSystemPaths(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	node := filepath.Join(e.dir, "null")
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("cannot make a device node here: %v", err)
	}
	missing := "sandboxd-test-" + filepath.Base(e.dir)
	for _, p := range []string{node, "/dev/" + missing, "/proc/" + missing, "/sys/" + missing} {
		_, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: p}))
		wantCode(t, "remove "+p, err, connect.CodeInvalidArgument)
	}
	_, err := e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: node, Destination: filepath.Join(e.dir, "moved")}))
	wantCode(t, "move a device node", err, connect.CodeInvalidArgument)
	if _, err := os.Lstat(node); err != nil {
		t.Errorf("the device node is gone: %v", err)
	}
	shm := filepath.Join("/dev/shm", missing)
	mustWrite(t, shm, "")
	t.Cleanup(func() { os.Remove(shm) })
	if _, err := e.client.Remove(t.Context(), connect.NewRequest(&rpc.RemoveRequest{Path: shm})); err != nil {
		t.Errorf("remove a file in /dev/shm: %v", err)
	}
}
