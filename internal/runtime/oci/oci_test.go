package oci_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// testImage is the small image the suite runs (scripts/build-images.sh).
const testImage = "sandboxd/busybox:latest"

// EnvDir names the directory the tests keep the runtime's files in; by
// default a fresh one under /var/lib/sandboxd-oci/root (the btrfs file
// system scripts/setup-oci.sh makes, so that disk limits are tested),
// else under the system's temporary directory.
const EnvDir = "SANDBOXD_TEST_OCI_DIR"

var (
	env struct {
		cli        *client.Client
		agent      string
		dir        string // Options.Dir
		socketRoot string
		// sealer seals the checkpoint images, as the daemon's keyring
		// does: a keyring in dir (a child process opens the same).
		sealer *secrets.Keyring
	}
	setupErr, skipWhy error
)

func TestMain(m *testing.M) {
	code := func() int {
		if testenv.Short() {
			return m.Run()
		}
		tmp, err := os.MkdirTemp("", "sbo-") // short: unix socket paths
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		if skipWhy = canRun(); skipWhy == nil {
			setupErr = setup(tmp)
		}
		code := m.Run()
		if env.cli != nil {
			env.cli.Close()
		}
		if env.dir != "" && os.Getenv(envChildDir) == "" {
			// Only images are left once every test removed its
			// sandboxes; a sandbox left is kept for a look.
			if left, _ := os.ReadDir(filepath.Join(env.dir, "sandboxes")); len(left) == 0 {
				_ = os.RemoveAll(env.dir)
			} else {
				fmt.Fprintf(os.Stderr, "oci tests: %d sandbox(es) left in %s\n", len(left), env.dir)
				code = 1
			}
		}
		return code
	}()
	os.Exit(testenv.Exit(code))
}

// canRun says why the runtime cannot run here (nil: it can).
func canRun() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (mounts, cgroups, namespaces)")
	}
	if _, err := exec.LookPath("crun"); err != nil {
		if _, err := exec.LookPath("runc"); err != nil {
			return errors.New("needs crun or runc (scripts/setup-oci.sh installs crun)")
		}
	}
	if !testenv.HasDocker() {
		return errors.New("needs a Docker engine for its images")
	}
	return nil
}

func setup(tmp string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	env.cli = cli
	if _, err := cli.ImageInspect(ctx, testImage); err != nil {
		return fmt.Errorf("image %s: %w (run scripts/build-images.sh)", testImage, err)
	}
	if env.agent, err = runtimetest.BuildAgent(ctx, tmp); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	env.socketRoot = filepath.Join(tmp, "s")
	if dir := os.Getenv(envChildDir); dir != "" { // a child of TestAdopt_AfterSIGKILL
		env.dir, env.socketRoot = dir, os.Getenv(envChildSockets)
		env.sealer, err = secrets.OpenKeyring(filepath.Join(env.dir, "keyring"))
		return err
	}
	base := os.Getenv(EnvDir)
	if base == "" {
		base = tmp
		if fi, err := os.Stat("/var/lib/sandboxd-oci/root"); err == nil && fi.IsDir() {
			base = "/var/lib/sandboxd-oci/root"
		}
	}
	if env.dir, err = os.MkdirTemp(base, "test-"); err != nil {
		return err
	}
	env.sealer, err = secrets.OpenKeyring(filepath.Join(env.dir, "keyring"))
	return err
}

func requireEnv(t *testing.T) {
	t.Helper()
	if testenv.Short() {
		t.Skip("needs root, an OCI runtime and a Docker engine (skipped under -short)")
	}
	if skipWhy != nil {
		t.Skipf("SKIP: the oci runtime %v", skipWhy)
	}
	if setupErr != nil {
		t.Fatalf("test setup: %v", setupErr)
	}
}

func newRuntime(t *testing.T, o runtimetest.Options, mod ...func(*oci.Options)) *oci.Runtime {
	t.Helper()
	opts := oci.Options{Client: env.cli, NodeID: o.NodeID, Dir: env.dir, SocketRoot: env.socketRoot, AgentReadyTimeout: o.AgentReadyTimeout, ImageSealer: env.sealer}
	for _, f := range mod {
		f(&opts)
	}
	rt, err := oci.New(opts)
	if err != nil {
		t.Fatalf("oci.New: %v", err)
	}
	t.Cleanup(func() {
		// Whatever the test left of its node's sandboxes goes.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := rt.ListOurs(ctx)
		if err != nil {
			t.Errorf("cleanup: ListOurs: %v", err)
		}
		for _, in := range list {
			if err := rt.Destroy(ctx, in.SandboxID); err != nil {
				t.Errorf("cleanup: Destroy(%s): %v", in.SandboxID, err)
			}
		}
		rt.Close()
	})
	return rt
}

// removeImage removes an image the conformance suite committed.
func removeImage(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = env.cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})
}

func TestConformance(t *testing.T) {
	requireEnv(t)
	runtimetest.Run(t, runtimetest.Config{
		New: func(t *testing.T, o runtimetest.Options) runtime.Runtime {
			return newRuntime(t, o)
		},
		Image:       testImage,
		AgentBinary: env.agent,
		RemoveImage: removeImage,
		Facts: func(t *testing.T, id string) runtimetest.Facts {
			return facts(t, filepath.Join(env.dir, "sandboxes", id))
		},
		SocketDir: func(id string) string { return filepath.Join(env.socketRoot, id) },
	})
}

