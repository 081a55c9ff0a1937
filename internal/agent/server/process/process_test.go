package process_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

func TestStart_StdoutAndStderrApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	r := e.run(t, startOpts{}, "/bin/sh", "-c", "echo out; echo err >&2; echo out2; exit 3")
	if got, want := r.stdout.String(), "out\nout2\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := r.stderr.String(), "err\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	want := &rpc.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: ptr("exit status 3")}
	if diff := cmp.Diff(want, r.end, cmpProto); diff != "" {
		t.Errorf("end (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"start", "data", "end"}, r.order); diff != "" {
		t.Errorf("event order (-want +got):\n%s", diff)
	}
}

func TestStart_ExitZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	r := e.run(t, startOpts{}, "true")
	want := &rpc.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}
	if diff := cmp.Diff(want, r.end, cmpProto); diff != "" {
		t.Errorf("end (-want +got):\n%s", diff)
	}
}

func TestStart_Env(t *testing.T) {
	t.Setenv("SANDBOXD_AGENT_SECRET_TEST", "leak")
	e := newEnv(t, process.Options{Env: map[string]string{"FROM_AGENT": "a", "OVERRIDE": "agent"}})
	r := e.run(t, startOpts{envs: map[string]string{"FOO": "bar baz", "OVERRIDE": "request"}},
		"/bin/sh", "-c", `echo "$FOO|$FROM_AGENT|$OVERRIDE|$HOME|$USER|$LOGNAME|${PATH:+path}|${SANDBOXD_AGENT_SECRET_TEST:-unset}"`)
	if got, want := r.stdout.String(), "bar baz|a|request|/root|root|root|path|unset\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}

func TestStart_Cwd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	r := e.run(t, startOpts{cwd: &e.dir}, "pwd")
	if got, want := r.stdout.String(), e.dir+"\n"; got != want {
		t.Errorf("pwd = %q, want %q", got, want)
	}
	r = e.run(t, startOpts{}, "pwd")
	if got, want := r.stdout.String(), "/root\n"; got != want {
		t.Errorf("default cwd = %q, want the home %q", got, want)
	}
}

func TestStart_InvalidArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	for name, req := range map[string]*rpc.StartRequest{
		"missing cwd":     {Process: &rpc.ProcessConfig{Cmd: "pwd", Cwd: ptr("/does/not/exist")}},
		"unknown command": {Process: &rpc.ProcessConfig{Cmd: "no-such-command-xyz"}},
		"empty command":   {Process: &rpc.ProcessConfig{}},
		"env name with =": {Process: &rpc.ProcessConfig{Cmd: "env", Envs: map[string]string{"A=B": "x"}}},
		"empty env name":  {Process: &rpc.ProcessConfig{Cmd: "env", Envs: map[string]string{"": "x"}}},
		"NUL in env":      {Process: &rpc.ProcessConfig{Cmd: "env", Envs: map[string]string{"A": "x\x00y"}}},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := e.client.Start(t.Context(), connect.NewRequest(req))
			if err == nil {
				st.Receive()
				err = st.Err()
				st.Close()
			}
			if got := connect.CodeOf(err); got != connect.CodeInvalidArgument {
				t.Errorf("code = %v (%v), want invalid_argument", got, err)
			}
		})
	}
}

func TestStart_StdinThenClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	st := e.start(t.Context(), t, startOpts{stdin: ptr(true)}, "cat")
	defer st.Close()
	next := events(st)
	pid := firstPID(t, next)
	for _, s := range []string{"hello ", "world"} {
		_, err := e.client.SendInput(t.Context(), connect.NewRequest(&rpc.SendInputRequest{
			Process: pidSel(pid), Input: &rpc.ProcessInput{Input: &rpc.ProcessInput_Stdin{Stdin: []byte(s)}},
		}))
		if err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	if _, err := e.client.CloseStdin(t.Context(), connect.NewRequest(&rpc.CloseStdinRequest{Process: pidSel(pid)})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	r := collect(t, prepend(pid, next))
	if got, want := r.stdout.String(), "hello world"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if r.end.GetExitCode() != 0 {
		t.Errorf("exit code %d", r.end.GetExitCode())
	}
}

func TestSendInput_StdinDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	st := e.start(t.Context(), t, startOpts{}, "sleep", "5")
	defer st.Close()
	pid := firstPID(t, events(st))
	_, err := e.client.SendInput(t.Context(), connect.NewRequest(&rpc.SendInputRequest{
		Process: pidSel(pid), Input: &rpc.ProcessInput{Input: &rpc.ProcessInput_Stdin{Stdin: []byte("x")}},
	}))
	if got := connect.CodeOf(err); got != connect.CodeFailedPrecondition {
		t.Errorf("code = %v (%v), want failed_precondition", got, err)
	}
}

