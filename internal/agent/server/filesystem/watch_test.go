package filesystem_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// eventTimeout bounds how long a test waits for an inotify event to
// arrive: generous, since it only costs time when the event never comes.
const eventTimeout = testenv.Deadline

// ev is an event as "TYPE name", e.g. "CREATE sub/f".
func ev(e *rpc.FilesystemEvent) string {
	return strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_") + " " + e.GetName()
}

// watchStream opens WatchDir, checks the first event is start, and returns
// a channel of the stream's later messages; it is closed when the stream
// ends, and the stream's error is then in *errp.
func watchStream(t *testing.T, e *env, req *connect.Request[rpc.WatchDirRequest]) (<-chan *rpc.WatchDirResponse, *error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := e.client.WatchDir(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if !stream.Receive() {
		cancel()
		t.Fatalf("no first event: %v", stream.Err())
	}
	if stream.Msg().GetStart() == nil {
		t.Fatalf("first event %v, want start", stream.Msg())
	}
	ch := make(chan *rpc.WatchDirResponse)
	errp := new(error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for stream.Receive() {
			select {
			case ch <- stream.Msg():
			case <-ctx.Done():
				return
			}
		}
		*errp = stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		stream.Close()
	})
	return ch, errp
}

// await reads events until each of want has been seen, in order (other
// events may come between), and returns everything read.
func await(t *testing.T, next func() (*rpc.FilesystemEvent, bool), want ...string) []string {
	t.Helper()
	var seen []string
	i := 0
	deadline := time.Now().Add(eventTimeout)
	for i < len(want) && time.Now().Before(deadline) {
		e, ok := next()
		if !ok {
			continue
		}
		seen = append(seen, ev(e))
		if ev(e) == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("missing %q after %v; saw %q", want[i:], eventTimeout, seen)
	}
	return seen
}

func fromStream(ch <-chan *rpc.WatchDirResponse) func() (*rpc.FilesystemEvent, bool) {
	return func() (*rpc.FilesystemEvent, bool) {
		select {
		case m, ok := <-ch:
			if !ok {
				return nil, false
			}
			return m.GetFilesystem(), m.GetFilesystem() != nil
		case <-time.After(100 * time.Millisecond):
			return nil, false
		}
	}
}

func TestWatchDir_Events(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	ch, _ := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir}))
	next := fromStream(ch)

	f := filepath.Join(e.dir, "f")
	mustWrite(t, f, "one")
	await(t, next, "CREATE f", "WRITE f")
	os.Chmod(f, 0o600)
	await(t, next, "CHMOD f")
	if err := os.Rename(f, filepath.Join(e.dir, "g")); err != nil {
		t.Fatal(err)
	}
	await(t, next, "RENAME f", "CREATE g")
	os.Remove(filepath.Join(e.dir, "g"))
	await(t, next, "REMOVE g")
}

func TestWatchDir_NotRecursiveIgnoresSubdirs(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	ch, _ := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir}))
	next := fromStream(ch)
	os.Mkdir(filepath.Join(e.dir, "sub"), 0o755)
	await(t, next, "CREATE sub")
	mustWrite(t, filepath.Join(e.dir, "sub", "inner"), "x")
	mustWrite(t, filepath.Join(e.dir, "marker"), "")
	seen := await(t, next, "CREATE marker")
	if slices.Contains(seen, "CREATE sub/inner") {
		t.Errorf("non-recursive watch reported %q", seen)
	}
}

func TestWatchDir_Recursive(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	mustWrite(t, filepath.Join(e.dir, "old", "deep", "x"), "")
	ch, _ := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir, Recursive: true}))
	next := fromStream(ch)

	// A directory that existed when the watch started.
	mustWrite(t, filepath.Join(e.dir, "old", "deep", "y"), "y")
	await(t, next, "CREATE old/deep/y", "WRITE old/deep/y")

	// mkdir -p: the subdirectories appear before their watches can exist.
	if err := os.MkdirAll(filepath.Join(e.dir, "a", "b", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	await(t, next, "CREATE a", "CREATE a/b", "CREATE a/b/c")
	mustWrite(t, filepath.Join(e.dir, "a", "b", "c", "f"), "1")
	await(t, next, "CREATE a/b/c/f", "WRITE a/b/c/f")

	// Renaming a watched directory: events inside carry the new name.
	if err := os.Rename(filepath.Join(e.dir, "a"), filepath.Join(e.dir, "z")); err != nil {
		t.Fatal(err)
	}
	await(t, next, "RENAME a", "CREATE z")
	mustWrite(t, filepath.Join(e.dir, "z", "new"), "")
	seen := await(t, next, "CREATE z/new")
	mustWrite(t, filepath.Join(e.dir, "z", "b", "c", "nested"), "")
	seen = append(seen, await(t, next, "CREATE z/b/c/nested")...)
	for _, s := range seen {
		if strings.Contains(s, " a/") {
			t.Errorf("event under the old name after rename: %q", s)
		}
	}

	os.RemoveAll(filepath.Join(e.dir, "old"))
	await(t, next, "REMOVE old/deep/x", "REMOVE old/deep", "REMOVE old")
}

func TestWatchDir_IncludeEntry(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	ch, _ := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir, IncludeEntry: true}))
	mustWrite(t, filepath.Join(e.dir, "f"), "abc")
	deadline := time.After(eventTimeout)
	for {
		select {
		case m := <-ch:
			if fe := m.GetFilesystem(); fe.GetType() == rpc.EventType_EVENT_TYPE_CREATE {
				if got := fe.GetEntry(); got.GetName() != "f" || got.GetType() != rpc.FileType_FILE_TYPE_FILE {
					t.Errorf("entry = %v", got)
				}
				return
			}
		case <-deadline:
			t.Fatal("no CREATE event")
		}
	}
}