// facts reads how the sandbox in bundle dir is run: its config.json (what
// the OCI runtime was told) and meta.json (its labels).
func facts(t *testing.T, dir string) runtimetest.Facts {
	t.Helper()
	var cfg struct {
		Process struct {
			Args         []string `json:"args"`
			Env          []string `json:"env"`
			Capabilities struct {
				Bounding, Effective, Permitted, Inheritable, Ambient []string
			} `json:"capabilities"`
		} `json:"process"`
		Hostname string `json:"hostname"`
		Mounts   []struct {
			Destination, Type, Source string
			Options                   []string
		} `json:"mounts"`
		Linux struct {
			Namespaces []struct{ Type, Path string } `json:"namespaces"`
			Resources  struct {
				Memory struct{ Limit, Swap int64 }
				CPU    struct {
					Quota  int64
					Period uint64
				} `json:"cpu"`
				Pids struct{ Limit int64 }
			} `json:"resources"`
			Seccomp json.RawMessage `json:"seccomp"`
		} `json:"linux"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatalf("config.json: %v", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	var meta struct {
		Labels map[string]string `json:"labels"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err != nil || json.Unmarshal(b, &meta) != nil {
		t.Fatalf("meta.json: %v", err)
	}
	c := cfg.Process.Capabilities
	if !slices.Equal(c.Bounding, c.Effective) || !slices.Equal(c.Bounding, c.Permitted) || len(c.Inheritable)+len(c.Ambient) > 0 {
		t.Errorf("capability sets differ: %+v", c)
	}
	f := runtimetest.Facts{
		Hostname:        cfg.Hostname,
		Labels:          meta.Labels,
		MemoryBytes:     cfg.Linux.Resources.Memory.Limit,
		MemorySwapBytes: cfg.Linux.Resources.Memory.Swap,
		PidsLimit:       cfg.Linux.Resources.Pids.Limit,
		CapAdd:          c.Bounding, // the OCI runtime starts from none
		CapDrop:         []string{"ALL"},
		Entrypoint:      cfg.Process.Args,
		Env:             cfg.Process.Env,
		NetworkMode:     "none",
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil && json.Unmarshal(b, &st) == nil {
		f.AgentPid = st.Pid
	}
	if f.MemorySwapBytes == 0 {
		f.MemorySwapBytes = f.MemoryBytes // no swap accounting: no swap to limit
	}
	if p := cfg.Linux.Resources.CPU.Period; p > 0 {
		f.NanoCPUs = int64(math.Round(float64(cfg.Linux.Resources.CPU.Quota) / float64(p) * 1e9))
	}
	if len(cfg.Linux.Seccomp) > 0 {
		f.SecurityOpt = []string{"seccomp=" + string(cfg.Linux.Seccomp)}
	}
	for _, ns := range cfg.Linux.Namespaces {
		switch {
		case ns.Type == "cgroup":
			f.CgroupNS = "private"
		case ns.Type == "network" && ns.Path != "":
			f.NetworkMode = "bridge"
		}
	}
	for _, m := range cfg.Mounts {
		// The engine lists neither its own /etc files nor the kernel
		// file systems as the container's mounts.
		if m.Type != "bind" || strings.HasPrefix(m.Destination, "/etc/") {
			continue
		}
		// Nor is a gVisor sandbox's /tmp, its own root file system's
		// (tmp.go), one of the caller's mounts.
		if m.Destination == "/tmp" && m.Source == filepath.Join(dir, "rootfs", "tmp") {
			continue
		}
		f.Mounts = append(f.Mounts, runtimetest.Mount{Source: m.Source, Target: m.Destination, ReadOnly: slices.Contains(m.Options, "ro")})
	}
	return f
}

// TestConformance_GVisor runs the suite with runsc in place of crun.
func TestConformance_GVisor(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	runtimetest.Run(t, runtimetest.Config{
		New: func(t *testing.T, o runtimetest.Options) runtime.Runtime {
			return newRuntime(t, o)
		},
		Image:       testImage,
		AgentBinary: env.agent,
		RemoveImage: removeImage,
		Isolation:   runtime.IsolationGVisor,
		MemoryMB:    runtime.MinGVisorMemoryMB,
		PidsLimit:   runtime.MinGVisorPidsLimit,
		Facts: func(t *testing.T, id string) runtimetest.Facts {
			return facts(t, filepath.Join(env.dir, "sandboxes", id))
		},
		SocketDir: func(id string) string { return filepath.Join(env.socketRoot, id) },
	})
}

// TestConformance_Runc runs the suite with runc in crun's place (the
// runtime's fallback where crun is absent).
func TestConformance_Runc(t *testing.T) {
	requireEnv(t)
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("SKIP: runc is not installed")
	}
	runtimetest.Run(t, runtimetest.Config{
		New: func(t *testing.T, o runtimetest.Options) runtime.Runtime {
			return newRuntime(t, o, func(o *oci.Options) { o.Binary = runc })
		},
		Image:       testImage,
		AgentBinary: env.agent,
		RemoveImage: removeImage,
		Facts: func(t *testing.T, id string) runtimetest.Facts {
			return facts(t, filepath.Join(env.dir, "sandboxes", id))
		},
		SocketDir: func(id string) string { return filepath.Join(env.socketRoot, id) },
	})
}
