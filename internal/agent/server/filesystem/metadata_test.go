package filesystem_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// TestEntryInfo_CarriesMetadata (envd 0.6.2): the user.e2b.* attributes of
// a file are its EntryInfo.metadata on Stat, ListDir and Move, a symlink
// reporting its target's.
func TestEntryInfo_CarriesMetadata(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "f.txt")
	mustWrite(t, f, "hello")
	for name, v := range map[string]string{"user.e2b.author": "alice", "user.e2b.purpose": "demo", "user.other": "not ours"} {
		if err := syscall.Setxattr(f, name, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(e.dir, "link")
	if err := syscall.Symlink("f.txt", link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(e.dir, "plain")
	mustWrite(t, plain, "")
	want := map[string]string{"author": "alice", "purpose": "demo"}

	for _, p := range []string{f, link} {
		st, err := e.client.Stat(t.Context(), connect.NewRequest(&rpc.StatRequest{Path: p}))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, st.Msg.GetEntry().GetMetadata()); diff != "" {
			t.Errorf("Stat(%s) metadata (-want +got):\n%s", p, diff)
		}
	}
	ls, err := e.client.ListDir(t.Context(), connect.NewRequest(&rpc.ListDirRequest{Path: e.dir, Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, en := range ls.Msg.GetEntries() {
		got[en.GetName()] = en.GetMetadata()
	}
	if diff := cmp.Diff(map[string]map[string]string{"f.txt": want, "link": want, "plain": nil}, got); diff != "" {
		t.Errorf("ListDir metadata (-want +got):\n%s", diff)
	}
	moved := filepath.Join(e.dir, "g.txt")
	mv, err := e.client.Move(t.Context(), connect.NewRequest(&rpc.MoveRequest{Source: f, Destination: moved}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, mv.Msg.GetEntry().GetMetadata()); diff != "" {
		t.Errorf("Move metadata (-want +got):\n%s", diff)
	}
}

// TestWatchDir_EntryInfoOfEvents (envd 0.6.3): with include_entry every
// event on an entry that still exists carries its full EntryInfo, its
// metadata included; a removed entry's event has none.
func TestWatchDir_EntryInfoOfEvents(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	ch, _ := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir, IncludeEntry: true}))
	f := filepath.Join(e.dir, "f")
	mustWrite(t, f, "abc")
	if err := syscall.Setxattr(f, "user.e2b.tag", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(eventTimeout)
	var sawCreate, sawMeta bool
	for !sawCreate || !sawMeta {
		select {
		case m := <-ch:
			fe := m.GetFilesystem()
			if fe == nil || fe.GetName() != "f" {
				continue
			}
			en := fe.GetEntry()
			if en == nil {
				t.Fatalf("%v event without an entry", fe.GetType())
			}
			if en.GetPath() != f || en.GetType() != rpc.FileType_FILE_TYPE_FILE || en.GetOwner() != "root" ||
				en.GetPermissions() != "-rw-r--r--" || en.GetMode() != 0o644 || en.GetModifiedTime() == nil {
				t.Errorf("%v entry = %v", fe.GetType(), en)
			}
			sawCreate = sawCreate || fe.GetType() == rpc.EventType_EVENT_TYPE_CREATE
			sawMeta = sawMeta || en.GetMetadata()["tag"] == "v1"
		case <-deadline:
			t.Fatalf("create seen %v, an entry with the metadata seen %v", sawCreate, sawMeta)
		}
	}
}
