package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// The fault tests perform each fault (engine, disk, store) against a real
// daemon of the test's own: the engine cut off (through a socket proxy
// of the test's), the database made read-only under it, its data dir's
// filesystem filled. Each answers 503 unavailable naming its cause,
// /readyz says so while it lasts, and both clear when the fault does.

// faultDeadline bounds each wait for a condition (readiness follows the
// probes, which run at most every few seconds).
const faultDeadline = 60 * time.Second

// TestFault_EngineUnreachable: with the engine cut off, create (on the
// three APIs), a snapshot and an image pull answer 503 naming the engine,
// and /readyz is 503 with cause engine: the engine holds the images on
// either engine (--engine oci resolves and unpacks them through it, and
// commits into it). Exec in a running sandbox goes on (it talks to the
// sandbox's agent, not the engine). Destroy, and exec once the daemon
// restarted meanwhile, depend on the engine: under Docker they answer
// 503 naming it (the container is the engine's; a restarted daemon asks
// the engine who the agent is before it trusts the socket), under
// --engine oci they work (the runtime finds its sandboxes, their agents'
// pids and everything to remove in its own files). Restored: /readyz is
// 200, the destroys retried finish and a create works.
func TestFault_EngineUnreachable(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	proxy := startEngineProxy(t, engineSocket())
	d := newDaemon("engine")
	d.Env = []string{"DOCKER_HOST=unix://" + proxy.path}
	startOwnDaemon(ctx, t, d)
	// Whether the sandboxes' lifecycle runs without the engine.
	engineFree := d.Engine() == "oci"

	waitReady(ctx, t, d, http.StatusOK, "")
	sb := createRaw(ctx, t, d)
	t.Cleanup(func() { _, _ = call(context.Background(), d, http.MethodDelete, "/v1/sandboxes/"+sb, nil) })
	sb2 := createRaw(ctx, t, d)
	t.Cleanup(func() { _, _ = call(context.Background(), d, http.MethodDelete, "/v1/sandboxes/"+sb2, nil) })

	proxy.cut()
	status, body := call(ctx, d, http.MethodPost, "/v1/sandboxes", map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128})
	wantFault(t, "create", status, body, "engine")
	// The facades answer in their SDKs' shapes, naming the cause too.
	status, body = call(ctx, d, http.MethodPost, "/sandboxes", map[string]any{})
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":503`) || !strings.Contains(string(body), "(cause: engine)") {
		t.Errorf("E2B create with the engine cut off: %d %s; want 503 {code: 503} naming the engine", status, body)
	}
	status, body = call(ctx, d, http.MethodPost, "/daytona/api/sandbox", map[string]any{})
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"statusCode":503`) || !strings.Contains(string(body), "(cause: engine)") {
		t.Errorf("Daytona create with the engine cut off: %d %s; want 503 {statusCode: 503} naming the engine", status, body)
	}
	status, body = call(ctx, d, http.MethodPost, "/v1/sandboxes/"+sb+"/snapshots", map[string]any{})
	wantFault(t, "snapshot", status, body, "engine")
	status, body = call(ctx, d, http.MethodPost, "/v1/images/pull", map[string]any{"ref": busyboxImage})
	wantFault(t, "image pull", status, body, "engine")
	status, body = call(ctx, d, http.MethodPost, "/v1/sandboxes/"+sb+"/exec", map[string]any{"command": "echo still-here"})
	if status != http.StatusOK || !strings.Contains(string(body), "still-here") {
		t.Errorf("exec in a running sandbox with the engine cut off: %d %s; want 200 (the agent answers)", status, body)
	}
	status, body = call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb2, nil)
	if engineFree {
		if status != http.StatusNoContent {
			t.Errorf("destroy with the engine cut off, under --engine oci: %d %s; want 204 (the engine holds nothing of a sandbox)", status, body)
		}
	} else {
		wantFault(t, "destroy", status, body, "engine")
	}
	waitReady(ctx, t, d, http.StatusServiceUnavailable, "engine")

	// A daemon restarted meanwhile has not met the sandbox's agent yet:
	// under Docker it asks the engine who the agent is before it trusts
	// the socket, so its exec needs the engine, and says so; the oci
	// runtime knows the agent's pid from its own files.
	d.Kill()
	sctx, cancel := context.WithTimeout(ctx, daemontest.StartTimeout)
	if err := d.Start(sctx); err != nil {
		cancel()
		t.Fatalf("restart the daemon with the engine cut off: %v", err)
	}
	cancel()
	status, body = call(ctx, d, http.MethodPost, "/v1/sandboxes/"+sb+"/exec", map[string]any{"command": "echo still-here"})
	if engineFree {
		if status != http.StatusOK || !strings.Contains(string(body), "still-here") {
			t.Errorf("exec after a restart with the engine cut off, under --engine oci: %d %s; want 200", status, body)
		}
	} else {
		wantFault(t, "exec after a restart, with the engine cut off", status, body, "engine")
	}
	status, body = call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb, nil)
	if engineFree {
		if status != http.StatusNoContent {
			t.Errorf("destroy after a restart with the engine cut off, under --engine oci: %d %s; want 204", status, body)
		}
		if left, err := d.Leftovers(ctx, nil, sb, sb2); err != nil || len(left) > 0 {
			t.Errorf("destroyed with the engine cut off, the sandboxes left %v (%v)", left, err)
		}
	} else {
		wantFault(t, "destroy during the startup repair", status, body, "engine")
	}
	waitReady(ctx, t, d, http.StatusServiceUnavailable, "engine")

	proxy.restore(t)
	waitReady(ctx, t, d, http.StatusOK, "")
	// The destroy cut short marked the sandbox gone; its retry finishes
	// the teardown (204, or 404: "not the call that destroyed it").
	for _, id := range []string{sb, sb2} {
		if status, body := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+id, nil); status != http.StatusNoContent && status != http.StatusNotFound {
			t.Errorf("the destroy of %s retried once the engine is back: %d %s; want 204 or 404", id, status, body)
		}
	}
	waitNoContainers(ctx, t, d)
	again := createRaw(ctx, t, d)
	if status, body := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+again, nil); status != http.StatusNoContent {
		t.Errorf("destroy once the engine is back: %d %s", status, body)
	}
}

// TestFault_StoreReadOnly: with the database and its WAL made immutable
// under the running daemon (chattr +i: ext4 refuses writes through the
// descriptors SQLite holds, as a read-only store would), a create
// answers 503 naming the store, leaves no container, and /readyz is 503
// with cause store; writable again, both clear.
func TestFault_StoreReadOnly(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := newDaemon("store")
	var fs unix.Statfs_t
	if err := unix.Statfs(d.DataDir(), &fs); err != nil || fs.Type != unix.EXT4_SUPER_MAGIC || os.Geteuid() != 0 {
		_ = d.Close()
		t.Skip("needs root and an ext4 data dir (chattr +i on files open for writing)")
	}
	startOwnDaemon(ctx, t, d)
	waitReady(ctx, t, d, http.StatusOK, "")

	db := filepath.Join(d.DataDir(), "sandboxd.db")
	files := []string{db, db + "-wal"}
	chattr(t, "+i", files...)
	// Before the daemon's cleanup (registered earlier, so run later):
	// an immutable file cannot be removed.
	t.Cleanup(func() { _ = exec.Command("chattr", append([]string{"-i"}, files...)...).Run() })

	status, body := call(ctx, d, http.MethodPost, "/v1/sandboxes", map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128})
	wantFault(t, "create", status, body, "store")
	waitReady(ctx, t, d, http.StatusServiceUnavailable, "store")
	waitNoContainers(ctx, t, d)

	chattr(t, "-i", files...)
	waitReady(ctx, t, d, http.StatusOK, "")
	sb := createRaw(ctx, t, d)
	if status, body := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb, nil); status != http.StatusNoContent {
		t.Errorf("destroy once the store is writable: %d %s", status, body)
	}
}

// TestFault_DiskFull: the daemon's data dir is a small tmpfs of the
// test's, which the test fills: writes answer 503 naming the disk (a
// create among them, leaving no container), /readyz is 503 with cause
// disk; with the space freed, both clear.
func TestFault_DiskFull(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	ctx := testContext(t, 5*time.Minute)
	d := newDaemon("disk")
	if err := unix.Mount("tmpfs", d.DataDir(), "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		_ = d.Close()
		t.Skipf("mount a tmpfs: %v", err)
	}
	unmount := sync.OnceValue(func() error { return unix.Unmount(d.DataDir(), unix.MNT_DETACH) })
	t.Cleanup(func() { _ = unmount() }) // last: when the start failed
	startOwnDaemon(ctx, t, d)
	t.Cleanup(func() {
		// Before the daemon's Close removes the data dir: the daemon
		// stopped, then the tmpfs unmounted.
		if err := d.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := unmount(); err != nil {
			t.Errorf("unmount the data dir: %v", err)
		}
	})
	waitReady(ctx, t, d, http.StatusOK, "")

	filler := filepath.Join(d.DataDir(), "filler")
	fillDisk(t, filler)
	waitReady(ctx, t, d, http.StatusServiceUnavailable, "disk")
	// Writes until the database's WAL needs a page the disk cannot give:
	// tokens are the cheapest write there is.
	var status int
	var body []byte
	for i := 0; i < 20000; i++ {
		status, body = call(ctx, d, http.MethodPost, "/v1/tokens", map[string]any{"name": fmt.Sprintf("t%d", i), "role": "user", "owner": "filler"})
		if status != http.StatusCreated {
			break
		}
	}
	wantFault(t, "a write on a full disk", status, body, "disk")
	status, body = call(ctx, d, http.MethodPost, "/v1/sandboxes", map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128})
	wantFault(t, "create on a full disk", status, body, "disk")
	waitNoContainers(ctx, t, d)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitReady(ctx, t, d, http.StatusOK, "")
	sb := createRaw(ctx, t, d)
	if status, body := call(ctx, d, http.MethodDelete, "/v1/sandboxes/"+sb, nil); status != http.StatusNoContent {
		t.Errorf("destroy once space is freed: %d %s", status, body)
	}
}

// startOwnDaemon starts d and closes it at the end of t (Close after
// any cleanup registered later), with its log's tail when t failed.
func startOwnDaemon(ctx context.Context, t *testing.T, d *daemonProcess) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s log (tail):\n%s", d.NodeID(), d.LogTail(60))
		}
		if err := d.Close(); err != nil {
			t.Errorf("daemon cleanup: %v", err)
		}
	})
	sctx, cancel := context.WithTimeout(ctx, daemontest.StartTimeout)
	defer cancel()
	if err := d.Start(sctx); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
}

// call sends one API request to d as its admin and returns the status
// and the body; a transport error is status 0 with the error as body.
func call(ctx context.Context, d *daemonProcess, method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// createRaw creates a busybox sandbox on d and returns its id.
func createRaw(ctx context.Context, t *testing.T, d *daemonProcess) string {
	t.Helper()
	status, body := call(ctx, d, http.MethodPost, "/v1/sandboxes", map[string]any{"image": busyboxImage, "cpu": 0.25, "memory_mb": 128})
	var sb struct {
		ID string `json:"id"`
	}
	if status != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.ID == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	return sb.ID
}

// wantFault checks a native error answer: 503, code unavailable,
// retryable, a message naming cause.
func wantFault(t *testing.T, what string, status int, body []byte, cause string) {
	t.Helper()
	var e struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if status != http.StatusServiceUnavailable || e.Error.Code != "unavailable" || !e.Error.Retryable ||
		!strings.Contains(e.Error.Message, "(cause: "+cause+")") {
		t.Errorf("%s: %d %s; want 503 unavailable, retryable, naming cause %q", what, status, body, cause)
	}
}

// waitReady waits until /readyz answers status, with cause when it is
// not 200.
func waitReady(ctx context.Context, t *testing.T, d *daemonProcess, status int, cause string) {
	t.Helper()
	deadline := time.Now().Add(faultDeadline)
	var got int
	var body []byte
	for time.Now().Before(deadline) && ctx.Err() == nil {
		got, body = call(ctx, d, http.MethodGet, "/readyz", nil)
		var r struct {
			Status string `json:"status"`
			Cause  string `json:"cause"`
		}
		_ = json.Unmarshal(body, &r)
		// "unavailable" after the startup repair, "starting" until it
		// (a restart while the fault lasts): either names the cause.
		if got == status && (status == http.StatusOK || r.Cause == cause) {
			return
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, not timing one
	}
	t.Fatalf("/readyz: %d %s; want %d with cause %q", got, body, status, cause)
}

// waitNoContainers waits until d's node has no container (under
// --engine oci, no trace of a sandbox): a create the fault refused left
// none.
func waitNoContainers(ctx context.Context, t *testing.T, d *daemonProcess) {
	t.Helper()
	deadline := time.Now().Add(faultDeadline)
	for {
		left, err := d.Leftovers(ctx, nil)
		if err == nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers of node %s left after a refused create: %v %v", d.NodeID(), left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func chattr(t *testing.T, flag string, paths ...string) {
	t.Helper()
	if out, err := exec.Command("chattr", append([]string{flag}, paths...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s: %v: %s", flag, err, out)
	}
}

// fillDisk writes path until its filesystem has no space left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill the data dir: %v", err)
			}
			return
		}
	}
}

// engineSocket is the engine's unix socket, as the tests' environment
// names it (DOCKER_HOST) or Docker's default.
func engineSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		return h
	}
	return "/var/run/docker.sock"
}

// engineProxy is a unix socket of the test's own that forwards every
// connection to the engine's socket, and that the test can cut (the
// listener closed, its socket file removed, every connection through it
// closed) and restore, as if the engine died and came back.
type engineProxy struct {
	path, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startEngineProxy(t *testing.T, target string) *engineProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "ep") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	p := &engineProxy{path: filepath.Join(dir, "docker.sock"), target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		p.cut()
		os.RemoveAll(dir)
	})
	p.restore(t)
	return p
}

// restore listens again.
func (p *engineProxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.pipe(c)
			}()
		}
	}()
}

// pipe forwards c to the engine until either side closes.
func (p *engineProxy) pipe(c net.Conn) {
	e, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		e.Close()
		return
	}
	p.conns[c], p.conns[e] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(e, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, e); done <- struct{}{} }()
	<-done
	c.Close()
	e.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, e)
	p.mu.Unlock()
}

// cut stops the proxy: no listener, no socket file, no connection.
func (p *engineProxy) cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close() // removes the socket file
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
