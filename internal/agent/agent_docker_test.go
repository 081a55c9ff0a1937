package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// baseImage is the sandbox image the container tests run in.
const baseImage = "sandboxd/base:bookworm"

// dockerEnv is one Docker runtime and agent binary shared by the container
// tests of this package; each test creates what it needs through it.
type dockerEnv struct {
	rt    *docker.Runtime
	agent string // host path of the static toolboxd
	dir   string // scratch: the agent build and the socket root
	err   error  // setup failure, reported by every test
}

var (
	dockerOnce   sync.Once
	dockerShared dockerEnv
	// shared holds one sandbox per isolation for the tests that can share
	// one; TestMain destroys them.
	shared = map[runtime.Isolation]*sharedBox{
		runtime.IsolationContainer: {},
		runtime.IsolationGVisor:    {},
	}
)

type sharedBox struct {
	once sync.Once
	box  *sandbox
	err  error
}

// isolations are the ones every container test runs under, as subtests.
var isolations = []runtime.Isolation{runtime.IsolationContainer, runtime.IsolationGVisor}

// eachIsolation runs fn as a subtest per isolation; the gVisor one skips
// when the engine has no runsc outside CI (make setup registers it) and
// fails in CI.
func eachIsolation(t *testing.T, fn func(t *testing.T, iso runtime.Isolation)) {
	for _, iso := range isolations {
		name := string(iso)
		if iso == runtime.IsolationContainer {
			name = "runc"
		}
		t.Run(name, func(t *testing.T) {
			if iso == runtime.IsolationGVisor {
				requireGVisor(t)
			}
			fn(t, iso)
		})
	}
}

func requireGVisor(t *testing.T) {
	t.Helper()
	d := dockerSetup(t)
	isos, err := d.rt.Isolations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case slices.Contains(isos, runtime.IsolationGVisor):
	case testenv.CI():
		t.Fatal("the engine has no runsc runtime and CI is set (make setup registers it: scripts/setup-gvisor.sh)")
	default:
		t.Skip("skipping: the engine has no runsc runtime (scripts/setup-gvisor.sh registers it)")
	}
}

// dockerSetup returns the shared runtime, skipping the test under -short
// or when Docker is unreachable and CI is unset (testenv.NeedsDocker).
func dockerSetup(t *testing.T) *dockerEnv {
	t.Helper()
	testenv.NeedsDocker(t)
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		dir, err := os.MkdirTemp("", "agd")
		if err != nil {
			dockerShared.err = err
			return
		}
		dockerShared.dir = dir
		dockerShared.agent, dockerShared.err = runtimetest.BuildAgent(ctx, dir)
		if dockerShared.err != nil {
			return
		}
		// A node of this process's own: other runs of these tests on the
		// same engine must not see its containers, nor it theirs.
		node := "agent-test-" + filepath.Base(dir)
		testenv.Track(node)
		dockerShared.rt, dockerShared.err = docker.New(docker.Options{
			NodeID: node, SocketRoot: filepath.Join(dir, "s"),
		})
	})
	if dockerShared.err != nil {
		t.Fatalf("docker setup: %v", dockerShared.err)
	}
	return &dockerShared
}

// sandbox is one container running our agent.
type sandbox struct {
	id     string
	token  string
	client *agent.Client
}

// newSandbox creates a container from the base image with toolboxd as PID 1,
// isolated by iso. The caller destroys it.
func (d *dockerEnv) newSandbox(ctx context.Context, iso runtime.Isolation) (*sandbox, error) {
	return d.newSandboxWith(ctx, func(s *runtime.Spec) { s.Isolation = iso })
}

// newSandboxWith is newSandbox with the spec changed by mod first.
func (d *dockerEnv) newSandboxWith(ctx context.Context, mod func(*runtime.Spec)) (*sandbox, error) {
	id := runtimetest.NewSandboxID()
	token := "tok-" + id
	spec := runtime.Spec{SandboxID: id, Image: baseImage, AgentBinary: d.agent, AgentToken: token}
	mod(&spec)
	if _, err := d.rt.Create(ctx, spec); err != nil {
		return nil, err
	}
	dial := func(ctx context.Context) (net.Conn, error) { return d.rt.DialAgent(ctx, id) }
	return &sandbox{id: id, token: token, client: agent.NewClient(dial, token)}, nil
}

func (d *dockerEnv) destroy(s *sandbox) {
	s.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.rt.Destroy(ctx, s.id)
}

// sharedSandbox is one container per isolation for every test that can
// share it; TestMain destroys it.
func sharedSandbox(t *testing.T, iso runtime.Isolation) *sandbox {
	t.Helper()
	d := dockerSetup(t)
	sb := shared[iso]
	sb.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb.box, sb.err = d.newSandbox(ctx, iso)
	})
	if sb.err != nil {
		t.Fatalf("create shared sandbox: %v", sb.err)
	}
	return sb.box
}

