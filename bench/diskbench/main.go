// Command diskbench measures what a sandbox's disk limit costs on the boot
// path: create → first exec with the limit on, beside the same without it,
// interleaved in one run, per image:
//
//	limit on    runtime.Create with Spec.DiskMB (the engine's storage size:
//	            one ImageInspect, then the btrfs driver's qgroup), then an
//	            agent exec of `true`
//	limit off   the same spec with DiskMB 0 (no storage option)
//
// It drives the Docker runtime directly, as the daemon's create chain does
// (the chain adds nothing else for the limit: whether the runtime enforces
// it is latched after the first create). Before measuring it checks, once
// per image, that a sandbox with the limit cannot write past it. Usage
// (from the repository root; scripts/bench.sh runs it):
//
//	go run ./bench/diskbench [-n 20] [-disk-mb 1024] [-images sandboxd/busybox:latest,sandboxd/base:bookworm] [-agent bin/toolboxd]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
)

func main() {
	n := flag.Int("n", 20, "samples per image and side")
	diskMB := flag.Int64("disk-mb", 1024, "the disk limit of the limited side, in MiB")
	images := flag.String("images", "sandboxd/busybox:latest,sandboxd/base:bookworm", "comma-separated images")
	agentPath := flag.String("agent", "", "agent binary (default: bin/toolboxd if present, else built from ./cmd/toolboxd)")
	flag.Parse()
	if *n < 1 || *diskMB < 16 {
		fmt.Fprintln(os.Stderr, "diskbench: -n must be at least 1 and -disk-mb at least 16")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, strings.Split(*images, ","), *n, *diskMB, *agentPath); err != nil {
		fmt.Fprintln(os.Stderr, "diskbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, images []string, n int, diskMB int64, agentPath string) error {
	tmp, err := os.MkdirTemp("", "diskbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	agentBin, err := benchd.AgentBinary(ctx, agentPath, tmp)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	rt, err := docker.New(docker.Options{
		Client: cli, NodeID: fmt.Sprintf("diskbench-%d", os.Getpid()), SocketRoot: filepath.Join(tmp, "s"),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	lim, err := rt.DiskLimits(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "diskbench: n=%d per side, interleaved; disk limit %d MiB; engine: %s (enforced: %v); docker %s\n",
		n, diskMB, lim.How, lim.Enforced, benchd.DockerVersion(ctx))
	if !lim.Enforced {
		fmt.Fprintln(out, "the engine enforces no disk limit: both sides are the same here (scripts/setup-docker.sh gives it a btrfs data root)")
	}
	for _, image := range images {
		if image = strings.TrimSpace(image); image == "" {
			continue
		}
		if lim.Enforced {
			if err := checkLimit(ctx, rt, image, agentBin, diskMB); err != nil {
				return fmt.Errorf("%s: %w", image, err)
			}
		}
		var on, off, onCreate, offCreate []time.Duration
		if _, _, err := sample(ctx, rt, image, agentBin, diskMB); err != nil { // warm-up
			return fmt.Errorf("%s: warm-up: %w", image, err)
		}
		for i := range n {
			sides := []int64{diskMB, 0}
			if i%2 == 1 {
				sides = []int64{0, diskMB}
			}
			for _, mb := range sides {
				total, create, err := sample(ctx, rt, image, agentBin, mb)
				if err != nil {
					return fmt.Errorf("%s: %w", image, err)
				}
				if mb > 0 {
					on, onCreate = append(on, total), append(onCreate, create)
				} else {
					off, offCreate = append(off, total), append(offCreate, create)
				}
			}
			benchd.Progress("%s: %d/%d", image, i+1, n)
		}
		benchd.Progress("")
		fmt.Fprintf(out, "\nimage %s\n", image)
		t := benchd.Table{W: out}
		t.Head("")
		t.Row(fmt.Sprintf("limit on (%d MiB): create → first exec", diskMB), on)
		t.Row("  create → agent ready", onCreate)
		t.Row("limit off: create → first exec", off)
		t.Row("  create → agent ready", offCreate)
		t.Ratio("p50 ratio on / off", on, off)
	}
	return nil
}

// spec is the sandbox every sample makes.
func spec(id, image, agentBin string, diskMB int64) runtime.Spec {
	return runtime.Spec{
		SandboxID: id, Image: image, AgentBinary: agentBin, AgentToken: "bench-" + id,
		CPU: 1, MemoryMB: 256, PidsLimit: 256, DiskMB: diskMB,
	}
}

// sample creates a sandbox, runs `true` through its agent, and destroys
// it (untimed): create → first exec, and its create → ready part.
func sample(ctx context.Context, rt *docker.Runtime, image, agentBin string, diskMB int64) (total, create time.Duration, err error) {
	id := benchd.NewSandboxID()
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := rt.Destroy(dctx, id); derr != nil && err == nil {
			err = derr
		}
	}()
	start := time.Now()
	if _, err := rt.Create(ctx, spec(id, image, agentBin, diskMB)); err != nil {
		return 0, 0, err
	}
	create = time.Since(start)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, "bench-"+id)
	defer c.Close()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"true"}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d", res.ExitCode)
	}
	return time.Since(start), create, err
}

// checkLimit makes sure a limited sandbox cannot write twice its limit.
func checkLimit(ctx context.Context, rt *docker.Runtime, image, agentBin string, diskMB int64) error {
	id := benchd.NewSandboxID()
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = rt.Destroy(dctx, id)
	}()
	if _, err := rt.Create(ctx, spec(id, image, agentBin, diskMB)); err != nil {
		return err
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, "bench-"+id)
	defer c.Close()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf("fallocate -l %dM /x", 2*diskMB)}})
	if err != nil {
		return err
	}
	if res.ExitCode == 0 {
		return errors.New("a sandbox with the limit wrote twice its limit: the engine does not enforce it")
	}
	return nil
}