// prepend makes a stream whose start event was consumed acceptable to
// collect again.
func prepend(pid uint32, next func() (*rpc.ProcessEvent, error)) func() (*rpc.ProcessEvent, error) {
	sent := false
	return func() (*rpc.ProcessEvent, error) {
		if !sent {
			sent = true
			return &rpc.ProcessEvent{Event: &rpc.ProcessEvent_Start{Start: &rpc.ProcessEvent_StartEvent{Pid: pid}}}, nil
		}
		return next()
	}
}

func TestSendSignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig    rpc.Signal
		status string
	}{
		{rpc.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{rpc.Signal_SIGNAL_SIGKILL, "signal: killed"},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			e := newEnv(t, process.Options{})
			// A shell that runs a child: the signal must reach the group.
			st := e.start(t.Context(), t, startOpts{}, "/bin/sh", "-c", "sleep 100; echo not reached")
			defer st.Close()
			next := events(st)
			pid := firstPID(t, next)
			begin := time.Now()
			if _, err := e.client.SendSignal(t.Context(), connect.NewRequest(&rpc.SendSignalRequest{Process: pidSel(pid), Signal: tc.sig})); err != nil {
				t.Fatalf("SendSignal: %v", err)
			}
			r := collect(t, prepend(pid, next))
			if r.end.GetExited() || r.end.GetStatus() != tc.status || r.end.GetExitCode() != -1 {
				t.Errorf("end = %v, want status %q, exited false, code -1", r.end, tc.status)
			}
			if d := time.Since(begin); d > 2*time.Second {
				t.Errorf("end came %s after the signal: the group was not signalled", d)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	ctx := t.Context()
	_, err := e.client.SendSignal(ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pidSel(999999), Signal: rpc.Signal_SIGNAL_SIGKILL}))
	if got := connect.CodeOf(err); got != connect.CodeNotFound {
		t.Errorf("SendSignal code = %v, want not_found", got)
	}
	st, err := e.client.Connect(ctx, connect.NewRequest(&rpc.ConnectRequest{Process: tagSel("nope")}))
	if err == nil {
		st.Receive()
		err = st.Err()
		st.Close()
	}
	if got := connect.CodeOf(err); got != connect.CodeNotFound {
		t.Errorf("Connect code = %v, want not_found", got)
	}
}

func TestConnect_ReattachByPIDAndTag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	gate := filepath.Join(e.dir, "gate")
	ctx, cancel := context.WithCancel(t.Context())
	st := e.start(ctx, t, startOpts{tag: ptr("bg")}, "/bin/sh", "-c",
		`echo early; while [ ! -e "$0" ]; do sleep 0.02; done; echo late; echo late-err >&2`, gate)
	pid := firstPID(t, events(st))
	// The first client goes away; the process keeps running.
	cancel()
	st.Close()
	time.Sleep(100 * time.Millisecond)
	if !e.listed(t, pid) {
		t.Fatalf("process %d gone after its Start client left", pid)
	}

	byPID, err := e.client.Connect(t.Context(), connect.NewRequest(&rpc.ConnectRequest{Process: pidSel(pid)}))
	if err != nil {
		t.Fatal(err)
	}
	defer byPID.Close()
	byTag, err := e.client.Connect(t.Context(), connect.NewRequest(&rpc.ConnectRequest{Process: tagSel("bg")}))
	if err != nil {
		t.Fatal(err)
	}
	defer byTag.Close()
	nextPID, nextTag := events(byPID), events(byTag)
	if got := firstPID(t, nextPID); got != pid {
		t.Fatalf("Connect by pid: start pid %d, want %d", got, pid)
	}
	if got := firstPID(t, nextTag); got != pid {
		t.Fatalf("Connect by tag: start pid %d, want %d", got, pid)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, next := range map[string]func() (*rpc.ProcessEvent, error){"pid": nextPID, "tag": nextTag} {
		r := collect(t, prepend(pid, next))
		if r.stdout.String() != "late\n" || r.stderr.String() != "late-err\n" || r.end.GetExitCode() != 0 {
			t.Errorf("by %s: stdout %q stderr %q end %v; want late, late-err, 0", name, r.stdout.String(), r.stderr.String(), r.end)
		}
	}
	e.waitGone(t, pid)
}

