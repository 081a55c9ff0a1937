package oci_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

func spec(id string) runtime.Spec {
	return runtime.Spec{
		SandboxID: id, Image: testImage, CPU: 0.5, MemoryMB: 128, PidsLimit: 64, DiskMB: 64,
		AgentBinary: env.agent, AgentToken: "tok-" + id,
	}
}

// leftovers lists what of sandbox id is still on the host: its
// directory (or a temporary one), socket directory, cgroups, mounts, the
// OCI runtime's state and processes.
func leftovers(t *testing.T, rt *oci.Runtime, id string) []string {
	t.Helper()
	var left []string
	if _, err := os.Lstat(rt.BundleDir(id)); err == nil {
		left = append(left, "sandbox dir")
	}
	if m, _ := filepath.Glob(filepath.Join(env.dir, "sandboxes", ".tmp-"+id+"-*")); len(m) > 0 {
		left = append(left, "temporary sandbox dir")
	}
	if _, err := os.Lstat(rt.SocketDir(id)); err == nil {
		left = append(left, "socket dir")
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/sandboxd/*-" + id); len(m) > 0 {
		left = append(left, fmt.Sprintf("cgroups %v", m))
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/sandboxd/*-" + id); len(m) > 0 {
		left = append(left, fmt.Sprintf("cgroups %v", m))
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), id) {
		left = append(left, "mounts")
	}
	if m, _ := filepath.Glob(filepath.Join(env.dir, "state", "*", id)); len(m) > 0 {
		left = append(left, fmt.Sprintf("OCI runtime state %v", m))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); strings.Contains(string(b), id) && len(f) > 0 && f[0] != "Z" {
			// A zombie is dead; its parent reaps it.
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+" "+string(stat))
		}
	}
	return left
}

// TestCreate_FailureAtEveryStepLeavesNothing fails Create at each of its
// steps in turn: the error names the step and nothing of the sandbox is
// left on the host.
func TestCreate_FailureAtEveryStepLeavesNothing(t *testing.T) {
	requireEnv(t)
	for _, step := range []string{"image", "claim", "socket dir", "rootfs", "network", "config", "started"} {
		t.Run(strings.ReplaceAll(step, " ", "_"), func(t *testing.T) {
			t.Parallel()
			rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
			injected := errors.New("injected fault")
			rt.SetFault(func(s string) error {
				if s == step {
					return injected
				}
				return nil
			})
			id := runtimetest.NewSandboxID()
			_, err := rt.Create(t.Context(), spec(id))
			if !errors.Is(err, injected) || !strings.Contains(err.Error(), step) {
				t.Fatalf("Create = %v, want the injected fault at %q", err, step)
			}
			if left := leftovers(t, rt, id); len(left) > 0 {
				t.Errorf("after a failure at %q: left %v", step, left)
			}
			if st, err := rt.Inspect(t.Context(), id); err != nil || st.State != runtime.StateMissing {
				t.Errorf("Inspect = %+v, %v; want missing", st, err)
			}
			// And the id is free again: a retry succeeds.
			rt.SetFault(nil)
			if _, err := rt.Create(t.Context(), spec(id)); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if err := rt.Destroy(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			if left := leftovers(t, rt, id); len(left) > 0 {
				t.Errorf("after Destroy: left %v", left)
			}
		})
	}
}

// Environment of TestAdopt_AfterSIGKILL's child.
const (
	envChildDir     = "SANDBOXD_TEST_OCI_CHILD_DIR"
	envChildSockets = "SANDBOXD_TEST_OCI_CHILD_SOCKETS"
	envChildNode    = "SANDBOXD_TEST_OCI_CHILD_NODE"
	envChildID      = "SANDBOXD_TEST_OCI_CHILD_ID"
)

// TestAdoptChild is the child process of TestAdopt_AfterSIGKILL: it
// creates a sandbox, says so, and waits to be killed.
func TestAdoptChild(t *testing.T) {
	if os.Getenv(envChildDir) == "" {
		t.Skip("the child of TestAdopt_AfterSIGKILL")
	}
	rt, err := oci.New(oci.Options{Client: env.cli, NodeID: os.Getenv(envChildNode), Dir: env.dir, SocketRoot: env.socketRoot, ImageSealer: env.sealer})
	if err != nil {
		t.Fatal(err)
	}
	id := os.Getenv(envChildID)
	if _, err := rt.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY", id)
	time.Sleep(10 * time.Minute)
}

// TestAdopt_AfterSIGKILL: a process that created a sandbox is killed
// with SIGKILL; the sandbox runs on, and a new runtime (a restarted
// daemon) finds it, reaches its agent, stops, starts and destroys it,
// leaving nothing.
func TestAdopt_AfterSIGKILL(t *testing.T) {
	requireEnv(t)
	node := "node-" + runtimetest.NewSandboxID()[3:]
	id := runtimetest.NewSandboxID()
	rt := newRuntime(t, runtimetest.Options{NodeID: node})
	t.Cleanup(func() { _ = rt.Destroy(context.Background(), id) })

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAdoptChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildDir+"="+env.dir, envChildSockets+"="+env.socketRoot,
		envChildNode+"="+node, envChildID+"="+id, runtimetest.EnvAgentBinary+"="+env.agent)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := false
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if sc.Text() == "READY "+id {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatal("the child never created its sandbox")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	list, err := rt.ListOurs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].SandboxID != id || list[0].State != runtime.StateRunning {
		t.Fatalf("ListOurs after the creator's SIGKILL = %+v, want %s running", list, id)
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, "tok-"+id)
	defer c.Close()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo adopted"}, Timeout: 30 * time.Second})
	if err != nil || string(res.Stdout) != "adopted\n" {
		t.Fatalf("exec in the adopted sandbox: %v, %+v", err, res)
	}
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st, _ := rt.Inspect(ctx, id); st.State != runtime.StateExited {
		t.Errorf("after Stop: %+v, want exited", st)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if left := leftovers(t, rt, id); len(left) > 0 {
		t.Errorf("after Destroy: left %v", left)
	}
}

// TestDiskFull_StopStartDestroyStillWork: a sandbox that filled its disk
// limit is still stopped, started (its agent answers) and destroyed: the
// daemon's own files of it are outside what the limit counts.
func TestDiskFull_StopStartDestroyStillWork(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	if lim, _ := rt.DiskLimits(t.Context()); !lim.Enforced {
		t.Skipf("SKIP: no disk limit here: %s", lim.How)
	}
	id := runtimetest.NewSandboxID()
	sp := spec(id)
	sp.DiskMB = 32
	if _, err := rt.Create(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	if out := execIn(t, rt, id, "dd if=/dev/zero of=/fill bs=1M count=64 2>&1; sync; echo done"); !strings.Contains(out, "done") {
		t.Fatalf("fill: %q", out)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatalf("Stop of a sandbox with a full disk: %v", err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatalf("Start of a sandbox with a full disk: %v", err)
	}
	if out := execIn(t, rt, id, "rm /fill && echo freed"); out != "freed\n" {
		t.Errorf("after Start: %q", out)
	}
	if err := rt.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, rt, id); len(left) > 0 {
		t.Errorf("after Destroy: left %v", left)
	}
}

// TestImage_ConcurrentCreatesShareOneUnpack: the first creates of an
// image, at once, wait for one unpack; a crash's temporary directories
// are swept at start, one in progress is not.
func TestImage_ConcurrentCreatesShareOneUnpack(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	imgs := filepath.Join(dir, "images")
	if err := os.MkdirAll(filepath.Join(imgs, ".tmp-crashed"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(imgs, ".tmp-crashed"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(imgs, ".tmp-in-progress"), 0o700); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Dir = dir })
	if _, err := os.Stat(filepath.Join(imgs, ".tmp-crashed")); err == nil {
		t.Errorf("a crashed unpack's directory survived New")
	}
	if _, err := os.Stat(filepath.Join(imgs, ".tmp-in-progress")); err != nil {
		t.Errorf("a recent temporary directory was swept: %v", err)
	}
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := rt.Create(t.Context(), spec(runtimetest.NewSandboxID()))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Create: %v", err)
		}
	}
	if got := rt.Unpacks(); got != 1 {
		t.Errorf("%d concurrent first creates of one image made %d unpacks, want 1", n, got)
	}
	entries, _ := os.ReadDir(imgs)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 3 { // <id>, <id>.json, .tmp-in-progress
		t.Errorf("images dir holds %v, want the image, its config and the directory in progress", names)
	}
}

// TestCommit_NewSandboxFromTheImage: a sandbox's file system committed as
// an image (with only the configuration asked for) starts a new sandbox
// holding what the first wrote; the first runs on, thawed.
func TestCommit_NewSandboxFromTheImage(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	ctx := t.Context()
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(ctx, spec(id)); err != nil {
		t.Fatal(err)
	}
	execIn(t, rt, id, `mkdir -p /data && echo "from $HOSTNAME" > /data/hello && ln /data/hello /data/again`)
	ref := "sandboxd/oci-commit-test:" + id
	t.Cleanup(func() {
		_, _ = env.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	img, err := rt.Commit(ctx, id, ref, runtime.ImageConfig{Env: []string{"PATH=/bin:/usr/bin", "GREETING=a \"quoted\" $value"}, WorkingDir: "/work", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !slices.Contains(img.Config.Env, `GREETING=a "quoted" $value`) || img.Config.WorkingDir != "/work" || img.Config.Labels["k"] != "v" {
		t.Errorf("image config = %+v", img.Config)
	}
	for _, e := range img.Config.Env {
		if strings.HasPrefix(e, runtime.EnvAgentToken) {
			t.Errorf("the image carries the agent token: %q", e)
		}
	}
	if st, _ := rt.Inspect(ctx, id); st.State != runtime.StateRunning || st.Paused {
		t.Errorf("after Commit the sandbox is %+v, want running", st)
	}
	id2 := runtimetest.NewSandboxID()
	sp := spec(id2)
	sp.Image = ref
	if _, err := rt.Create(ctx, sp); err != nil {
		t.Fatalf("Create from the committed image: %v", err)
	}
	if got := execIn(t, rt, id2, `cat /data/hello; echo "$GREETING"; stat -c %h /data/again`); !strings.HasPrefix(got, "from sandbox-") || !strings.Contains(got, "a \"quoted\" $value\n2\n") {
		t.Errorf("in the new sandbox: %q", got)
	}
}

// TestBinary_SandboxKeepsTheRuntimeThatMadeIt: a daemon restarted with
// another OCI runtime (crun installed after runc ran its sandboxes)
// pauses, stops, starts and destroys the sandboxes the first made.
func TestBinary_SandboxKeepsTheRuntimeThatMadeIt(t *testing.T) {
	requireEnv(t)
	runc, err1 := exec.LookPath("runc")
	crun, err2 := exec.LookPath("crun")
	if err1 != nil || err2 != nil {
		t.Skip("SKIP: needs both runc and crun")
	}
	node := "node-" + runtimetest.NewSandboxID()[3:]
	first := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *oci.Options) { o.Binary = runc })
	id := runtimetest.NewSandboxID()
	if _, err := first.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *oci.Options) { o.Binary = crun })
	ctx := t.Context()
	if err := rt.Pause(ctx, id); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := rt.Resume(ctx, id); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if left := leftovers(t, rt, id); len(left) > 0 {
		t.Errorf("after Destroy: left %v", left)
	}
}

// zombieChildren lists this process's zombie children, whatever their
// names (runsc's re-executed helpers show as "exe").
func zombieChildren() []string {
	var out []string
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, tk := range tasks {
		b, _ := os.ReadFile(filepath.Join("/proc/self/task", tk.Name(), "children"))
		for _, p := range strings.Fields(string(b)) {
			st, _ := os.ReadFile("/proc/" + p + "/stat")
			s := string(st)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || len(s) < i+3 || s[i+2] != 'Z' {
				continue
			}
			out = append(out, p+"("+s[strings.IndexByte(s, '(')+1:i]+")")
		}
	}
	return out
}

// TestGVisor_NoZombiesLeft: gVisor sandboxes created and destroyed in a
// loop leave no zombie child under the daemon (runsc's gofer and the
// helpers its commands re-execute are handed to it as the subreaper).
func TestGVisor_NoZombiesLeft(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("no runsc")
	}
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	for range 4 {
		id := runtimetest.NewSandboxID()
		s := spec(id)
		s.Isolation = runtime.IsolationGVisor
		s.MemoryMB, s.PidsLimit = runtime.MinGVisorMemoryMB, runtime.MinGVisorPidsLimit
		if _, err := rt.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if err := rt.Stop(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if err := rt.Destroy(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for z := zombieChildren(); len(z) > 0; z = zombieChildren() {
		if time.Now().After(deadline) {
			t.Fatalf("zombie children 30s after the last destroy: %v", z)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestImage_StalledExportEnds: an export the engine stops sending (as it
// may for an image's FIFO; here a proxy in front of the engine stalls it)
// fails Create with ErrUnavailable once nothing came for exportIdle, and
// leaves no export container behind.
func TestImage_StalledExportEnds(t *testing.T) {
	requireEnv(t)
	ref := "sandboxd-oci-test-stall:" + strings.ToLower(runtimetest.NewSandboxID()[3:])
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+testImage+"\nLABEL t="+ref+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", ref, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	// The proxy: every call to the engine but an export goes through.
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	engine := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(env.cli.DaemonHost(), "unix://"))
		}},
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/export") {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		engine.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cli, err := client.New(client.WithHost("unix://" + sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	old := oci.SetExportIdle(3 * time.Second)
	t.Cleanup(func() { oci.SetExportIdle(old) })
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]}, func(o *oci.Options) { o.Client = cli })
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Image = ref
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := rt.Create(ctx, s); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("Create with a stalled export: %v, want ErrUnavailable", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("Create with a stalled export still blocked after 90s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "ancestor="+ref).Output()
		if len(strings.TrimSpace(string(out))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("export containers of %s left: %s", ref, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
