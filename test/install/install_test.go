// Package install_test checks `make install`, `make uninstall` and
// `make dist` from the outside: it runs them into temporary roots, looks
// at the tree they make, verifies the systemd unit with systemd-analyze,
// and starts the installed daemon, away from the source tree, on the
// installed config file.
package install_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Exit(m.Run())) }

// makeTimeout bounds one make run (a cold build of three binaries on a
// busy 2-core machine takes minutes).
const makeTimeout = 10 * time.Minute

// repoRoot is the checkout: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runMake runs make with args in the checkout, building into buildDir
// (never the checkout's bin/, which other tests and `make run` use).
func runMake(t *testing.T, buildDir string, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs make (builds the binaries); skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), makeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "BUILD_DIR=" + buildDir}, args...)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = daemontest.HermeticEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// wantMode checks that path exists with the permission bits perm.
func wantMode(t *testing.T, path string, perm fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if got := fi.Mode().Perm(); got != perm {
		t.Errorf("%s: mode %04o, want %04o", path, got, perm)
	}
}

func wantGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		t.Errorf("%s is still there", path)
	}
}

// TestInstall: make install into a temporary DESTDIR makes the tree the
// docs describe; a second install changes nothing of the operator's
// (config, data); uninstall removes what install put and keeps the config
// and the data directory.
func TestInstall(t *testing.T) {
	tmp := t.TempDir()
	build, root := filepath.Join(tmp, "build"), filepath.Join(tmp, "root")
	runMake(t, build, "install", "DESTDIR="+root)

	for _, b := range []string{"sandboxd", "sbx", "toolboxd"} {
		wantMode(t, filepath.Join(root, "usr/local/bin", b), 0o755)
	}
	unitPath := filepath.Join(root, "usr/local/lib/systemd/system/sandboxd.service")
	wantMode(t, unitPath, 0o644)
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"ExecStart=/usr/local/bin/sandboxd --config /etc/sandboxd/sandboxd.conf",
		"StateDirectory=sandboxd", "Requires=docker.service", "OOMScoreAdjust=-500",
	} {
		if !slices.Contains(strings.Split(string(unit), "\n"), line) {
			t.Errorf("unit has no line %q", line)
		}
	}
	// Under the default engine (--engine oci) the sandboxes are the
	// service's descendants: no seccomp filter or prctl flag of the unit
	// may reach them (crun could not make their namespaces; the agent
	// could not ptrace; a JIT could not map W+X memory).
	for _, d := range []string{"NoNewPrivileges=", "RestrictNamespaces=", "SystemCallFilter=", "SystemCallArchitectures=",
		"MemoryDenyWriteExecute=", "LockPersonality=", "RestrictRealtime=", "RestrictSUIDSGID=", "RestrictAddressFamilies="} {
		for _, line := range strings.Split(string(unit), "\n") {
			if strings.HasPrefix(line, d) {
				t.Errorf("unit sets %q, which every sandbox under --engine oci would inherit", line)
			}
		}
	}
	if bytes.Contains(unit, []byte("@BINDIR@")) || bytes.Contains(unit, []byte("@SYSCONFDIR@")) {
		t.Error("unit still has a @PLACEHOLDER@")
	}
	conf := filepath.Join(root, "etc/sandboxd/sandboxd.conf")
	wantMode(t, conf, 0o600)
	wantMode(t, filepath.Join(root, "var/lib/sandboxd"), 0o700)
	share := filepath.Join(root, "usr/local/share/sandboxd")
	for _, f := range []string{"scripts/build-images.sh", "scripts/setup-docker.sh", "scripts/setup-gvisor.sh", "scripts/setup-oci.sh"} {
		wantMode(t, filepath.Join(share, f), 0o755)
	}
	for _, f := range []string{"images/base/customize.sh", "images/base/packages", "images/busybox/passwd", "images/code-interpreter/server.py", "sandboxd.conf.example"} {
		wantMode(t, filepath.Join(share, f), 0o644)
	}
	// The installed build script hashes its recipe as the checkout's does,
	// so images built from either are current for both.
	recipe := func(script string) string {
		out, err := exec.Command(script, "--recipe", "base").Output()
		if err != nil {
			t.Fatalf("%s --recipe base: %v", script, err)
		}
		return strings.TrimSpace(string(out))
	}
	if a, b := recipe(filepath.Join(share, "scripts/build-images.sh")), recipe(filepath.Join(repoRoot(t), "scripts/build-images.sh")); a != b {
		t.Errorf("installed recipe hash %s, checkout's %s", a, b)
	}
	// The shipped config is one the daemon accepts.
	cfg, err := config.Parse([]string{"--config", conf}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("the installed config: %v", err)
	}
	if cfg.DataDir != "/var/lib/sandboxd" || !cfg.SandboxNetwork || cfg.DefaultTimeout != time.Hour {
		t.Errorf("installed config: data-dir %q, sandbox-network %v, default-timeout %v", cfg.DataDir, cfg.SandboxNetwork, cfg.DefaultTimeout)
	}

	// Again: the operator's config and data stay as they are.
	edited := []byte("# the operator's\ndata-dir = /srv/sandboxd\n")
	if err := os.WriteFile(conf, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(root, "var/lib/sandboxd/sandboxd.db")
	if err := os.WriteFile(keep, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	runMake(t, build, "install", "DESTDIR="+root)
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, edited) {
		t.Errorf("a second install changed the config:\n%s", got)
	}
	wantMode(t, conf, 0o600)
	wantMode(t, filepath.Join(root, "usr/local/bin/sandboxd"), 0o755)

	runMake(t, build, "uninstall", "DESTDIR="+root)
	for _, p := range []string{"usr/local/bin/sandboxd", "usr/local/bin/sbx", "usr/local/bin/toolboxd", "usr/local/lib/systemd/system/sandboxd.service", "usr/local/share/sandboxd"} {
		wantGone(t, filepath.Join(root, p))
	}
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, edited) {
		t.Errorf("uninstall changed the config: %q", got)
	}
	if got, _ := os.ReadFile(keep); string(got) != "data" {
		t.Errorf("uninstall touched the data directory: %q", got)
	}
	// Twice is fine too.
	runMake(t, build, "uninstall", "DESTDIR="+root)
}

