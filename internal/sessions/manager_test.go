package sessions_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/agent/server"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	"github.com/sandboxd/sandboxd/internal/sessions"
)

const testToken = "test-token-0123456789"

// oneAgent is an Agents of one sandbox whose agent runs in this process
// (on a unix socket, processes on this host): what a daemon restart leaves
// running is what this agent still runs when a new Manager starts.
type oneAgent struct{ c *agent.Client }

func (a oneAgent) Agent(context.Context, string) (*agent.Client, error) { return a.c, nil }

func localAgent(t *testing.T) oneAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "sess") // short: socket paths are limited
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
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = procs.Shutdown(ctx)
		srv.Close()
	})
	return oneAgent{c}
}

func needBash(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash")
	}
}

// TestManager_ShellRebuiltAfterRestart: a Manager that stops (the daemon
// going down) leaves its shells running in the agent; a new one finds the
// shell, rebuilds its commands (text, exit code, logs) from the output the
// agent kept, and follows a command that was running across the restart
// to its end.
func TestManager_ShellRebuiltAfterRestart(t *testing.T) {
	needBash(t)
	a := localAgent(t)
	tgt := sessions.Target{SandboxID: "sb-1", Cwd: t.TempDir()}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	m1 := sessions.New(sessions.Options{Agents: a})
	if err := m1.CreateShell(ctx, tgt, "s1"); err != nil {
		t.Fatal(err)
	}
	first, err := m1.Exec(ctx, tgt, "s1", "echo first; echo oops >&2; false")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := m1.Wait(ctx, tgt, "s1", first); err != nil || code != 1 {
		t.Fatalf("first command: %d %v", code, err)
	}
	slow, err := m1.Exec(ctx, tgt, "s1", "echo before; read line; echo \"got $line\"")
	if err != nil {
		t.Fatal(err)
	}
	waitLogs(ctx, t, m1, tgt, slow, "before\n")
	m1.Close() // the daemon stops

	m2 := sessions.New(sessions.Options{Agents: a})
	defer m2.Close()
	shells, err := m2.Shells(ctx, tgt)
	if err != nil || len(shells) != 1 || shells[0].ID != "s1" || len(shells[0].Commands) != 2 {
		t.Fatalf("after the restart: %+v %v; want s1 with two commands", shells, err)
	}
	c0, c1 := shells[0].Commands[0], shells[0].Commands[1]
	if c0.ID != first || c0.Command != "echo first; echo oops >&2; false" || c0.ExitCode == nil || *c0.ExitCode != 1 {
		t.Errorf("first command rebuilt as %+v", c0)
	}
	if c1.ID != slow || c1.ExitCode != nil {
		t.Errorf("running command rebuilt as %+v", c1)
	}
	if l, err := m2.CommandLogs(ctx, tgt, "s1", first); err != nil || l.Stdout != "first\n" || l.Stderr != "oops\n" {
		t.Errorf("first command's logs after the restart: %+v %v", l, err)
	}
	// Input reaches the running command; its end is seen.
	if err := m2.Input(ctx, tgt, "s1", slow, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	code, l, err := m2.Wait(ctx, tgt, "s1", slow)
	if err != nil || code != 0 || l.Stdout != "before\ngot hello\n" {
		t.Errorf("the command running across the restart: %d %+v %v", code, l, err)
	}
	// And the shell takes new commands, its state kept.
	next, err := m2.Exec(ctx, tgt, "s1", "echo $line")
	if err != nil {
		t.Fatal(err)
	}
	if code, l, err := m2.Wait(ctx, tgt, "s1", next); err != nil || code != 0 || l.Stdout != "hello\n" {
		t.Errorf("a command after the restart: %d %+v %v", code, l, err)
	}
}

func waitLogs(ctx context.Context, t *testing.T, m *sessions.Manager, tgt sessions.Target, cid, want string) {
	t.Helper()
	for {
		l, err := m.CommandLogs(ctx, tgt, "s1", cid)
		if err == nil && l.Stdout == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("logs %+v %v, want stdout %q", l, err, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestManager_HostileAgentTagsAndMarkers: processes the agent reports
// under tags that are not quite ours are ignored, and a "session" whose
// output forges thousands of begin markers rebuilds at most
// MaxCommandsPerShell commands, each text bounded.
func TestManager_HostileAgentTagsAndMarkers(t *testing.T) {
	needBash(t)
	a := localAgent(t)
	tgt := sessions.Target{SandboxID: "sb-1", Cwd: t.TempDir()}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := func(tag, script string) {
		t.Helper()
		p, err := a.c.StartProcess(ctx, agent.StartRequest{Cmd: []string{"/bin/bash", "-c", script}, Tag: tag, KeepOutput: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	for _, tag := range []string{
		"sandboxd.session/../0123456789abcdef", "sandboxd.session/x/nothex", "sandboxd.session/x",
		"sandboxd.pty/x/99999x1/0", "sandboxd.pty/x/80x24/-1", "sandboxd.pty/x/80x24/1/eager",
		"sandboxd.interpreter/x/0123456789abcdef/1", "daytona-session-x",
	} {
		start(tag, "sleep 60")
	}
	long := strings.Repeat("A", 8<<10)
	start("sandboxd.session/evil/0123456789abcdef", fmt.Sprintf(
		`for i in $(seq 1 3000); do printf '\036%s:%%032x:B%s\036' $i; done; printf '\036%s:%032x:B%s\036'; sleep 60`,
		"0123456789abcdef", "QUFB", "0123456789abcdef", 7, long))
	m := sessions.New(sessions.Options{Agents: a})
	defer m.Close()
	var shells []sessions.ShellInfo
	for {
		var err error
		if shells, err = m.Shells(ctx, tgt); err != nil {
			t.Fatal(err)
		}
		if len(shells) == 1 && len(shells[0].Commands) >= sessions.MaxCommandsPerShell {
			break
		}
		// The replay is still arriving: look again.
		select {
		case <-ctx.Done():
			t.Fatalf("shells %d, commands %d", len(shells), len(shells[0].Commands))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if shells[0].ID != "evil" || len(shells[0].Commands) != sessions.MaxCommandsPerShell {
		t.Errorf("rebuilt %s with %d commands, want evil with %d", shells[0].ID, len(shells[0].Commands), sessions.MaxCommandsPerShell)
	}
	for _, c := range shells[0].Commands {
		if len(c.Command) > 4<<10 {
			t.Fatalf("a rebuilt command's text is %d bytes", len(c.Command))
		}
	}
	if terms, err := m.Terminals(ctx, tgt); err != nil || len(terms) != 0 {
		t.Errorf("terminals from hostile tags: %+v %v", terms, err)
	}
	if cs, err := m.Contexts(ctx, tgt); err != nil || len(cs) != 0 {
		t.Errorf("contexts from hostile tags: %+v %v", cs, err)
	}
}
