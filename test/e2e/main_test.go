// Package e2e_test drives the built binaries end to end: a real sandboxd
// (a child process on 127.0.0.1 with its own data directory and node id), a
// real Docker engine, the Go SDK over real HTTP, and the sbx binary (under a
// pseudo-terminal for `sbx shell`).
//
// TestMain builds bin/sandboxd, bin/toolboxd and bin/sbx from this checkout
// into a temporary directory. Tests share one daemon where they can
// (sharedDaemon); a test that kills its daemon starts its own. Every daemon
// is killed at the end and every container it labelled with its node id is
// removed, whatever the outcome.
//
// Without a reachable Docker engine the tests skip, unless CI is set, in
// which case they fail: CI machines are expected to have Docker.
package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Images built by scripts/build-images.sh.
const (
	busyboxImage = "sandboxd/busybox:latest"
	baseImage    = "sandboxd/base:bookworm"
)

// buildTimeout bounds `go build` of the three binaries (cold caches on a
// 2-core machine take a few minutes).
const buildTimeout = 8 * time.Minute

// env is what TestMain prepared for every test.
var env struct {
	bins      binaries
	root      string // temporary directory for binaries, logs and data dirs
	dockerErr error  // non-nil when Docker is unreachable

	sharedOnce sync.Once
	shared     *daemonProcess
	sharedErr  error
}

// binaries are the paths of the freshly built executables.
type binaries struct {
	sandboxd, toolboxd, sbx string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if testenv.Short() {
		// Every test needs the engine and skips (requireDocker); no point building.
		return m.Run()
	}
	env.dockerErr = pingDocker()
	if env.dockerErr != nil && os.Getenv("CI") == "" {
		// Tests skip one by one (requireDocker); no point building.
		return m.Run()
	}
	root, err := os.MkdirTemp("", "sbxe2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(root)
	env.root = root
	if env.bins, err = buildBinaries(filepath.Join(root, "bin")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build:", err)
		return 1
	}
	code := m.Run()
	if env.shared != nil {
		if err := env.shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: shared daemon cleanup:", err)
			code = 1
		}
	}
	if code != 0 {
		keepLogs(root)
	}
	return code
}

// keepLogs copies the daemons' logs out of root, which is about to be
// removed, and says where they are: a failure is debugged from them.
func keepLogs(root string) {
	logs, _ := filepath.Glob(filepath.Join(root, "*.log"))
	if len(logs) == 0 {
		return
	}
	dir, err := os.MkdirTemp("", "sandboxd-e2e-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: keep logs:", err)
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	fmt.Fprintf(os.Stderr, "e2e: daemon logs kept in %s\n", dir)
}

// requireDocker skips t under -short and when Docker is unreachable outside
// CI, and fails it in CI.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedsDocker(t)
	if env.dockerErr == nil {
		return
	}
	if os.Getenv("CI") == "" {
		t.Skipf("skipping: Docker is unreachable (%v); these tests need a Docker engine (set CI=1 to make this a failure)", env.dockerErr)
	}
	t.Fatalf("Docker is unreachable and CI is set: %v", env.dockerErr)
}

// sharedDaemon returns the daemon shared by the tests that do not kill
// theirs, starting it on first use. TestMain closes it.
func sharedDaemon(t *testing.T) *daemonProcess {
	t.Helper()
	requireDocker(t)
	env.sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		env.shared = newDaemon("shared")
		env.sharedErr = env.shared.Start(ctx)
	})
	if env.sharedErr != nil {
		t.Fatalf("start shared daemon: %v\nlog:\n%s", env.sharedErr, env.shared.LogTail(40))
	}
	return env.shared
}

// pingDocker reports whether the Docker engine answers, and whether the
// test images are present.
func pingDocker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		return fmt.Errorf("docker version: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for _, img := range []string{busyboxImage, baseImage} {
		if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", img).CombinedOutput(); err != nil {
			return fmt.Errorf("image %s missing (run scripts/build-images.sh): %w: %s", img, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// buildBinaries builds the daemon, the agent and the CLI of this checkout
// into dir, statically (the agent runs inside arbitrary images).
func buildBinaries(dir string) (binaries, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return binaries{}, fmt.Errorf("not inside a module (go env GOMOD = %q)", gomod)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/sandboxd", "./cmd/toolboxd", "./cmd/sbx")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return binaries{}, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return binaries{
		sandboxd: filepath.Join(dir, "sandboxd"),
		toolboxd: filepath.Join(dir, "toolboxd"),
		sbx:      filepath.Join(dir, "sbx"),
	}, nil
}

// testContext returns t's context bounded by d: every test has a deadline
// of its own, well inside go test's -timeout.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
