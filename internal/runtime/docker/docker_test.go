package docker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// testImage is the small image the suite runs (scripts/build-images.sh).
const testImage = "sandboxd/busybox:latest"

// env is set up once by TestMain; setupErr says why it could not be.
var (
	env struct {
		cli        *client.Client
		agent      string // agent binary
		fake       string // runtimetest/fakeagent binary
		socketRoot string
	}
	setupErr error
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "sbrt-") // short: unix socket paths are at most 107 bytes
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if testenv.HasDocker() { // else every engine test skips, saying why
			setupErr = setup(dir)
		}
		code := m.Run()
		if env.cli != nil {
			env.cli.Close()
		}
		// Every runtime, readiness probe and log reader must have let go
		// of its goroutines once the engine client is closed.
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				return 1
			}
		}
		return code
	}()
	os.Exit(testenv.Exit(code))
}

// setup connects to the engine, checks the test image and builds the agent.
func setup(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return fmt.Errorf("%w: %w", errNoEngine, err)
	}
	env.cli = cli
	if _, err := cli.ImageInspect(ctx, testImage); err != nil {
		return fmt.Errorf("image %s: %w (run scripts/build-images.sh)", testImage, err)
	}
	if env.agent, err = runtimetest.BuildAgent(ctx, dir); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if env.fake, err = runtimetest.BuildFakeAgent(ctx, dir); err != nil {
		return fmt.Errorf("fake agent: %w", err)
	}
	env.socketRoot = filepath.Join(dir, "s")
	return nil
}

var errNoEngine = errors.New("docker engine not reachable")

// requireEnv skips under -short or when the engine is unreachable outside
// CI, fails in CI (testenv.NeedsDocker), and fails on any other setup
// problem.
func requireEnv(t *testing.T) {
	t.Helper()
	testenv.NeedsDocker(t)
	if setupErr != nil {
		t.Fatalf("test setup: %v", setupErr)
	}
}

