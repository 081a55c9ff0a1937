package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// bigFileSize is the size of the file the transfer tests move both ways.
const bigFileSize = 50 << 20

// TestSDK_EndToEnd walks one sandbox through the Go SDK against the
// shared daemon: create (idempotent), get, list by tag, exec, streaming
// exec, a 50 MB round trip, file list and remove, stop and start, destroy,
// and the typed errors on the way.
func TestSDK_EndToEnd(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	c := newClient(d, true)
	suite := "sdk-" + sandboxd.NewIdempotencyKey()[:8] // isolates this test's tags on the shared daemon
	name := suite + "-main"

	req := sandboxd.CreateRequest{
		Image:          busyboxImage,
		Name:           name,
		CPU:            0.25,
		MemoryMB:       128,
		Env:            map[string]string{"GREETING": "hello"},
		Tags:           map[string]string{"suite": suite, "role": "main"},
		IdempotencyKey: sandboxd.NewIdempotencyKey(),
	}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	destroyAtEnd(t, c, sb.ID)
	if !sandboxd.IsSandboxID(sb.ID) || sb.State != sandboxd.StateRunning || sb.Name != name {
		t.Fatalf("created %+v; want a running sandbox named %q with an sb- id", sb, name)
	}
	if sb.SSHPrivateKey == "" || !strings.HasPrefix(sb.SSHPublicKey, "ssh-ed25519 ") {
		t.Errorf("create answer: want an ed25519 public key and the private key; got public %q, private set %v", sb.SSHPublicKey, sb.SSHPrivateKey != "")
	}

	t.Run("create_retry_same_key", func(t *testing.T) {
		again, err := c.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatalf("retry with the same key: %v", err)
		}
		if again.ID != sb.ID {
			t.Errorf("retry with the same key made %s; want the first sandbox %s", again.ID, sb.ID)
		}
		if again.SSHPrivateKey != "" {
			t.Error("a replayed create returned the private key again; it is shown only once")
		}
		other := req
		other.MemoryMB = 256
		if _, err := c.CreateSandbox(ctx, other); !errors.Is(err, sandboxd.ErrIdempotencyKeyReused) {
			t.Errorf("same key, different body: got %v; want idempotency_key_reused", err)
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, ref := range []string{sb.ID, name} {
			got, err := c.GetSandbox(ctx, ref)
			if err != nil {
				t.Fatalf("GetSandbox(%q): %v", ref, err)
			}
			want := *sb
			want.SSHPrivateKey = "" // never returned again
			if diff := cmp.Diff(want, *got); diff != "" {
				t.Errorf("GetSandbox(%q) differs from the create answer (-want +got):\n%s", ref, diff)
			}
		}
	})

	t.Run("list_by_tag", func(t *testing.T) {
		other := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Tags: map[string]string{"suite": suite, "role": "other"}})
		ids := func(opts sandboxd.ListOptions) []string {
			t.Helper()
			list, err := listAll(ctx, c, opts)
			if err != nil {
				t.Fatalf("list %+v: %v", opts, err)
			}
			var out []string
			for _, s := range list {
				out = append(out, s.ID)
			}
			return out
		}
		if got := ids(sandboxd.ListOptions{Tags: map[string]string{"suite": suite, "role": "main"}}); !cmp.Equal(got, []string{sb.ID}) {
			t.Errorf("list suite=%s,role=main: %v; want [%s]", suite, got, sb.ID)
		}
		got := ids(sandboxd.ListOptions{Tags: map[string]string{"suite": suite}})
		if len(got) != 2 || !containsAll(got, sb.ID, other.ID) {
			t.Errorf("list suite=%s: %v; want %s and %s", suite, got, sb.ID, other.ID)
		}
		if got := ids(sandboxd.ListOptions{Tags: map[string]string{"suite": suite, "role": "nobody"}}); len(got) != 0 {
			t.Errorf("list with a tag nobody has: %v; want none", got)
		}
		if got := ids(sandboxd.ListOptions{Name: name}); !cmp.Equal(got, []string{sb.ID}) {
			t.Errorf("list name=%s: %v; want [%s]", name, got, sb.ID)
		}
	})

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  sandboxd.ExecRequest
			want sandboxd.ExecResult
		}{
			{"argv", sandboxd.ExecRequest{Cmd: []string{"echo", "a b"}}, sandboxd.ExecResult{Stdout: "a b\n"}},
			{"env_from_create", sandboxd.ExecRequest{Command: "echo $GREETING"}, sandboxd.ExecResult{Stdout: "hello\n"}},
			{"exit_code_and_stderr", sandboxd.ExecRequest{Command: "echo out; echo err >&2; exit 3"},
				sandboxd.ExecResult{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}},
			{"stdin_env_cwd", sandboxd.ExecRequest{Command: "cat; echo $X; pwd", Stdin: "in\n", Env: map[string]string{"X": "y"}, Cwd: "/tmp"},
				sandboxd.ExecResult{Stdout: "in\ny\n/tmp\n"}},
		} {
			res, err := c.Exec(ctx, sb.ID, tc.req)
			if err != nil {
				t.Errorf("%s: Exec: %v", tc.name, err)
				continue
			}
			res.Duration = 0
			if diff := cmp.Diff(tc.want, *res); diff != "" {
				t.Errorf("%s: Exec(%+v) (-want +got):\n%s", tc.name, tc.req, diff)
			}
		}
		// A command killed by a signal did not succeed. (The API does not
		// say which code it gets: today -1, the agent's "no exit status".)
		if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "kill -9 $$"}); err != nil || res.ExitCode == 0 {
			t.Errorf("exec of a command killed by SIGKILL: %+v, %v; want a non-zero exit code", res, err)
		}
		// A command that does not exist is an answer, not a transport error.
		if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"/no/such/binary"}}); err == nil && res.ExitCode == 0 {
			t.Errorf("exec of a missing binary: exit 0; want a non-zero exit or an error")
		}
	})

	t.Run("exec_stream_stdin", func(t *testing.T) {
		p, err := c.ExecStream(ctx, sb.ID, sandboxd.StreamRequest{
			Command: `while read -r line; do echo "got $line"; echo "err $line" >&2; done; exit 5`,
		})
		if err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		defer p.Close()
		var stdout, stderr bytes.Buffer
		var wg sync.WaitGroup
		wg.Go(func() { io.Copy(&stdout, p.Stdout()) })
		wg.Go(func() { io.Copy(&stderr, p.Stderr()) })
		for _, line := range []string{"one", "two", strings.Repeat("x", 40<<10)} { // the last spans several stdin frames
			if _, err := io.WriteString(p, line+"\n"); err != nil {
				t.Fatalf("write stdin: %v", err)
			}
		}
		if err := p.CloseStdin(); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
		code, err := p.Wait()
		wg.Wait()
		if err != nil || code != 5 {
			t.Fatalf("Wait: %d, %v; want 5", code, err)
		}
		wantOut := "got one\ngot two\ngot " + strings.Repeat("x", 40<<10) + "\n"
		if stdout.String() != wantOut {
			t.Errorf("stdout: %d bytes %.40q…; want %d bytes", stdout.Len(), stdout.String(), len(wantOut))
		}
		if !strings.HasPrefix(stderr.String(), "err one\nerr two\n") {
			t.Errorf("stderr: %.40q…; want it to start with the err lines", stderr.String())
		}
	})

	t.Run("exec_stream_signal", func(t *testing.T) {
		p, err := c.ExecStream(ctx, sb.ID, sandboxd.StreamRequest{Cmd: []string{"sleep", "3600"}, Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			t.Fatalf("ExecStream: %v", err)
		}
		defer p.Close()
		if err := p.Signal("SIGKILL"); err != nil {
			t.Fatalf("Signal: %v", err)
		}
		type exit struct {
			code int
			err  error
		}
		done := make(chan exit, 1)
		go func() {
			code, err := p.Wait()
			done <- exit{code, err}
		}()
		select {
		case e := <-done:
			if e.err != nil || e.code == 0 {
				t.Errorf("after SIGKILL: exit %d, %v; want a non-zero exit", e.code, e.err)
			}
		case <-time.After(testenv.Deadline):
			t.Fatalf("sleep 3600 still running %v after SIGKILL", testenv.Deadline)
		}
	})

	t.Run("files_50MB_round_trip", func(t *testing.T) {
		dir := t.TempDir()
		src, sum := writeRandomFile(t, dir, bigFileSize)
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		start := time.Now()
		if err := c.UploadFile(ctx, sb.ID, "/tmp/big.bin", f); err != nil {
			t.Fatalf("UploadFile: %v", err)
		}
		up := time.Since(start)
		start = time.Now()
		r, err := c.DownloadFile(ctx, sb.ID, "/tmp/big.bin")
		if err != nil {
			t.Fatalf("DownloadFile: %v", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, r)
		r.Close()
		if err != nil {
			t.Fatalf("download: %v after %d bytes", err, n)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum || n != bigFileSize {
			t.Fatalf("downloaded %d bytes with sha256 %s; uploaded %d bytes with sha256 %s", n, got, bigFileSize, sum)
		}
		t.Logf("50 MB: upload %v, download %v", up.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		// The sandbox sees the same bytes.
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "sha256sum /tmp/big.bin"})
		if err != nil || !strings.HasPrefix(res.Stdout, sum) {
			t.Errorf("sha256sum in the sandbox: %+v, %v; want %s", res, err, sum)
		}
	})

	t.Run("files_list_remove", func(t *testing.T) {
		if err := c.UploadFile(ctx, sb.ID, "/tmp/listed/a.txt", strings.NewReader("hello\n")); err != nil {
			t.Fatalf("UploadFile: %v", err)
		}
		entries, err := c.ListFiles(ctx, sb.ID, "/tmp/listed")
		if err != nil {
			t.Fatalf("ListFiles: %v", err)
		}
		if len(entries) != 1 || entries[0].Name != "a.txt" || entries[0].Type != sandboxd.FileTypeFile || entries[0].Size != 6 {
			t.Fatalf("ListFiles(/tmp/listed) = %+v; want one 6-byte file a.txt", entries)
		}
		if err := c.RemoveFile(ctx, sb.ID, "/tmp/listed/a.txt"); err != nil {
			t.Fatalf("RemoveFile: %v", err)
		}
		if err := c.RemoveFile(ctx, sb.ID, "/tmp/listed/a.txt"); err != nil {
			t.Errorf("RemoveFile of an absent file: %v; want success", err)
		}
		if entries, err := c.ListFiles(ctx, sb.ID, "/tmp/listed"); err != nil || len(entries) != 0 {
			t.Errorf("after remove: %+v, %v; want an empty directory", entries, err)
		}
		if _, err := c.DownloadFile(ctx, sb.ID, "/tmp/listed/a.txt"); !isNotFound(err) {
			t.Errorf("download of a removed file: %v; want not_found", err)
		}
	})

	t.Run("stop_start", func(t *testing.T) {
		stopped, err := c.StopSandbox(ctx, sb.ID)
		if err != nil || stopped.State != sandboxd.StateStopped {
			t.Fatalf("StopSandbox: %+v, %v; want stopped", stopped, err)
		}
		if _, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"true"}}); err == nil {
			t.Error("exec in a stopped sandbox succeeded")
		} else if !errors.Is(err, sandboxd.ErrConflict) {
			t.Logf("exec in a stopped sandbox: %v (want conflict)", err)
		}
		again, err := c.StopSandbox(ctx, sb.ID)
		if err != nil || again.State != sandboxd.StateStopped {
			t.Errorf("stopping a stopped sandbox: %+v, %v; want stopped, no error", again, err)
		}
		started, err := c.StartSandbox(ctx, sb.ID)
		if err != nil || started.State != sandboxd.StateRunning {
			t.Fatalf("StartSandbox: %+v, %v; want running", started, err)
		}
		res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo $GREETING"})
		if err != nil || res.Stdout != "hello\n" {
			t.Errorf("exec after restart: %+v, %v", res, err)
		}
	})

	t.Run("typed_errors", func(t *testing.T) {
		const missing = "sb-00000000deadbeef"
		if _, err := c.GetSandbox(ctx, missing); !isNotFound(err) {
			t.Errorf("GetSandbox(missing): %v; want not_found", err)
		}
		if _, err := c.Exec(ctx, missing, sandboxd.ExecRequest{Cmd: []string{"true"}}); !isNotFound(err) {
			t.Errorf("Exec(missing): %v; want not_found", err)
		}
		dup := req
		dup.IdempotencyKey = "" // a new create, not a retry
		_, err := c.CreateSandbox(ctx, dup)
		var apiErr *sandboxd.APIError
		if !errors.Is(err, sandboxd.ErrNameConflict) || !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Retryable {
			t.Errorf("create with a taken name: %v; want name_conflict (409, not retryable)", err)
		}
		if _, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, Name: "Not_A_Label"}); !errors.Is(err, sandboxd.ErrInvalidArgument) {
			t.Errorf("create with a bad name: %v; want invalid_argument", err)
		}
		bad := sandboxd.New(d.URL(), "not-a-token", sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 1}))
		if _, err := bad.GetSandbox(ctx, sb.ID); !errors.Is(err, sandboxd.ErrUnauthenticated) {
			t.Errorf("wrong token: %v; want unauthenticated", err)
		}
	})

	t.Run("destroy", func(t *testing.T) {
		if err := c.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatalf("DestroySandbox: %v", err)
		}
		if _, err := c.GetSandbox(ctx, sb.ID); !isNotFound(err) {
			t.Errorf("GetSandbox after destroy: %v; want not_found", err)
		}
		if err := c.DestroySandbox(ctx, sb.ID); !isNotFound(err) {
			t.Errorf("second DestroySandbox: %v; want not_found", err)
		}
		cs, err := nodeContainers(ctx, d.NodeID())
		if err != nil {
			t.Fatal(err)
		}
		if ct, ok := cs[sb.ID]; ok {
			t.Errorf("container of destroyed %s is still there (%s)", sb.ID, ct.State)
		}
		// The name is free again.
		again := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Name: name})
		if again.ID == sb.ID {
			t.Errorf("a new create with the freed name returned the destroyed id %s", sb.ID)
		}
	})
}

// containsAll reports whether every one of want is in got.
func containsAll(got []string, want ...string) bool {
	set := map[string]bool{}
	for _, g := range got {
		set[g] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}
