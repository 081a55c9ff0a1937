// Package daemontest runs real sandboxd processes for tests that drive the
// built binaries end to end (test/e2e, test/adversarial): it builds the
// binaries of this checkout once, starts daemons as child processes on
// 127.0.0.1 with their own data directories and node ids, and removes
// every container they labelled when they are closed. A cluster's nodes
// can instead each run on a host of their own (LAN): a network namespace
// joined to the others' by a bridge, reached by name, no loopback in
// their configuration.
package daemontest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Bounds of a daemon's lifecycle.
const (
	// StartTimeout covers process start, the startup reconcile (which may
	// destroy a few containers) and the first /healthz answer.
	StartTimeout = 90 * time.Second
	// stopTimeout is how long a SIGTERM gets before SIGKILL.
	stopTimeout = 15 * time.Second
	// cleanupTimeout bounds removing a daemon's containers.
	cleanupTimeout = 2 * time.Minute
	// buildTimeout bounds `go build` of the three binaries (cold caches on
	// a 2-core machine take a few minutes).
	buildTimeout = 8 * time.Minute
)

// Binaries are the paths of the freshly built executables.
type Binaries struct {
	Sandboxd, Toolboxd, Sbx string
}

// Env is what one test binary prepared for its daemons: the binaries and
// a temporary root for their logs and data directories.
type Env struct {
	Root string
	Bins Binaries
	// Prefix starts every node id (a test binary's own, e.g. "e2e").
	Prefix string
	// PortBase is the start of the host-port ranges given to daemons; each
	// test binary uses its own so that packages running at once never
	// share one.
	PortBase int
	// LAN makes NewCluster put every node on a host of its own: a
	// network namespace on a LAN (NewLAN), configured by host name with
	// no loopback address, as on separate machines. Set it between runs,
	// never while a cluster is starting.
	LAN bool

	seq atomic.Int32
}

// Setup builds the binaries into a fresh temporary root, or takes them
// from the directory SANDBOXD_TEST_BIN_DIR names, an absolute path (make
// test sets it to the bin/ its build step has just made, so that the
// daemon-level packages do not each build the same three binaries
// again). Close removes the root.
func Setup(prefix string, portBase int) (*Env, error) {
	root, err := os.MkdirTemp("", "sbx"+prefix+"-")
	if err != nil {
		return nil, err
	}
	bins, err := prebuilt(os.Getenv("SANDBOXD_TEST_BIN_DIR"))
	if err == nil && bins == (Binaries{}) {
		bins, err = Build(filepath.Join(root, "bin"))
	}
	if err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("build: %w", err)
	}
	return &Env{Root: root, Bins: bins, Prefix: prefix, PortBase: portBase + portShift()}, nil
}

// prebuilt returns the three binaries in dir, none when dir is "". A dir
// that lacks one is an error, never a silent build of another checkout's.
func prebuilt(dir string) (Binaries, error) {
	if dir == "" {
		return Binaries{}, nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		Sandboxd: filepath.Join(dir, "sandboxd"),
		Toolboxd: filepath.Join(dir, "toolboxd"),
		Sbx:      filepath.Join(dir, "sbx"),
	}
	for _, p := range []string{b.Sandboxd, b.Toolboxd, b.Sbx} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("SANDBOXD_TEST_BIN_DIR=%s: %s is not an executable (run make build): %v", dir, p, err)
		}
	}
	return b, nil
}

