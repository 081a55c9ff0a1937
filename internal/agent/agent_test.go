package agent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/agent/server"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
)

const testToken = "test-token-0123456789"

// localAgent serves NewHandler on a unix socket in a fresh directory and
// returns the socket path; everything is torn down at the end of the test.
func localAgent(t *testing.T) string { return localAgentB(t) }

func localAgentB(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	procs := process.New(process.Options{OutputGrace: 200 * time.Millisecond})
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(server.NewHandler(server.Config{Token: testToken, Process: procs}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = procs.Shutdown(ctx)
		srv.Close()
	})
	return sock
}

func localClient(t *testing.T) (*agent.Client, string) {
	t.Helper()
	sock := localAgent(t)
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	t.Cleanup(c.Close)
	return c, sock
}

func TestHandler_HealthNeedsNoToken(t *testing.T) {
	sock := localAgent(t)
	resp := rawRequest(t, sock, http.MethodGet, "/health", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health = %d, want 204", resp.StatusCode)
	}
}

func TestHandler_RefusesRequestsWithoutToken(t *testing.T) {
	sock := localAgent(t)
	for _, tc := range []struct{ method, path, token string }{
		{http.MethodPost, "/process.Process/List", ""},
		{http.MethodPost, "/process.Process/List", "wrong"},
		{http.MethodPost, "/process.Process/List", testToken + "x"},
		{http.MethodGet, "/files?path=/etc/hostname", ""},
		{http.MethodPost, "/files?path=/tmp/x", ""},
		{http.MethodPost, "/filesystem.Filesystem/Stat", ""},
		{http.MethodGet, "/nonexistent", ""},
	} {
		resp := rawRequest(t, sock, tc.method, tc.path, tc.token)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthenticated"`) {
			t.Errorf("%s %s token %q: %d %s, want 401 unauthenticated", tc.method, tc.path, tc.token, resp.StatusCode, body)
		}
	}
	// The Connect client sees the code.
	c := agent.NewClient(agent.UnixDialer(sock), "wrong")
	defer c.Close()
	_, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"true"}})
	if got := connect.CodeOf(err); got != connect.CodeUnauthenticated {
		t.Errorf("Exec with a wrong token: code %v (%v), want unauthenticated", got, err)
	}
}