func TestDocker_Commands(t *testing.T) {
	eachIsolation(t, func(t *testing.T, iso runtime.Isolation) {
		s := sharedSandbox(t, iso)
		var lacks []suiteLack
		if iso == runtime.IsolationGVisor {
			// Seen with Debian's runsc 20221219 (ptrace platform): input
			// written to the terminal never reaches the process.
			lacks = append(lacks, suiteLack{lackPTY, "a PTY under this gVisor does not deliver input"})
		}
		commandSuite(t, s.client, "/tmp/agent-test", lacks...)
	})
}

func TestDocker_AgentEnvironmentHasNoToken(t *testing.T) {
	t.Parallel()
	eachIsolation(t, agentEnvironmentHasNoToken)
}

func agentEnvironmentHasNoToken(t *testing.T, iso runtime.Isolation) {
	s := sharedSandbox(t, iso)
	res, err := s.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "env; echo; tr '\\0' '\\n' < /proc/1/environ"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), s.token) || strings.Contains(string(res.Stdout), "SANDBOXD_AGENT_TOKEN=") {
		t.Errorf("the token is visible inside the sandbox:\n%s", res.Stdout)
	}
}

func TestDocker_RefusesRequestsWithoutToken(t *testing.T) {
	t.Parallel()
	eachIsolation(t, refusesRequestsWithoutToken)
}

func refusesRequestsWithoutToken(t *testing.T, iso runtime.Isolation) {
	d := dockerSetup(t)
	s := sharedSandbox(t, iso)
	for _, token := range []string{"", "wrong"} {
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.rt.DialAgent(ctx, s.id) }, token)
		_, err := c.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"true"}})
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "unauthenticated") {
			t.Errorf("token %q: err %v, want unauthenticated", token, err)
		}
	}
	if err := s.client.Health(t.Context()); err != nil {
		t.Errorf("Health: %v", err)
	}
}

func TestDocker_OrphansAreReaped(t *testing.T) {
	t.Parallel()
	eachIsolation(t, orphansAreReaped)
}

func orphansAreReaped(t *testing.T, iso runtime.Isolation) {
	// A sandbox of its own: the test looks at every process in it, and in
	// the shared one other tests' processes come and go.
	d := dockerSetup(t)
	s, err := d.newSandbox(t.Context(), iso)
	if err != nil {
		t.Fatal(err)
	}
	defer d.destroy(s)
	// A double fork: the subshell starts sleep and exits at once, so sleep
	// is re-parented to PID 1 and, when it exits, must be reaped by it.
	res, err := s.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "for i in 1 2 3 4 5; do (sleep 0.2 &); done; echo forked"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("double fork: %v %+v", err, res)
	}
	testenv.WaitFor(t, "the orphans to exit and be reaped", func() error {
		res, err := s.client.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"ps", "-eo", "pid,ppid,stat,comm"}})
		if err != nil {
			return err
		}
		var zombies, sleeping string
		for _, line := range strings.Split(string(res.Stdout), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) == 4 && strings.HasPrefix(f[2], "Z") {
				zombies += line + "\n"
			}
			if len(f) == 4 && f[3] == "sleep" {
				sleeping += line + "\n"
			}
		}
		if zombies != "" || sleeping != "" {
			return fmt.Errorf("zombies left in the sandbox:\n%ssleeps still running:\n%s", zombies, sleeping)
		}
		return nil
	})
}

func TestDocker_SIGTERMStopsAgentCleanly(t *testing.T) {
	t.Parallel()
	d := dockerSetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := d.newSandbox(ctx, runtime.IsolationContainer)
	if err != nil {
		t.Fatal(err)
	}
	defer d.destroy(s)
	// Something to stop: a tracked process and an orphan ignoring nothing.
	p, err := s.client.StartProcess(ctx, agent.StartRequest{Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := s.client.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "(sleep 1000 &)"}}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := d.rt.Stop(ctx, s.id); err != nil { // SIGTERM to PID 1, SIGKILL after the grace
		t.Fatal(err)
	}
	took := time.Since(begin)
	st, err := d.rt.Inspect(ctx, s.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.ExitCode != 0 {
		t.Errorf("after SIGTERM: state %s, exit code %d; want exited, 0", st.State, st.ExitCode)
	}
	if took > 8*time.Second {
		t.Errorf("stop took %s: the agent did not exit on SIGTERM", took)
	}
	if ps, err := p.Wait(); err == nil && ps.Status != "signal: terminated" {
		t.Errorf("tracked process ended %+v, want terminated", ps)
	}
}

// TestMain destroys the shared sandbox and the agent build once every
// test, parallel ones included, has finished.
// It then fails the run if a container of the tests' node is left.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, sb := range shared {
		if sb.box != nil {
			dockerShared.destroy(sb.box)
		}
	}
	if dockerShared.dir != "" {
		os.RemoveAll(dockerShared.dir)
	}
	os.Exit(testenv.Exit(code))
}
