package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// agentRSS reads the agent's (PID 1's) resident set size in KiB.
func agentRSS(t *testing.T, s *sandbox) int {
	t.Helper()
	res, err := s.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"sh", "-c", "grep VmRSS /proc/1/status"}})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(res.Stdout)) // VmRSS: 12345 kB
	if len(f) < 2 {
		t.Fatalf("VmRSS: %q", res.Stdout)
	}
	kb, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

// TestDocker_100MBTransferKeepsAgentMemoryBounded streams 100 MB into a
// real sandbox and back out, and checks that the agent's RSS stays far
// below the file's size: nothing is buffered whole.
func TestDocker_100MBTransferKeepsAgentMemoryBounded(t *testing.T) {
	t.Parallel()
	eachIsolation(t, transferKeepsAgentMemoryBounded)
}

func transferKeepsAgentMemoryBounded(t *testing.T, iso runtime.Isolation) {
	s := sharedSandbox(t, iso)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const size = 100 << 20
	before := agentRSS(t, s)

	src := io.LimitReader(rand.NewChaCha8([32]byte{7}), size)
	up := sha256.New()
	if err := s.client.Upload(ctx, "/tmp/big.bin", io.TeeReader(src, up), ""); err != nil {
		t.Fatal(err)
	}
	afterUpload := agentRSS(t, s)

	rc, err := s.client.Download(ctx, "/tmp/big.bin", "")
	if err != nil {
		t.Fatal(err)
	}
	down := sha256.New()
	n, err := io.Copy(down, rc)
	rc.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, err %v", n, err)
	}
	if !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatal("downloaded bytes differ from the uploaded ones")
	}
	afterDownload := agentRSS(t, s)
	t.Logf("agent RSS: %d KiB before, %d after a 100 MB upload, %d after the download", before, afterUpload, afterDownload)
	const bound = 40 << 10 // KiB: a small fraction of the 100 MB moved
	if afterUpload-before > bound || afterDownload-before > bound {
		t.Errorf("agent RSS grew by %d / %d KiB moving 100 MB; want < %d KiB", afterUpload-before, afterDownload-before, bound)
	}
}

// TestDocker_WatchDirEvents watches a directory inside a real sandbox and
// sees create, write, rename and remove.
func TestDocker_WatchDirEvents(t *testing.T) {
	t.Parallel()
	eachIsolation(t, watchDirEvents)
}

func watchDirEvents(t *testing.T, iso runtime.Isolation) {
	s := sharedSandbox(t, iso)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := "/tmp/watched-" + strconv.Itoa(rand.IntN(1e9))
	if _, err := s.client.Exec(ctx, agent.ExecRequest{Cmd: []string{"mkdir", "-p", dir}}); err != nil {
		t.Fatal(err)
	}
	stream, err := s.client.Filesystem().WatchDir(ctx, connect.NewRequest(&fsrpc.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event is not start: %v %v", stream.Msg(), stream.Err())
	}
	script := "cd " + dir + " && touch a && echo hi >> a && mv a b && rm b"
	if _, err := s.client.Exec(ctx, agent.ExecRequest{Cmd: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	want := map[fsrpc.EventType]bool{
		fsrpc.EventType_EVENT_TYPE_CREATE: false, fsrpc.EventType_EVENT_TYPE_WRITE: false,
		fsrpc.EventType_EVENT_TYPE_RENAME: false, fsrpc.EventType_EVENT_TYPE_REMOVE: false,
	}
	missing := len(want)
	for missing > 0 && stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		if seen, ok := want[ev.GetType()]; ok && !seen {
			want[ev.GetType()] = true
			missing--
		}
	}
	if missing > 0 {
		t.Fatalf("events seen: %v (stream err %v)", want, stream.Err())
	}
}