func TestWatchDir_Keepalive(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	req := connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	ch, _ := watchStream(t, e, req)
	select {
	case m := <-ch:
		if m.GetKeepalive() == nil {
			t.Errorf("got %v, want keepalive", m)
		}
	case <-time.After(eventTimeout):
		t.Fatal("no keepalive")
	}
}

func TestWatchDir_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	f := filepath.Join(e.dir, "f")
	mustWrite(t, f, "")
	for _, tc := range []struct {
		name, path string
		want       connect.Code
	}{
		{"missing", filepath.Join(e.dir, "nope"), connect.CodeNotFound},
		{"file", f, connect.CodeInvalidArgument},
		{"NUL", "\x00", connect.CodeInvalidArgument},
	} {
		stream, err := e.client.WatchDir(t.Context(), connect.NewRequest(&rpc.WatchDirRequest{Path: tc.path}))
		if err == nil {
			if stream.Receive() {
				t.Errorf("%s: got %v", tc.name, stream.Msg())
			}
			err = stream.Err()
			stream.Close()
		}
		wantCode(t, tc.name, err, tc.want)
	}
}

func TestWatchDir_EndsOnClose(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	ch, errp := watchStream(t, e, connect.NewRequest(&rpc.WatchDirRequest{Path: e.dir}))
	e.svc.Close()
	for range ch {
	}
	wantCode(t, "after Close", *errp, connect.CodeUnavailable)
}

func createWatcher(t *testing.T, e *env, req *rpc.CreateWatcherRequest) string {
	t.Helper()
	resp, err := e.client.CreateWatcher(t.Context(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetWatcherId()
}

// fromPoller returns events of a polling watcher one by one.
func fromPoller(t *testing.T, e *env, id string) func() (*rpc.FilesystemEvent, bool) {
	var buf []*rpc.FilesystemEvent
	return func() (*rpc.FilesystemEvent, bool) {
		if len(buf) == 0 {
			resp, err := e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			buf = resp.Msg.GetEvents()
			if len(buf) == 0 {
				time.Sleep(20 * time.Millisecond)
				return nil, false
			}
		}
		e := buf[0]
		buf = buf[1:]
		return e, true
	}
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	id := createWatcher(t, e, &rpc.CreateWatcherRequest{Path: e.dir, Recursive: true})
	next := fromPoller(t, e, id)

	mustWrite(t, filepath.Join(e.dir, "f"), "x")
	os.MkdirAll(filepath.Join(e.dir, "d", "e"), 0o755)
	await(t, next, "CREATE f", "WRITE f", "CREATE d", "CREATE d/e")
	mustWrite(t, filepath.Join(e.dir, "d", "e", "g"), "")
	os.Remove(filepath.Join(e.dir, "f"))
	await(t, next, "CREATE d/e/g", "REMOVE f")

	// Drained: nothing left.
	resp, err := e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil || len(resp.Msg.GetEvents()) != 0 {
		t.Errorf("after drain: %v, %v", resp.Msg.GetEvents(), err)
	}

	if _, err := e.client.RemoveWatcher(t.Context(), connect.NewRequest(&rpc.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, "get after remove", err, connect.CodeNotFound)
	_, err = e.client.RemoveWatcher(t.Context(), connect.NewRequest(&rpc.RemoveWatcherRequest{WatcherId: id}))
	wantCode(t, "remove twice", err, connect.CodeNotFound)
}

func TestPollingWatcher_Errors(t *testing.T) {
	e := newEnv(t, filesystem.Options{})
	_, err := e.client.CreateWatcher(t.Context(), connect.NewRequest(&rpc.CreateWatcherRequest{Path: filepath.Join(e.dir, "nope")}))
	wantCode(t, "missing dir", err, connect.CodeNotFound)
	_, err = e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: "wnope"}))
	wantCode(t, "unknown id", err, connect.CodeNotFound)
}

func TestPollingWatcher_Limit(t *testing.T) {
	const max = 3
	e := newEnv(t, filesystem.Options{MaxWatchers: max})
	var ids []string
	for range max {
		ids = append(ids, createWatcher(t, e, &rpc.CreateWatcherRequest{Path: e.dir}))
	}
	_, err := e.client.CreateWatcher(t.Context(), connect.NewRequest(&rpc.CreateWatcherRequest{Path: e.dir}))
	wantCode(t, fmt.Sprintf("watcher %d", max+1), err, connect.CodeResourceExhausted)
	e.client.RemoveWatcher(t.Context(), connect.NewRequest(&rpc.RemoveWatcherRequest{WatcherId: ids[0]}))
	createWatcher(t, e, &rpc.CreateWatcherRequest{Path: e.dir})
}

func TestPollingWatcher_IdleIsRemoved(t *testing.T) {
	const idle = 3 * time.Second
	// One watcher at most: a second one can be created only once the idle
	// one is gone. That is the probe, since a poll would rearm its timer.
	e := newEnv(t, filesystem.Options{WatcherIdle: idle, MaxWatchers: 1})
	id := createWatcher(t, e, &rpc.CreateWatcherRequest{Path: e.dir})
	// Polling keeps it alive past its idle time.
	for range 10 {
		time.Sleep(idle / 10)
		if _, err := e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: id})); err != nil {
			t.Fatalf("polled watcher: %v", err)
		}
	}
	testenv.WaitFor(t, "the idle watcher to be removed", func() error {
		_, err := e.client.CreateWatcher(t.Context(), connect.NewRequest(&rpc.CreateWatcherRequest{Path: e.dir}))
		return err
	})
	_, err := e.client.GetWatcherEvents(t.Context(), connect.NewRequest(&rpc.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, "idle watcher", err, connect.CodeNotFound)
}