// TestInstall_UnitVerifies: systemd-analyze verify accepts the unit
// without a warning. The unit is installed (no DESTDIR) under a temporary
// PREFIX, so that the binary ExecStart names exists where verify looks.
func TestInstall_UnitVerifies(t *testing.T) {
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	runMake(t, filepath.Join(tmp, "build"), "install", "PREFIX="+prefix, "SYSCONFDIR="+filepath.Join(tmp, "etc"), "LOCALSTATEDIR="+filepath.Join(tmp, "var"))
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is missing (make setup installs Debian's systemd): %v", err)
	}
	unit := filepath.Join(prefix, "lib/systemd/system/sandboxd.service")
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
}

// TestInstall_DaemonRuns: the installed daemon, started from a directory
// that is not the checkout on the installed config file (its addresses and
// data directory changed for the test), finds its agent beside itself and
// runs a sandbox.
func TestInstall_DaemonRuns(t *testing.T) {
	testenv.NeedsDocker(t)
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	runMake(t, filepath.Join(tmp, "build"), "install", "DESTDIR="+root)

	port, err := daemontest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tlsPort, err := daemontest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	shift, _ := strconv.Atoi(os.Getenv("SANDBOXD_TEST_PORT_SHIFT"))
	hostPorts := 54000 + max(shift, 0)
	node := fmt.Sprintf("install-%d", os.Getpid())
	testenv.TrackNode(t, node)
	dataDir, err := os.MkdirTemp(tmp, "d") // short: the agent sockets' paths stay short
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "etc/sandboxd/sandboxd.conf")
	rewriteConfig(t, conf, map[string]string{
		"data-dir":        dataDir,
		"listen":          "127.0.0.1:" + strconv.Itoa(port),
		"sandbox-network": "false", // no bridge of the test's own to clean up
		"node-id":         node,
		"tls-listen":      "127.0.0.1:" + strconv.Itoa(tlsPort),
		"host-ports":      fmt.Sprintf("%d-%d", hostPorts, hostPorts+9),
		"pool":            "none",
		"default-image":   "sandboxd/busybox:latest",
	})

	cwd := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "usr/local/bin/sandboxd"), "--config", conf)
	cmd.Dir = cwd
	cmd.Env = daemontest.HermeticEnv()
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(daemontest.StartTimeout)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the installed daemon exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the installed daemon did not answer /healthz within %v", daemontest.StartTimeout)
		}
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return v
	}
	sb := call("POST", "/v1/sandboxes", `{}`, http.StatusCreated)
	id, _ := sb["id"].(string)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "DELETE", base+"/v1/sandboxes/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	if sb["expires_at"] == nil {
		t.Errorf("a create without timeout_s has no expires_at: %v", sb)
	}
	res := call("POST", "/v1/sandboxes/"+id+"/exec", `{"command":"echo installed"}`, http.StatusOK)
	if res["stdout"] != "installed\n" || res["exit_code"] != float64(0) {
		t.Errorf("exec = %v", res)
	}
}