func newRuntime(t *testing.T, o runtimetest.Options, mod ...func(*docker.Options)) *docker.Runtime {
	t.Helper()
	opts := docker.Options{Client: env.cli, NodeID: o.NodeID, SocketRoot: env.socketRoot, AgentReadyTimeout: o.AgentReadyTimeout}
	for _, f := range mod {
		f(&opts)
	}
	testenv.TrackNode(t, opts.NodeID) // runs after rt.Close: removes what the test left
	rt, err := docker.New(opts)
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestConformance(t *testing.T) {
	requireEnv(t)
	anyRT := newRuntime(t, runtimetest.Options{NodeID: "conformance-" + runtimetest.NewSandboxID()[3:]}) // for SocketDir, which only depends on the root
	runtimetest.Run(t, runtimetest.Config{
		New:         func(t *testing.T, o runtimetest.Options) runtime.Runtime { return newRuntime(t, o) },
		Image:       testImage,
		AgentBinary: env.agent,
		Facts:       facts,
		SocketDir:   anyRT.SocketDir,
		Foreign:     foreign,
	})
}

// TestConformance_GVisor runs the same suite with every sandbox under
// gVisor (runsc, which make setup registers with the engine).
func TestConformance_GVisor(t *testing.T) {
	requireEnv(t)
	requireGVisor(t)
	anyRT := newRuntime(t, runtimetest.Options{NodeID: "conformance-gv-" + runtimetest.NewSandboxID()[3:]})
	runtimetest.Run(t, runtimetest.Config{
		New:         func(t *testing.T, o runtimetest.Options) runtime.Runtime { return newRuntime(t, o) },
		Image:       testImage,
		AgentBinary: env.agent,
		Facts:       facts,
		SocketDir:   anyRT.SocketDir,
		Foreign:     foreign,
		Isolation:   runtime.IsolationGVisor,
		OCIRuntime:  docker.DefaultGVisorRuntime,
		MemoryMB:    runtime.MinGVisorMemoryMB,
		PidsLimit:   runtime.MinGVisorPidsLimit,
	})
}

// requireGVisor skips t when the engine has no runsc, outside CI, and
// fails it in CI (make setup registers it).
func requireGVisor(t *testing.T) {
	t.Helper()
	rt := newRuntime(t, runtimetest.Options{NodeID: "gvisor-probe-" + runtimetest.NewSandboxID()[3:]})
	isos, err := rt.Isolations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(isos, runtime.IsolationGVisor) {
		return
	}
	if testenv.CI() {
		t.Fatal("the engine has no runsc runtime and CI is set (make setup registers it: scripts/setup-gvisor.sh)")
	}
	t.Skip("skipping: the engine has no runsc runtime (scripts/setup-gvisor.sh registers it)")
}

// facts reports the container as the engine sees it.
func facts(t *testing.T, sandboxID string) runtimetest.Facts {
	t.Helper()
	res, err := env.cli.ContainerInspect(t.Context(), containerOf(t, sandboxID), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", sandboxID, err)
	}
	c, hc := res.Container, res.Container.HostConfig
	f := runtimetest.Facts{
		Hostname:        c.Config.Hostname,
		Labels:          c.Config.Labels,
		NanoCPUs:        hc.NanoCPUs,
		MemoryBytes:     hc.Memory,
		MemorySwapBytes: hc.MemorySwap,
		Privileged:      hc.Privileged,
		CapAdd:          hc.CapAdd,
		CapDrop:         hc.CapDrop,
		CgroupNS:        string(hc.CgroupnsMode),
		SecurityOpt:     hc.SecurityOpt,
		NetworkMode:     string(hc.NetworkMode),
		OCIRuntime:      hc.Runtime,
		Init:            hc.Init != nil && *hc.Init,
		Entrypoint:      c.Config.Entrypoint,
		Cmd:             c.Config.Cmd,
		Env:             c.Config.Env,
	}
	if hc.PidsLimit != nil {
		f.PidsLimit = *hc.PidsLimit
	}
	if c.State != nil {
		f.AgentPid = c.State.Pid
	}
	for _, m := range c.Mounts {
		f.Mounts = append(f.Mounts, runtimetest.Mount{Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
	}
	return f
}

// containerOf is the id of the one container labelled with sandboxID (its
// name is keyed: docker.Runtime.ContainerName).
func containerOf(t *testing.T, sandboxID string) string {
	t.Helper()
	res, err := env.cli.ContainerList(t.Context(), client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", runtime.LabelSandbox+"="+sandboxID),
	})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("containers labelled %s: %d, %v; want one", sandboxID, len(res.Items), err)
	}
	return res.Items[0].ID
}

// foreign starts an unlabelled container beside ours.
func foreign(t *testing.T) string {
	t.Helper()
	name := "foreign-" + runtimetest.NewSandboxID()
	_, err := env.cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name:       name,
		Config:     &container.Config{Image: testImage, Cmd: []string{"sleep", "600"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatalf("create foreign container: %v", err)
	}
	t.Cleanup(func() {
		_, err := env.cli.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove foreign container: %v", err)
		}
	})
	return name
}

// TestCreate_NetworkEnabled: Spec.Network puts the sandbox on the configured
// network instead of none. The network is an internal one made for the
// test: sandboxes in tests have no route out.
func TestCreate_NetworkEnabled(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	netName := "sandboxd-test-" + runtimetest.NewSandboxID()[3:]
	if _, err := env.cli.NetworkCreate(t.Context(), netName, client.NetworkCreateOptions{Driver: "bridge", Internal: true}); err != nil {
		t.Fatalf("create internal network: %v", err)
	}
	t.Cleanup(func() { _, _ = env.cli.NetworkRemove(context.Background(), netName, client.NetworkRemoveOptions{}) })
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *docker.Options) { o.Network = netName })
	id := runtimetest.NewSandboxID()
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	if _, err := rt.Create(t.Context(), runtime.Spec{
		SandboxID: id, Image: testImage, AgentBinary: env.agent, AgentToken: "t", Network: true,
	}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if got := facts(t, id).NetworkMode; got != netName {
		t.Errorf("network mode = %q, want %q", got, netName)
	}
}

func TestNew_Options(t *testing.T) {
	for name, opts := range map[string]docker.Options{
		"NoNode":           {SocketRoot: "/tmp/x"},
		"RelativeRoot":     {NodeID: "n", SocketRoot: "sockets"},
		"RootTooLongForUN": {NodeID: "n", SocketRoot: "/" + strings.Repeat("a", 100)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := docker.New(opts); err == nil {
				t.Errorf("New(%+v) = nil error, want one", opts)
			}
		})
	}
}

