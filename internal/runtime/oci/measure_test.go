package oci_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// EnvMeasure turns on TestMeasure: it prints figures, asserts none
// (timing claims are benchmarks: docs/design.md).
const EnvMeasure = "SANDBOXD_OCI_MEASURE"

// TestMeasure prints, in one run: cold create → first exec (Create,
// which waits for the agent, then one exec through it) over 30 sandboxes
// for this runtime and the Docker runtime, `docker run -d` of the same
// image beside them, and the host memory each idle sandbox costs outside
// its own cgroup.
func TestMeasure(t *testing.T) {
	if os.Getenv(EnvMeasure) == "" {
		t.Skip("set " + EnvMeasure + "=1 to measure")
	}
	requireEnv(t)
	const n = 30
	ctx := t.Context()
	node := "measure-" + runtimetest.NewSandboxID()[3:]
	ort := newRuntime(t, runtimetest.Options{NodeID: node})
	drt, err := docker.New(docker.Options{Client: env.cli, NodeID: node + "-d", SocketRoot: filepath.Join(env.socketRoot, "d")})
	if err != nil {
		t.Fatal(err)
	}
	coldExec := func(rt runtime.Runtime) time.Duration {
		id := runtimetest.NewSandboxID()
		sp := spec(id)
		sp.DiskMB = 0
		start := time.Now()
		if _, err := rt.Create(ctx, sp); err != nil {
			t.Fatal(err)
		}
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, sp.AgentToken)
		if _, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/true"}, Timeout: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		c.Close()
		if err := rt.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		return took
	}
	dockerRun := func() time.Duration {
		start := time.Now()
		out, err := exec.Command("docker", "run", "-d", "--network", "none", testImage, "sleep", "600").Output()
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		_ = exec.Command("docker", "rm", "-f", strings.TrimSpace(string(out))).Run()
		return took
	}
	coldExec(ort) // the image's unpack, once
	var o, d, r []time.Duration
	for range n { // interleaved: the three see the same machine
		o = append(o, coldExec(ort))
		d = append(d, coldExec(drt))
		r = append(r, dockerRun())
	}
	fmt.Printf("cold create → first exec, %d each, busybox (p50 / p95):\n", n)
	fmt.Printf("  oci runtime (%s):  %v / %v\n", filepath.Base(ort.Binary()), pct(o, 50), pct(o, 95))
	fmt.Printf("  docker runtime:      %v / %v\n", pct(d, 50), pct(d, 95))
	fmt.Printf("  docker run -d:       %v / %v (start only, no exec)\n", pct(r, 50), pct(r, 95))

	// Idle memory: the host processes outside the sandboxes' cgroups
	// that serve them (named by their cmdline, or this process's
	// children), per sandbox; other processes on a shared machine are not
	// counted.
	const idle = 20
	for _, rt := range []interface {
		runtime.Runtime
		ListOurs(context.Context) ([]runtime.Instance, error)
	}{ort, drt} {
		var ids []string
		for range idle {
			id := runtimetest.NewSandboxID()
			if _, err := rt.Create(ctx, spec(id)); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		list, _ := rt.ListOurs(ctx)
		var keys []string
		for _, in := range list {
			keys = append(keys, in.SandboxID, in.ContainerID)
		}
		procs, rss := serving(keys)
		fmt.Printf("%T, %d idle sandboxes: %d host processes outside their cgroups serve them %v, %d KiB RSS in all, %d KiB a sandbox\n",
			rt, idle, len(procs), procs, rss>>10, rss>>10/idle)
		for _, id := range ids {
			_ = rt.Destroy(ctx, id)
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

// serving lists the processes in no sandbox cgroup whose command line
// names one of keys, or whose parent is this process, and their RSS.
func serving(keys []string) (comms []string, rss int64) {
	self := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil || strings.Contains(string(cg), "/sandboxd/") || strings.Contains(string(cg), "/docker/") {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		status, _ := os.ReadFile(filepath.Join(d, "status"))
		var ppid string
		var kb int64
		for line := range strings.Lines(string(status)) {
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "PPid:":
				ppid = f[1]
			case len(f) >= 2 && f[0] == "VmRSS:":
				kb, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		ours := ppid == self
		for _, k := range keys {
			ours = ours || (k != "" && strings.Contains(string(cmdline), k))
		}
		if ours {
			comm, _ := os.ReadFile(filepath.Join(d, "comm"))
			comms = append(comms, strings.TrimSpace(string(comm)))
			rss += kb << 10
		}
	}
	return comms, rss
}
