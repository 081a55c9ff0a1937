package process_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one process service behind a real HTTP server on a unix socket,
// and a Connect client using the JSON codec, as E2B's SDKs do.
type env struct {
	svc    *process.Service
	client processconnect.ProcessClient
	dir    string // scratch directory
}

func newEnv(t *testing.T, o process.Options) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // other users run in it too
		t.Fatal(err)
	}
	if o.OutputGrace == 0 {
		o.OutputGrace = 300 * time.Millisecond
	}
	svc := process.New(o)
	mux := http.NewServeMux()
	svc.Handle(mux)
	ln, err := net.Listen("unix", filepath.Join(dir, "a.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = ln
	srv.Start()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ln.Addr().String())
	}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		tr.CloseIdleConnections()
		srv.Close()
	})
	return &env{
		svc:    svc,
		client: processconnect.NewProcessClient(&http.Client{Transport: tr}, "http://agent", connect.WithProtoJSON()),
		dir:    dir,
	}
}

// result is everything a stream delivered.
type result struct {
	pid        uint32
	stdout     bytes.Buffer
	stderr     bytes.Buffer
	pty        bytes.Buffer
	keepalives int
	end        *rpc.ProcessEvent_EndEvent
	order      []string // event kinds in arrival order, data collapsed
}

func events[T interface{ GetEvent() *rpc.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}) func() (*rpc.ProcessEvent, error) {
	return func() (*rpc.ProcessEvent, error) {
		if !s.Receive() {
			if err := s.Err(); err != nil {
				return nil, err
			}
			return nil, errors.New("stream ended without an end event")
		}
		return s.Msg().GetEvent(), nil
	}
}

// collect reads events until the end event and checks their order.
func collect(t *testing.T, next func() (*rpc.ProcessEvent, error)) *result {
	t.Helper()
	r := &result{}
	for r.end == nil {
		ev, err := next()
		if err != nil {
			t.Fatalf("stream: %v (so far: %v)", err, r.order)
		}
		kind := ""
		switch e := ev.GetEvent().(type) {
		case *rpc.ProcessEvent_Start:
			kind = "start"
			r.pid = e.Start.GetPid()
		case *rpc.ProcessEvent_Data:
			kind = "data"
			r.stdout.Write(e.Data.GetStdout())
			r.stderr.Write(e.Data.GetStderr())
			r.pty.Write(e.Data.GetPty())
		case *rpc.ProcessEvent_Keepalive:
			kind = "keepalive"
			r.keepalives++
		case *rpc.ProcessEvent_End:
			kind = "end"
			r.end = e.End
		}
		if len(r.order) == 0 && kind != "start" {
			t.Fatalf("first event is %s, want start", kind)
		}
		if n := len(r.order); n == 0 || r.order[n-1] != kind || kind != "data" {
			r.order = append(r.order, kind)
		}
	}
	return r
}

type startOpts struct {
	envs      map[string]string
	cwd       *string
	stdin     *bool
	tag       *string
	pty       *rpc.PTY
	user      string
	keepalive string
	keep      string // X-Sandboxd-Keep-Output
}

func (e *env) start(ctx context.Context, t *testing.T, o startOpts, cmd string, args ...string) *connect.ServerStreamForClient[rpc.StartResponse] {
	t.Helper()
	stdin := o.stdin
	if stdin == nil {
		no := false
		stdin = &no
	}
	req := connect.NewRequest(&rpc.StartRequest{
		Process: &rpc.ProcessConfig{Cmd: cmd, Args: args, Envs: o.envs, Cwd: o.cwd},
		Stdin:   stdin, Tag: o.tag, Pty: o.pty,
	})
	if o.user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(o.user+":")))
	}
	if o.keepalive != "" {
		req.Header().Set("Keepalive-Ping-Interval", o.keepalive)
	}
	if o.keep != "" {
		req.Header().Set("X-Sandboxd-Keep-Output", o.keep)
	}
	st, err := e.client.Start(ctx, req)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return st
}

// run starts a command and collects its events to the end.
func (e *env) run(t *testing.T, o startOpts, cmd string, args ...string) *result {
	t.Helper()
	st := e.start(t.Context(), t, o, cmd, args...)
	defer st.Close()
	return collect(t, events(st))
}

// firstPID reads the start event of a stream.
func firstPID(t *testing.T, next func() (*rpc.ProcessEvent, error)) uint32 {
	t.Helper()
	ev, err := next()
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if ev.GetStart() == nil {
		t.Fatalf("first event %v, want start", ev)
	}
	return ev.GetStart().GetPid()
}

func pidSel(pid uint32) *rpc.ProcessSelector {
	return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *rpc.ProcessSelector {
	return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Tag{Tag: tag}}
}

func ptr[T any](v T) *T { return &v }

// waitGone polls List until pid is no longer listed, failing t after
// testenv.Deadline. Tests that check a process is ended early (a kill, a
// lifetime) run one that would otherwise outlive that deadline.
func (e *env) waitGone(t *testing.T, pid uint32) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("process %d to be gone from List", pid), func() error {
		if e.listed(t, pid) {
			return errors.New("still listed")
		}
		return nil
	})
}

func (e *env) listed(t *testing.T, pid uint32) bool {
	t.Helper()
	resp, err := e.client.List(t.Context(), connect.NewRequest(&rpc.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, p := range resp.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return true
		}
	}
	return false
}

// testUsers writes a passwd file with root and alice (uid 4242, home in
// dir) and returns a directory over it.
func testUsers(t *testing.T, dir string) (*account.Directory, string) {
	t.Helper()
	home := filepath.Join(dir, "alice")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(dir, "passwd")
	content := "root:x:0:0:root:/root:/bin/sh\nalice:x:4242:4242::" + home + ":/bin/sh\n"
	if err := os.WriteFile(passwd, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return account.NewDirectory(passwd), home
}