// lossyTransport performs container creations on the engine but loses the
// answer, as a dropped connection or a timeout at the wrong moment would.
type lossyTransport struct{ base http.RoundTripper }

var errAnswerLost = errors.New("connection reset (injected after the engine answered)")

func (l lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/containers/create") {
		resp.Body.Close()
		return nil, errAnswerLost
	}
	return resp, err
}

// TestCreate_AnswerLost: the engine created the container but Create never
// saw the answer; Create must still remove it (and only it).
func TestCreate_AnswerLost(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = client.DefaultDockerHost
	}
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Skipf("DOCKER_HOST %s is not a unix socket", host)
	}
	base := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	lossy, err := client.New(client.FromEnv, client.WithHTTPClient(&http.Client{Transport: lossyTransport{base}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lossy.Close(); base.CloseIdleConnections() })

	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *docker.Options) { o.Client = lossy })
	id := runtimetest.NewSandboxID()
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	_, err = rt.Create(t.Context(), runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: env.agent, AgentToken: "t"})
	if !errors.Is(err, errAnswerLost) {
		t.Fatalf("Create = %v, want the injected error", err)
	}
	if _, err := env.cli.ContainerInspect(t.Context(), rt.ContainerName(id), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("container %s after a Create whose answer was lost: inspect err = %v, want not found", id, err)
	}
	if _, err := os.Stat(rt.SocketDir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left behind (stat: %v)", err)
	}
}

// TestDialAgent_RefusesASymlinkPlantedBySandbox: a process in the sandbox
// can write the socket directory; replacing agent.sock with a symlink to a
// host socket must not make the daemon dial that host socket.
func TestDialAgent_RefusesASymlinkPlantedBySandbox(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })
	if _, err := rt.Create(t.Context(), runtime.Spec{SandboxID: id, Image: testImage, AgentBinary: env.agent, AgentToken: "t"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// A host socket the sandbox must never reach.
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock := rt.AgentSocketPath(id)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostSock, sock); err != nil {
		t.Fatal(err)
	}
	if conn, err := rt.DialAgent(t.Context(), id); err == nil {
		conn.Close()
		t.Fatal("DialAgent followed a symlink planted in the socket directory")
	}
}

// TestListOurs_AdoptsOlderNames: a container made by a
// daemon from before the names were keyed is named by its sandbox id; the
// next runtime's ListOurs (the daemon's startup reconcile) finds it by its
// labels and renames it to its keyed name, after which every call by id
// reaches it. The keyed name and the hostname do not show the id.
func TestListOurs_AdoptsOlderNames(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	node := "node-" + runtimetest.NewSandboxID()[3:]
	old := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *docker.Options) { o.NameKey = []byte("old key") })
	b := newBox(t, old, nil)
	if _, err := env.cli.ContainerRename(t.Context(), old.ContainerName(b.id), client.ContainerRenameOptions{NewName: b.id}); err != nil {
		t.Fatalf("rename to the older name: %v", err)
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *docker.Options) { o.NameKey = []byte("new key") })
	name := rt.ContainerName(b.id)
	if strings.Contains(name, b.id[3:]) || name == old.ContainerName(b.id) {
		t.Fatalf("ContainerName(%s) = %q: shows the id, or ignores the key", b.id, name)
	}
	if st, err := rt.Inspect(t.Context(), b.id); err != nil || st.State != runtime.StateMissing {
		t.Fatalf("Inspect before ListOurs = %+v, %v; want missing (the check proves nothing)", st, err)
	}
	list, err := rt.ListOurs(t.Context())
	if err != nil || len(list) != 1 || list[0].SandboxID != b.id {
		t.Fatalf("ListOurs = %+v, %v; want %s", list, err, b.id)
	}
	if st, err := rt.Inspect(t.Context(), b.id); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("Inspect after ListOurs = %+v, %v; want running", st, err)
	}
	res, err := env.cli.ContainerInspect(t.Context(), name, client.ContainerInspectOptions{})
	if err != nil || res.Container.Name != "/"+name {
		t.Fatalf("container named %q: %v", name, err)
	}
	if err := rt.Destroy(t.Context(), b.id); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
}