func rawRequest(t *testing.T, sock, method, path, token string) *http.Response {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://agent"+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(agent.HeaderToken, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// commandSuite is the behaviour of Client command helpers, run against an
// in-process agent here and against a real container in the docker tests.
// scratch is a directory the agent may write to.
func commandSuite(t *testing.T, c *agent.Client, scratch string, lacks ...suiteLack) {
	t.Run("Exec_StdoutStderrExitCode", func(t *testing.T) {
		t.Parallel()
		res, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 7 || !res.Exited || res.Truncated {
			t.Errorf("got %+v", res)
		}
	})
	t.Run("Exec_EnvCwdStdin", func(t *testing.T) {
		t.Parallel()
		res, err := c.Exec(t.Context(), agent.ExecRequest{
			Cmd: []string{"/bin/sh", "-c", `echo "$GREETING"; pwd; cat`},
			Env: map[string]string{"GREETING": "hi there"}, Cwd: "/tmp", Stdin: []byte("from stdin"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(res.Stdout), "hi there\n/tmp\nfrom stdin"; got != want || res.ExitCode != 0 {
			t.Errorf("stdout %q exit %d, want %q, 0", got, res.ExitCode, want)
		}
	})
	t.Run("Exec_Truncated", func(t *testing.T) {
		t.Parallel()
		res, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"head", "-c", "100000", "/dev/zero"}, MaxOutput: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Stdout) != 1000 || !res.Truncated || res.ExitCode != 0 {
			t.Errorf("%d bytes, truncated %v, exit %d; want 1000, true, 0", len(res.Stdout), res.Truncated, res.ExitCode)
		}
	})
	t.Run("Exec_Timeout", func(t *testing.T) {
		t.Parallel()
		_, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
		if got := connect.CodeOf(err); got != connect.CodeDeadlineExceeded {
			t.Errorf("code %v (%v), want deadline_exceeded", got, err)
		}
	})
	t.Run("Exec_UnknownCommand", func(t *testing.T) {
		t.Parallel()
		_, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"no-such-command-xyz"}})
		if got := connect.CodeOf(err); got != connect.CodeInvalidArgument {
			t.Errorf("code %v (%v), want invalid_argument", got, err)
		}
	})
	t.Run("StartProcess_SignalsAndReattach", func(t *testing.T) {
		t.Parallel()
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			tag := "sleeper-" + sig.String()
			p, err := c.StartProcess(t.Context(), agent.StartRequest{Cmd: []string{"sleep", "60"}, Tag: tag, Lifetime: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			p.Close() // detach; the process keeps running
			q, err := c.ConnectProcess(t.Context(), agent.Attach{Tag: tag})
			if err != nil {
				t.Fatal(err)
			}
			if q.PID() != p.PID() {
				t.Fatalf("reattached to pid %d, want %d", q.PID(), p.PID())
			}
			if err := q.Signal(t.Context(), sig); err != nil {
				t.Fatal(err)
			}
			st, err := q.Wait()
			q.Close()
			if err != nil {
				t.Fatal(err)
			}
			if st.Exited || st.Code != -1 || !strings.HasPrefix(st.Status, "signal: ") {
				t.Errorf("%v: exit %+v", sig, st)
			}
		}
	})
	t.Run("StartProcess_PTY", func(t *testing.T) {
		t.Parallel()
		skipIfLacking(t, lacks, lackPTY)
		p, err := c.StartProcess(t.Context(), agent.StartRequest{
			Cmd: []string{"/bin/sh", "-c", "read x; stty size"}, PTY: &agent.Size{Cols: 80, Rows: 24},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Resize(t.Context(), agent.Size{Cols: 132, Rows: 43}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendInput(t.Context(), []byte("\n")); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for {
			o, err := p.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Stream != agent.PTY {
				t.Errorf("output on stream %v, want PTY", o.Stream)
			}
			out.Write(o.Data)
		}
		if !strings.Contains(out.String(), "43 132") {
			t.Errorf("pty output %q, want the resized size 43 132", out.String())
		}
	})
	t.Run("UploadDownload", func(t *testing.T) {
		t.Parallel()
		data := bytes.Repeat([]byte("sandboxd\n"), 300000) // 2.7 MB
		path := scratch + "/sub/file.txt"
		if err := c.Upload(t.Context(), path, bytes.NewReader(data), ""); err != nil {
			t.Fatal(err)
		}
		rc, err := c.Download(t.Context(), path, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("downloaded %d bytes (%v), want the %d uploaded", len(got), err, len(data))
		}
		_, err = c.Download(t.Context(), scratch+"/missing", "")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("FilesystemStat", func(t *testing.T) {
		t.Parallel()
		req := connect.NewRequest(&fsrpc.StatRequest{Path: "/"})
		resp, err := c.Filesystem().Stat(t.Context(), req)
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if resp.Msg.GetEntry().GetType() != fsrpc.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("Stat / = %v, want a directory", resp.Msg.GetEntry())
		}
	})
	t.Run("ListRaw", func(t *testing.T) {
		t.Parallel()
		if _, err := c.Process().List(t.Context(), connect.NewRequest(&rpc.ListRequest{})); err != nil {
			t.Errorf("List: %v", err)
		}
	})
}

// suiteLack is a feature of the command suite a sandbox does not have,
// with the reason, so the subtest that needs it skips saying why.
type suiteLack struct{ feature, why string }

const lackPTY = "pty"

func skipIfLacking(t *testing.T, lacks []suiteLack, feature string) {
	t.Helper()
	for _, l := range lacks {
		if l.feature == feature {
			t.Skip("skipping: " + l.why)
		}
	}
}

func TestClient_Local(t *testing.T) {
	c, _ := localClient(t)
	commandSuite(t, c, t.TempDir())
}

// Configure's variables reach every process started after it, under what the
// request sets; a second call replaces the first; a bad body changes
// nothing.
func TestClient_ConfigureEnvReachesLaterProcesses(t *testing.T) {
	c, sock := localClient(t)
	echo := func(env map[string]string) string {
		t.Helper()
		res, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", `echo "${A-unset} ${B-unset}"`}, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if err := c.Configure(t.Context(), agent.Configuration{Env: map[string]string{"A": "secret", "B": "b"}}); err != nil {
		t.Fatal(err)
	}
	if got := echo(map[string]string{"B": "request"}); got != "secret request\n" {
		t.Errorf("after SetEnv, with B in the request: %q", got)
	}
	if err := c.Configure(t.Context(), agent.Configuration{Env: map[string]string{"B": "only"}}); err != nil {
		t.Fatal(err)
	}
	if got := echo(nil); got != "unset only\n" {
		t.Errorf("after a second SetEnv: %q, want it to replace the first", got)
	}
	for _, bad := range []agent.Configuration{
		{Env: map[string]string{"A=B": "x"}}, {Env: map[string]string{"": "x"}},
		{Env: map[string]string{"A": "nul\x00"}}, {NewToken: "short"},
	} {
		var he *agent.HTTPError
		if err := c.Configure(t.Context(), bad); !errors.As(err, &he) || he.StatusCode != http.StatusBadRequest {
			t.Errorf("Configure(%+v) = %v, want a 400", bad, err)
		}
	}
	if got := echo(nil); got != "unset only\n" {
		t.Errorf("after refused calls: %q, want them to change nothing", got)
	}
	if resp := rawRequest(t, sock, http.MethodPut, server.PathConfig, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("PUT %s without the token = %d, want 401", server.PathConfig, resp.StatusCode)
	}
}

// The Transport facades proxy through never reaches the daemon's own
// routes, however the path is spelled: a caller of a facade cannot replace
// a sandbox's secret env.
func TestClient_TransportRefusesTheDaemonsRoutes(t *testing.T) {
	c, _ := localClient(t)
	if err := c.Configure(t.Context(), agent.Configuration{Env: map[string]string{"A": "secret"}}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: c.Transport()}
	for _, p := range []string{server.PathConfig, "/sandboxd//config", "/x/../sandboxd/config", "/sandbox%64/config"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, agent.BaseURL+p, strings.NewReader(`{"env":{"A":"mine"}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("PUT %s through Transport = %d, want 404", p, resp.StatusCode)
		}
	}
	res, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", `echo "$A"`}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "secret\n" {
		t.Errorf("A = %q after the attempts, want the daemon's value", res.Stdout)
	}
	// Everything else still goes through.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, agent.BaseURL+"/health", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health through Transport = %d", resp.StatusCode)
	}
}

// A new token takes over from the next request: the old one is refused,
// processes keep their environment, and a client with the new token works.
func TestClient_ConfigureRotatesTheToken(t *testing.T) {
	c, sock := localClient(t)
	const fresh = "fresh-token-0123456789abcdef"
	if err := c.Configure(t.Context(), agent.Configuration{Env: map[string]string{"A": "a"}, NewToken: fresh}); err != nil {
		t.Fatal(err)
	}
	if resp := rawRequest(t, sock, http.MethodPost, "/process.Process/List", testToken); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old token after the rotation: %d, want 401", resp.StatusCode)
	}
	if _, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"true"}}); err == nil {
		t.Error("a client with the old token still runs commands")
	}
	nc := agent.NewClient(agent.UnixDialer(sock), fresh)
	t.Cleanup(nc.Close)
	res, err := nc.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", `echo "$A"`}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "a\n" {
		t.Errorf("with the new token: %q", res.Stdout)
	}
}

// WithToken's client takes the new token over the old client's
// connection: after a rotation it runs commands without dialing, and the
// old client stays refused.
func TestClient_WithTokenKeepsTheConnection(t *testing.T) {
	sock := localAgent(t)
	var dials atomic.Int64
	dial := agent.UnixDialer(sock)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { dials.Add(1); return dial(ctx) }, testToken)
	const fresh = "fresh-token-0123456789abcdef"
	if err := c.Configure(t.Context(), agent.Configuration{Env: map[string]string{"A": "a"}, NewToken: fresh}); err != nil {
		t.Fatal(err)
	}
	nc := c.WithToken(fresh)
	t.Cleanup(nc.Close)
	res, err := nc.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", `echo "$A"`}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "a\n" {
		t.Errorf("with the new token: %q", res.Stdout)
	}
	if got := dials.Load(); got != 1 {
		t.Errorf("dials = %d, want 1 (the configuration's connection, reused)", got)
	}
	if nc.Token() != fresh {
		t.Errorf("Token() = %q, want the new one", nc.Token())
	}
	if _, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"true"}}); err == nil {
		t.Error("the old client still runs commands over the shared connection")
	}
}

// The client's KeepOutput and Replay reach a process after its end; the
// same request through the Transport facades proxy through has the
// daemon's headers dropped, so a facade's caller cannot make a process
// keep output.
func TestClient_KeptOutputIsTheDaemonsAlone(t *testing.T) {
	c, _ := localClient(t)
	run := func(p *agent.Process) uint32 {
		t.Helper()
		defer p.Close()
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		return p.PID()
	}
	p, err := c.StartProcess(t.Context(), agent.StartRequest{Cmd: []string{"/bin/echo", "kept"}, KeepOutput: 1024})
	if err != nil {
		t.Fatal(err)
	}
	kept := run(p)
	r, err := c.ConnectProcess(t.Context(), agent.Attach{PID: kept, Replay: true})
	if err != nil {
		t.Fatalf("replaying an ended process that kept output: %v", err)
	}
	var out bytes.Buffer
	for {
		o, err := r.Recv()
		if err != nil {
			break
		}
		out.Write(o.Data)
	}
	r.Close()
	if out.String() != "kept\n" {
		t.Errorf("replay = %q, want the kept output", out.String())
	}

	via := processconnect.NewProcessClient(&http.Client{Transport: c.Transport()}, agent.BaseURL)
	req := connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "/bin/echo", Args: []string{"x"}}})
	req.Header().Set("X-Sandboxd-Keep-Output", "1024")
	st, err := via.Start(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for st.Receive() {
		if s := st.Msg().GetEvent().GetStart(); s != nil {
			pid = s.GetPid()
		}
	}
	st.Close()
	if pid == 0 {
		t.Fatalf("start through Transport: %v", st.Err())
	}
	if _, err := c.ConnectProcess(t.Context(), agent.Attach{PID: pid, Replay: true}); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("a process started through Transport with the keep header kept its output (replay: %v)", err)
	}
}

// Replayed closes once the replay is read, though the process prints
// nothing more: a reattaching client knows its view is whole without
// waiting for quiet.
func TestClient_ReplayedMarksTheEndOfTheReplay(t *testing.T) {
	c, _ := localClient(t)
	p, err := c.StartProcess(t.Context(), agent.StartRequest{Cmd: []string{"/bin/sh", "-c", "echo one; echo two; read x"}, Stdin: true, KeepOutput: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var live bytes.Buffer
	for live.String() != "one\ntwo\n" {
		o, err := p.Recv()
		if err != nil {
			t.Fatalf("live output %q: %v", live.String(), err)
		}
		live.Write(o.Data)
	}
	if _, ok := <-p.Replayed(); ok {
		t.Fatal("Replayed of a stream without replay is not closed")
	}
	r, err := c.ConnectProcess(t.Context(), agent.Attach{PID: p.PID(), Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got bytes.Buffer
	recvd := make(chan error, 1)
	go func() {
		for {
			o, err := r.Recv()
			if err != nil {
				recvd <- err
				return
			}
			got.Write(o.Data)
		}
	}()
	select {
	case <-r.Replayed():
	case err := <-recvd:
		t.Fatalf("stream ended before the replay's end: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Replayed not closed 30 s after the replay")
	}
	if got.String() != "one\ntwo\n" {
		t.Errorf("at the replay's end Recv returned %q, want the kept output", got.String())
	}
	if err := p.SendInput(t.Context(), []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; !errors.Is(err, io.EOF) {
		t.Errorf("after the exit: %v, want EOF", err)
	}
}