// rewriteConfig sets keys in the config file at path: a line of the key
// (commented out or not) is replaced, a key without one is appended.
func rewriteConfig(t *testing.T, path string, set map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	done := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		k, _, ok := strings.Cut(strings.TrimLeft(line, "# "), " =")
		if v, want := set[k]; ok && want && !done[k] {
			line, done[k] = k+" = "+v, true
		}
		out = append(out, line)
	}
	for k, v := range set {
		if !done[k] {
			out = append(out, k+" = "+v)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDist: make dist makes the archive and SHA256SUMS; the sums check; the
// archive holds the binaries (built with -trimpath and the version), the
// unit, the example config, the README and what the daemon needs at run
// time; two runs give the same bytes.
func TestDist(t *testing.T) {
	tmp := t.TempDir()
	build := filepath.Join(tmp, "build")
	dist1, dist2 := filepath.Join(tmp, "dist1"), filepath.Join(tmp, "dist2")
	runMake(t, build, "dist", "DIST_DIR="+dist1)
	runMake(t, build, "dist", "DIST_DIR="+dist2)

	sums, err := os.ReadFile(filepath.Join(dist1, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(sums))
	if len(fields) != 2 || !strings.HasPrefix(fields[1], "sandboxd-") || !strings.HasSuffix(fields[1], "-linux-"+goarch(t)+".tar.gz") {
		t.Fatalf("SHA256SUMS = %q, want one line for sandboxd-<version>-linux-%s.tar.gz", sums, goarch(t))
	}
	archive := fields[1]
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist1
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	if sums2, _ := os.ReadFile(filepath.Join(dist2, "SHA256SUMS")); !bytes.Equal(sums, sums2) {
		t.Errorf("two runs of make dist differ:\n%s\n%s", sums, sums2)
	}

	out, err := exec.Command("tar", "-tzvf", filepath.Join(dist1, archive)).Output()
	if err != nil {
		t.Fatal(err)
	}
	top := strings.TrimSuffix(archive, ".tar.gz") + "/"
	got := map[string]string{} // path -> mode string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		got[strings.TrimPrefix(f[len(f)-1], top)] = f[0]
	}
	for path, mode := range map[string]string{
		"bin/sandboxd": "-rwxr-xr-x", "bin/sbx": "-rwxr-xr-x", "bin/toolboxd": "-rwxr-xr-x",
		"sandboxd.service": "-rw-r--r--", "sandboxd.conf": "-rw-r--r--", "README.md": "-rw-r--r--",
		"share/sandboxd/scripts/build-images.sh": "-rwxr-xr-x", "share/sandboxd/images/base/packages": "-rw-r--r--",
	} {
		if got[path] != mode {
			t.Errorf("archive entry %s: %q, want %q", path, got[path], mode)
		}
	}
	for path := range got {
		if strings.HasPrefix(path, "etc/") || strings.HasPrefix(path, "var/") || strings.Contains(path, "__pycache__") {
			t.Errorf("archive holds %s", path)
		}
	}

	x := filepath.Join(tmp, "x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xzf", filepath.Join(dist1, archive), "-C", x).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	bin := filepath.Join(x, top, "bin/sandboxd")
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-trimpath=true", "CGO_ENABLED=0"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("go version -m bin/sandboxd has no %q", want)
		}
	}
	// -ldflags is not recorded under -trimpath; the stamped version is in
	// the binary's data.
	version := strings.TrimSuffix(strings.TrimPrefix(archive, "sandboxd-"), "-linux-"+goarch(t)+".tar.gz")
	if b, err := os.ReadFile(bin); err != nil || !bytes.Contains(b, []byte(version)) {
		t.Errorf("bin/sandboxd does not carry its version %q (%v)", version, err)
	}
	unit, _ := os.ReadFile(filepath.Join(x, top, "sandboxd.service"))
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/sandboxd --config /etc/sandboxd/sandboxd.conf")) {
		t.Errorf("the archive's unit is not for /usr/local:\n%s", unit)
	}
}

func goarch(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