// portShift moves every host-port range by SANDBOXD_TEST_PORT_SHIFT, so that
// two checkouts can run the same test package at once on one machine
// without sharing host ports. Unset (CI), the ranges are as given.
func portShift() int {
	n, err := strconv.Atoi(os.Getenv("SANDBOXD_TEST_PORT_SHIFT"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Close removes the root. When keep is set (the run failed) the daemons'
// logs are copied out first, and where they went is printed.
func (e *Env) Close(keep bool) {
	if keep {
		keepLogs(e.Root, e.Prefix)
	}
	os.RemoveAll(e.Root)
}

// keepLogs copies the daemons' logs out of root, which is about to be
// removed, and says where they are: a failure is debugged from them.
func keepLogs(root, prefix string) {
	logs, _ := filepath.Glob(filepath.Join(root, "*.log"))
	if len(logs) == 0 {
		return
	}
	dir, err := os.MkdirTemp("", "sandboxd-"+prefix+"-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+": keep logs:", err)
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	fmt.Fprintf(os.Stderr, "%s: daemon logs kept in %s\n", prefix, dir)
}

// Build builds the daemon, the agent and the CLI of this checkout into
// dir, statically (the agent runs inside arbitrary images).
func Build(dir string) (Binaries, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return Binaries{}, fmt.Errorf("not inside a module (go env GOMOD = %q)", gomod)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/sandboxd", "./cmd/toolboxd", "./cmd/sbx")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return Binaries{
		Sandboxd: filepath.Join(dir, "sandboxd"),
		Toolboxd: filepath.Join(dir, "toolboxd"),
		Sbx:      filepath.Join(dir, "sbx"),
	}, nil
}

// PingDocker reports whether the Docker engine answers and the images are
// present.
func PingDocker(images ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		return fmt.Errorf("docker version: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for _, img := range images {
		if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", img).CombinedOutput(); err != nil {
			return fmt.Errorf("image %s missing (run scripts/build-images.sh): %w: %s", img, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// Daemon is one sandboxd child process and its data directory. It
// survives Kill and Restart: the data directory, the node id and (when the
// port is still free) the address stay the same, like a daemon restarted by
// its supervisor.
//
// Start, Kill, Stop and Restart must not be called concurrently with each
// other; URL, Token and the accessors may be called from any goroutine.
type Daemon struct {
	env     *Env
	nodeID  string
	dataDir string
	ociDir  string // its --oci-dir under --engine oci (OCIDir)
	logPath string
	args    []string // extra flags, e.g. --cpu-budget
	// Env is added to the daemon's environment at each start (e.g.
	// DOCKER_HOST, to reach the engine through a test's proxy). Set it
	// before Start.
	Env []string
	// host, when set, is the LAN host the daemon runs on (`ip netns
	// exec`), listening on its name with fixed ports.
	host *LANHost

	mu     sync.Mutex
	port   int
	token  string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	// exitErr is cmd.Wait's result, set before exited is closed.
	exitErr error
}

// New prepares (but does not start) a daemon whose node id contains name.
// extraArgs are appended to the daemon's flags (later flags win).
func (e *Env) New(name string, extraArgs ...string) *Daemon {
	n := e.seq.Add(1)
	nodeID := fmt.Sprintf("%s-%d-%d-%s", e.Prefix, os.Getpid(), n, name)
	testenv.Track(nodeID) // testenv.Exit fails the run if a container of it outlives Close
	// A short data directory keeps the agent sockets inside it (the daemon
	// moves them to /tmp when the path is long), so removing it removes all.
	dataDir, err := os.MkdirTemp(e.Root, "d")
	if err != nil {
		panic(fmt.Sprintf("daemontest: data dir: %v", err)) // Root is ours; this cannot fail in practice
	}
	lo := e.PortBase + int(n%100)*40
	return &Daemon{
		env:     e,
		nodeID:  nodeID,
		dataDir: dataDir,
		ociDir:  ociDir(e.Root, dataDir),
		logPath: filepath.Join(e.Root, nodeID+".log"),
		args: append([]string{
			"--host-ports", fmt.Sprintf("%d-%d", lo, lo+39),
			"--reconcile-every", "1h", // only the startup pass: tests decide when state is checked
			"--pool", "none", // tests that want the warm pool pass --pool again
		}, extraArgs...),
	}
}

// Start starts a daemon of t's own (New, then Start) and closes it at
// the end of t (its containers removed), with the tail of its log when t
// failed. The caller has checked that the engine is there.
func (e *Env) Start(t testing.TB, name string, extraArgs ...string) *Daemon {
	t.Helper()
	d := e.New(name, extraArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s log (tail):\n%s", d.NodeID(), d.LogTail(60))
		}
		if err := d.Close(); err != nil {
			t.Errorf("daemon cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), StartTimeout)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	return d
}

// NodeID is the daemon's --node-id, the value of its containers'
// sandboxd.node label.
func (d *Daemon) NodeID() string { return d.nodeID }

// DataDir is the daemon's --data-dir.
func (d *Daemon) DataDir() string { return d.dataDir }

// URL is the base URL of the daemon's API: on a LAN host, HTTPS by the
// host's name, which is also what the node advertises to the others
// (reach it through DialContext, trusting LANRootCAs).
func (d *Daemon) URL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.urlLocked()
}

func (d *Daemon) urlLocked() string {
	if d.host != nil {
		return "https://" + net.JoinHostPort(d.host.Name, strconv.Itoa(lanHTTPSPort))
	}
	return "http://127.0.0.1:" + strconv.Itoa(d.port)
}

// Host is the LAN host the daemon runs on, nil when it runs in this
// process's network namespace.
func (d *Daemon) Host() *LANHost { return d.host }

// Token is the admin token the daemon wrote at its first start.
func (d *Daemon) Token() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.token
}

// PID is the daemon's process id, 0 when it is not running.
func (d *Daemon) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// RSS is the daemon's resident memory in bytes (VmRSS).
func (d *Daemon) RSS() (int64, error) {
	pid := d.PID()
	if pid == 0 {
		return 0, errors.New("daemon not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// Start launches the daemon and returns once /healthz answers, which is
// after its startup reconcile (the daemon reconciles before it serves). It
// keeps the previous port when that is still free and picks another one
// otherwise.
func (d *Daemon) Start(ctx context.Context) error {
	const attempts = 3
	var err error
	for range attempts {
		if err = d.startOnce(ctx); !errors.Is(err, errAddrInUse) {
			return err
		}
		d.mu.Lock()
		d.port = 0 // someone took it: pick another
		d.mu.Unlock()
	}
	return err
}

var errAddrInUse = errors.New("listen address in use")

func (d *Daemon) startOnce(ctx context.Context) error {
	d.mu.Lock()
	if d.cmd != nil {
		d.mu.Unlock()
		return errors.New("daemon already running")
	}
	cmd, exited, err := d.spawn()
	if err != nil {
		d.mu.Unlock()
		return err
	}
	d.cmd, d.exited = cmd, exited
	url := d.urlLocked()
	d.mu.Unlock()

	if err := waitHealthy(ctx, url, exited); err != nil {
		d.Kill()
		if strings.Contains(d.LogTail(5), "address already in use") {
			return errAddrInUse
		}
		return fmt.Errorf("daemon %s: %w\nlog:\n%s", d.nodeID, err, d.LogTail(30))
	}
	tok, err := os.ReadFile(filepath.Join(d.dataDir, "admin.token"))
	if err != nil {
		d.Kill()
		return fmt.Errorf("admin token: %w", err)
	}
	d.mu.Lock()
	d.token = strings.TrimSpace(string(tok))
	d.mu.Unlock()
	return nil
}

// spawn starts the process (d.mu held) and a goroutine that waits for it.
func (d *Daemon) spawn() (*exec.Cmd, chan struct{}, error) {
	listen, tlsListen := "", ""
	if d.host != nil {
		// No loopback anywhere: the API and the SNI listener on the host's
		// name, which the daemon also advertises to the other nodes (the
		// API over HTTPS, so tokens cross the LAN in TLS only).
		d.port = lanAPIPort
		listen = net.JoinHostPort(d.host.Name, strconv.Itoa(lanAPIPort))
		tlsListen = net.JoinHostPort(d.host.Name, strconv.Itoa(lanTLSPort))
	} else {
		if d.port == 0 {
			p, err := FreePort()
			if err != nil {
				return nil, nil, err
			}
			d.port = p
		}
		tlsPort, err := FreePort()
		if err != nil {
			return nil, nil, err
		}
		listen, tlsListen = "127.0.0.1:"+strconv.Itoa(d.port), "127.0.0.1:"+strconv.Itoa(tlsPort)
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "---- %s: starting %s on port %d at %s\n", d.env.Prefix, d.nodeID, d.port, time.Now().Format(time.RFC3339Nano))

	args := append([]string{
		"--listen", listen,
		"--tls-listen", tlsListen,
		"--data-dir", d.dataDir,
		"--node-id", d.nodeID,
		"--agent-binary", d.env.Bins.Toolboxd,
		"--log-level", "debug",
		// Pulls stay on this machine (a test's own --registry-allow,
		// later, replaces this).
		"--registry-allow", "127.0.0.1",
	}, d.args...)
	if e := os.Getenv(EnvEngine); e != "" {
		// Before the test's own flags: a test that names an engine wins.
		args = append([]string{"--engine", e}, args...)
	}
	if d.Engine() == "oci" && d.ociDir != filepath.Join(d.dataDir, "oci") {
		args = append([]string{"--oci-dir", d.ociDir}, args...)
	}
	cmd := exec.Command(d.env.Bins.Sandboxd, args...)
	if d.host != nil {
		https := net.JoinHostPort(d.host.Name, strconv.Itoa(lanHTTPSPort))
		args = append([]string{"netns", "exec", d.host.NS, d.env.Bins.Sandboxd, "--allow-public",
			"--https-listen", https, "--https-cert", d.host.Cert, "--https-key", d.host.Key,
			"--advertise-url", "https://" + https, "--tcp-host", d.host.Name}, args...)
		if d.Engine() == "oci" {
			// ip netns exec mounts a sysfs of the namespace's over /sys,
			// hiding the cgroup hierarchies the OCI runtime needs: they
			// are mounted again there first (cgroupMounts), then the
			// shell execs sandboxd: same process.
			args = append([]string{"netns", "exec", d.host.NS, "sh", "-c", cgroupMounts() + `exec "$0" "$@"`}, args[3:]...)
		}
		cmd = exec.Command("ip", args...) // ip execs sandboxd: same process
	}
	cmd.Env = append(HermeticEnv(), d.Env...)
	if d.host != nil {
		cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+d.host.CA) // the other nodes' certificates
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies, the daemon dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", d.env.Bins.Sandboxd, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.exitErr = err
		d.mu.Unlock()
		close(exited)
	}()
	return cmd, exited, nil
}

// Kill sends SIGKILL and waits for the process to be gone. Killing a
// daemon that is not running does nothing.
func (d *Daemon) Kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd, d.exited = nil, nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited // SIGKILL cannot be ignored: this returns promptly
}

// Stop asks the daemon to shut down (SIGTERM) and waits up to stopTimeout
// for it to exit, then kills it. A daemon that needs the kill, or exits
// with an error, is reported: a cancelled root context is a clean
// shutdown. Stopping a daemon that is not running does nothing.
func (d *Daemon) Stop() error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd, d.exited = nil, nil
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("daemon %s ignored SIGTERM for %v", d.nodeID, stopTimeout)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.exitErr != nil {
		return fmt.Errorf("daemon %s after SIGTERM: %w (want a clean exit)", d.nodeID, d.exitErr)
	}
	return nil
}

// Restart kills the daemon (if it runs) and starts it again on the same
// data directory.
func (d *Daemon) Restart(ctx context.Context) error {
	d.Kill()
	return d.Start(ctx)
}

// Close stops the daemon (Stop), removes every container labelled with its
// node id, and removes its data directory. It is safe to call more than
// once.
func (d *Daemon) Close() error {
	err := d.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if rerr := RemoveContainers(ctx, d.nodeID); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if rerr := d.removeOCISandboxes(ctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if d.ociDir != filepath.Join(d.dataDir, "oci") {
		if rerr := os.RemoveAll(d.ociDir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	// Volumes' file systems stay mounted while the daemon is down, as they
	// do in production: unmounted here. Staged subpath mounts a test left
	// (its sandboxes removed behind the daemon's back) are a failure. Both
	// are detached first, so the removal never reaches through one and no
	// mount outlives the data directory.
	if left := MountsUnder(d.dataDir); len(left) > 0 {
		var staged []string
		for _, m := range slices.Backward(left) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
			if !strings.HasPrefix(m, filepath.Join(d.dataDir, "volumes")+"/") {
				staged = append(staged, m)
			}
		}
		if len(staged) > 0 {
			err = errors.Join(err, fmt.Errorf("daemon %s left mounts under its data dir: %v", d.nodeID, staged))
		}
	}
	if rerr := os.RemoveAll(d.dataDir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// MountsUnder lists the mount points under dir in this process's mount
// namespace (the engine's too), from /proc/self/mountinfo, in its order.
func MountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// LogTail returns the last n lines of the daemon's log (stdout and
// stderr of every start).
func (d *Daemon) LogTail(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// RemoveContainers force-removes every container labelled with nodeID,
// until none is left or testenv.Deadline passes.
func RemoveContainers(ctx context.Context, nodeID string) error {
	return testenv.Poll(ctx, testenv.Deadline, func() error {
		if _, err := testenv.RemoveNode(ctx, nodeID); err != nil {
			return err
		}
		left, err := testenv.NodeContainers(ctx, nodeID)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("containers of node %s still there: %s", nodeID, strings.Join(left, "; "))
		}
		return err
	})
}

// waitHealthy polls GET /healthz until it answers 200, the process exits,
// or ctx ends.
func waitHealthy(ctx context.Context, baseURL string, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: transport()}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/healthz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("healthz: %s", resp.Status)
		}
		last = err
		select {
		case <-exited:
			return errors.New("daemon exited before it became healthy")
		case <-ctx.Done():
			return fmt.Errorf("not healthy: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// transport is the HTTP transport of the package's own calls: it reaches
// daemons on a LAN (DialContext, LANRootCAs).
var transport = sync.OnceValue(func() *http.Transport {
	t := &http.Transport{DialContext: DialContext, DisableKeepAlives: true}
	if roots, err := LANRootCAs(); err == nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return t
})

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// EnvEngine, when set (docker or oci), is the --engine of every daemon
// the tests start: `SANDBOXD_TEST_ENGINE=docker go test ./test/e2e` runs
// the end-to-end tests on the Docker engine. Unset, the daemons run the
// daemon's default (TestEngine).
const EnvEngine = "SANDBOXD_TEST_ENGINE"

// HermeticEnv is this process's environment without the variables the
// daemon and the CLI read, so the developer's settings do not leak in.
func HermeticEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SANDBOXD_") || strings.HasPrefix(kv, "SBX_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// removeOCISandboxes destroys what a daemon of --engine oci left running
// in its data directory (its default --oci-dir), as RemoveContainers does
// for the engine's: a daemon keeps its sandboxes when it stops. What is
// left after that (oci.Runtime.Traces: a cgroup, a namespace, a mount, a
// subvolume the removal could not find) is a leak, and an error.
func (d *Daemon) removeOCISandboxes(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(d.ociDir, "sandboxes")); err != nil {
		return nil
	}
	rt, err := d.ociRuntime()
	if err != nil {
		return err
	}
	defer rt.Close()
	list, err := rt.ListOurs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, in := range list {
		errs = append(errs, rt.Destroy(ctx, in.SandboxID))
	}
	if left := rt.Traces(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("daemon %s left traces of sandboxes it no longer lists: %v", d.nodeID, left))
	}
	return errors.Join(errs...)
}
