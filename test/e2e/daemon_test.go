package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Bounds of the daemon's lifecycle.
const (
	// startTimeout covers process start, the startup reconcile (which may
	// destroy a few containers) and the first /healthz answer.
	startTimeout = 90 * time.Second
	// stopTimeout is how long a SIGTERM gets before SIGKILL.
	stopTimeout = 15 * time.Second
	// cleanupTimeout bounds removing a daemon's containers.
	cleanupTimeout = 2 * time.Minute
)

// daemonSeq numbers the daemons of one test binary: node ids and host
// port ranges derive from it.
var daemonSeq atomic.Int32

// daemonProcess is one sandboxd child process and its data directory. It
// survives Kill and Restart: the data directory, the node id and (when the
// port is still free) the address stay the same, like a daemon restarted by
// its supervisor.
//
// Start, Kill, Stop and Restart must not be called concurrently with each
// other; URL, Token and the accessors may be called from any goroutine.
type daemonProcess struct {
	nodeID  string
	dataDir string
	logPath string
	args    []string // extra flags, e.g. --cpu-budget

	mu     sync.Mutex
	port   int
	token  string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	// exitErr is cmd.Wait's result, set before exited is closed.
	exitErr error
}

// newDaemon prepares (but does not start) a daemon whose node id contains
// name. extraArgs are appended to the daemon's flags.
func newDaemon(name string, extraArgs ...string) *daemonProcess {
	n := daemonSeq.Add(1)
	nodeID := fmt.Sprintf("e2e-%d-%d-%s", os.Getpid(), n, name)
	testenv.Track(nodeID) // TestMain fails the run if a container of it outlives Close
	// A short data directory keeps the agent sockets inside it (the daemon
	// moves them to /tmp when the path is long), so removing it removes all.
	dataDir, err := os.MkdirTemp(env.root, "d")
	if err != nil {
		panic(fmt.Sprintf("e2e: data dir: %v", err)) // env.root is ours; this cannot fail in practice
	}
	lo := 42000 + int(n%200)*40
	return &daemonProcess{
		nodeID:  nodeID,
		dataDir: dataDir,
		logPath: filepath.Join(env.root, nodeID+".log"),
		args: append([]string{
			"--host-ports", fmt.Sprintf("%d-%d", lo, lo+39),
			"--reconcile-every", "1h", // only the startup pass: tests decide when state is checked
		}, extraArgs...),
	}
}

// startDaemon starts a daemon of t's own and arranges for Close at the end
// of t, with the tail of its log on failure.
func startDaemon(t *testing.T, name string, extraArgs ...string) *daemonProcess {
	t.Helper()
	requireDocker(t)
	d := newDaemon(name, extraArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s log (tail):\n%s", d.nodeID, d.LogTail(60))
		}
		if err := d.Close(); err != nil {
			t.Errorf("daemon cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	return d
}

// NodeID is the daemon's --node-id, the value of its containers'
// sandboxd.node label.
func (d *daemonProcess) NodeID() string { return d.nodeID }

// URL is the base URL of the daemon's API.
func (d *daemonProcess) URL() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return "http://127.0.0.1:" + strconv.Itoa(d.port)
}

// Token is the admin token the daemon wrote at its first start.
func (d *daemonProcess) Token() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.token
}

// Start launches the daemon and returns once /healthz answers, which is
// after its startup reconcile (the daemon reconciles before it serves). It
// keeps the previous port when that is still free and picks another one
// otherwise.
func (d *daemonProcess) Start(ctx context.Context) error {
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

func (d *daemonProcess) startOnce(ctx context.Context) error {
	d.mu.Lock()
	if d.cmd != nil {
		d.mu.Unlock()
		return errors.New("daemon already running")
	}
	if d.port == 0 {
		p, err := freePort()
		if err != nil {
			d.mu.Unlock()
			return err
		}
		d.port = p
	}
	tlsPort, err := freePort()
	if err != nil {
		d.mu.Unlock()
		return err
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.mu.Unlock()
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "---- e2e: starting %s on port %d at %s\n", d.nodeID, d.port, time.Now().Format(time.RFC3339Nano))

	args := append([]string{
		"--listen", "127.0.0.1:" + strconv.Itoa(d.port),
		"--tls-listen", "127.0.0.1:" + strconv.Itoa(tlsPort),
		"--data-dir", d.dataDir,
		"--node-id", d.nodeID,
		"--agent-binary", env.bins.toolboxd,
		"--log-level", "debug",
	}, d.args...)
	cmd := exec.Command(env.bins.sandboxd, args...)
	cmd.Env = hermeticEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies, the daemon dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("start %s: %w", env.bins.sandboxd, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.exitErr = err
		d.mu.Unlock()
		close(exited)
	}()
	d.cmd, d.exited = cmd, exited
	url := "http://127.0.0.1:" + strconv.Itoa(d.port)
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

// Kill sends SIGKILL and waits for the process to be gone. Killing a
// daemon that is not running does nothing.
func (d *daemonProcess) Kill() {
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
func (d *daemonProcess) Stop() error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd, d.exited = nil, nil
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
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
func (d *daemonProcess) Restart(ctx context.Context) error {
	d.Kill()
	return d.Start(ctx)
}

// Close stops the daemon (Stop), removes every container labelled with its
// node id, and removes its data directory. It is safe to call more than
// once.
func (d *daemonProcess) Close() error {
	err := d.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if rerr := removeContainers(ctx, d.nodeID); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if rerr := os.RemoveAll(d.dataDir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// LogTail returns the last n lines of the daemon's log (stdout and
// stderr of every start).
func (d *daemonProcess) LogTail(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitHealthy polls GET /healthz until it answers 200, the process exits,
// or ctx ends.
func waitHealthy(ctx context.Context, baseURL string, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: 2 * time.Second}
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

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// hermeticEnv is this process's environment without the variables the
// daemon and the CLI read, so the developer's settings do not leak in.
func hermeticEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SANDBOXD_") || strings.HasPrefix(kv, "SBX_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