func TestList_ManyTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	tags := []string{"a", "b", "c", "d", "e", "f"}
	pids := map[string]uint32{}
	for _, tag := range tags {
		st := e.start(t.Context(), t, startOpts{tag: ptr(tag)}, "sleep", "3600")
		pids[tag] = firstPID(t, events(st))
		st.Close()
	}
	resp, err := e.client.List(t.Context(), connect.NewRequest(&rpc.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, p := range resp.Msg.GetProcesses() {
		got[p.GetTag()] = p.GetPid()
		if p.GetConfig().GetCmd() != "sleep" {
			t.Errorf("config of %d = %v", p.GetPid(), p.GetConfig())
		}
	}
	if diff := cmp.Diff(pids, got); diff != "" {
		t.Fatalf("List tags (-want +got):\n%s", diff)
	}
	// Every tag, in any position, selects its own process.
	for _, tag := range []string{"f", "c", "a", "e"} {
		if _, err := e.client.SendSignal(t.Context(), connect.NewRequest(&rpc.SendSignalRequest{Process: tagSel(tag), Signal: rpc.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatalf("SendSignal tag %s: %v", tag, err)
		}
		e.waitGone(t, pids[tag])
	}
	for _, tag := range []string{"b", "d"} {
		if !e.listed(t, pids[tag]) {
			t.Errorf("tag %s (pid %d) was killed by a signal for another tag", tag, pids[tag])
		}
	}
}

func TestStart_PTYOutputAndResize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	st := e.start(t.Context(), t, startOpts{pty: &rpc.PTY{Size: &rpc.PTY_Size{Cols: 80, Rows: 24}}},
		"/bin/sh", "-c", "stty size; read line; stty size; [ -t 0 ] && echo tty")
	defer st.Close()
	next := events(st)
	pid := firstPID(t, next)
	var out bytes.Buffer
	for !strings.Contains(out.String(), "24 80") {
		ev, err := next()
		if err != nil {
			t.Fatalf("stream: %v; output so far %q", err, out.String())
		}
		out.Write(ev.GetData().GetPty())
		if ev.GetData().GetStdout() != nil {
			t.Fatal("PTY output arrived as stdout")
		}
	}
	if _, err := e.client.Update(t.Context(), connect.NewRequest(&rpc.UpdateRequest{
		Process: pidSel(pid), Pty: &rpc.PTY{Size: &rpc.PTY_Size{Cols: 100, Rows: 30}},
	})); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := e.client.SendInput(t.Context(), connect.NewRequest(&rpc.SendInputRequest{
		Process: pidSel(pid), Input: &rpc.ProcessInput{Input: &rpc.ProcessInput_Pty{Pty: []byte("\n")}},
	})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	r := collect(t, prepend(pid, next))
	rest := strings.ReplaceAll(r.pty.String(), "\r", "")
	if !strings.Contains(rest, "30 100\n") || !strings.Contains(rest, "tty\n") {
		t.Errorf("after resize: pty output %q, want the new size and a tty", rest)
	}
	// Pipe operations on a terminal process are refused.
	_, err := e.client.CloseStdin(t.Context(), connect.NewRequest(&rpc.CloseStdinRequest{Process: pidSel(pid)}))
	if got := connect.CodeOf(err); got != connect.CodeFailedPrecondition && got != connect.CodeNotFound {
		t.Errorf("CloseStdin on PTY: code %v", got)
	}
}

func TestStart_LargeOutputNothingLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	const size = 10 << 20
	data := make([]byte, size)
	rand.Read(data)
	file := filepath.Join(e.dir, "big")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, startOpts{}, "/bin/sh", "-c", `cat "$0"; cat "$0" >&2`, file)
	want := sha256.Sum256(data)
	if got := sha256.Sum256(r.stdout.Bytes()); got != want || r.stdout.Len() != size {
		t.Errorf("stdout: %d bytes, checksum mismatch=%v; want %d bytes", r.stdout.Len(), got != want, size)
	}
	if got := sha256.Sum256(r.stderr.Bytes()); got != want || r.stderr.Len() != size {
		t.Errorf("stderr: %d bytes, checksum mismatch=%v; want %d bytes", r.stderr.Len(), got != want, size)
	}
}

func TestStart_Keepalive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	r := e.run(t, startOpts{keepalive: "1"}, "sleep", "2.5")
	if r.keepalives < 2 {
		t.Errorf("%d keepalives in 2.5 s at 1 s intervals, want at least 2", r.keepalives)
	}
}

func TestStart_LifetimeFromTimeoutHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	st := e.start(ctx, t, startOpts{}, "sleep", "3600")
	pid := firstPID(t, events(st))
	st.Close()
	e.waitGone(t, pid)
}

func TestStart_UnwatchedOutputDoesNotBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	done := filepath.Join(e.dir, "done")
	ctx, cancel := context.WithCancel(t.Context())
	st := e.start(ctx, t, startOpts{}, "/bin/sh", "-c", `head -c 20000000 /dev/zero; touch "$0"`, done)
	pid := firstPID(t, events(st))
	cancel()
	st.Close()
	e.waitGone(t, pid)
	if _, err := os.Stat(done); err != nil {
		t.Errorf("process did not finish writing: %v", err)
	}
}

func TestStart_DescendantHoldingOutputIsCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{OutputGrace: 200 * time.Millisecond})
	begin := time.Now()
	r := e.run(t, startOpts{}, "/bin/sh", "-c", "sleep 30 & echo bye")
	if r.stdout.String() != "bye\n" || r.end.GetExitCode() != 0 {
		t.Errorf("stdout %q end %v", r.stdout.String(), r.end)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("end took %s: a descendant holding stdout delayed it", d)
	}
}

// A terminal's master is read by the runtime's poller, so that the grace
// cuts a reader blocked on it: a descendant keeping the terminal open (and
// gVisor, whose master never reports the hang-up of its last holder)
// otherwise holds the end event until the descendant exits.
func TestStart_DescendantHoldingTerminalIsCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{OutputGrace: 200 * time.Millisecond})
	begin := time.Now()
	r := e.run(t, startOpts{pty: &rpc.PTY{Size: &rpc.PTY_Size{Cols: 80, Rows: 24}}},
		// A session of its own: the hang-up of the shell's exit misses it.
		"/bin/sh", "-c", "setsid sleep 30 & sleep 0.2; echo bye")
	if got := strings.ReplaceAll(r.pty.String(), "\r", ""); got != "bye\n" || r.end.GetExitCode() != 0 {
		t.Errorf("pty output %q end %v, want bye and exit 0", got, r.end)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("end took %s: a descendant holding the terminal delayed it", d)
	}
}

func TestStart_AsUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("switching users needs root")
	}
	e := newEnv(t, process.Options{})
	users, home := testUsers(t, e.dir)
	e = newEnv(t, process.Options{Users: users})
	r := e.run(t, startOpts{user: "alice"}, "/bin/sh", "-c", `id -u; id -g; id -G; echo "$HOME $USER"; pwd`)
	want := "4242\n4242\n4242\n" + home + " alice\n" + home + "\n"
	if got := r.stdout.String(); got != want {
		t.Errorf("as alice:\n got %q\nwant %q", got, want)
	}
	st, err := e.client.Start(t.Context(), func() *connect.Request[rpc.StartRequest] {
		req := connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "true"}})
		req.Header().Set("Authorization", "Basic Ym9iOg==") // bob:
		return req
	}())
	if err == nil {
		st.Receive()
		err = st.Err()
		st.Close()
	}
	if got := connect.CodeOf(err); got != connect.CodeInvalidArgument {
		t.Errorf("unknown user: code %v, want invalid_argument", got)
	}
}

func TestShutdown_StopsProcessesAndRefusesNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	st := e.start(t.Context(), t, startOpts{}, "sleep", "30")
	next := events(st)
	pid := firstPID(t, next)
	defer st.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.svc.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r := collect(t, prepend(pid, next))
	if r.end.GetStatus() != "signal: terminated" {
		t.Errorf("end %v, want terminated", r.end)
	}
	st2, err := e.client.Start(t.Context(), connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "true"}}))
	if err == nil {
		st2.Receive()
		err = st2.Err()
		st2.Close()
	}
	if got := connect.CodeOf(err); got != connect.CodeUnavailable {
		t.Errorf("Start after Shutdown: code %v, want unavailable", got)
	}
}
