// Command agentbench measures an exec round trip through the agent beside
// the same round trip through `docker exec`, in one sandbox, in one run:
//
//	go run ./bench/agentbench [-n 200] [-docker-n 30] [-image sandboxd/base:bookworm]
//
// It builds toolboxd, creates one container from the image with the Docker
// runtime, runs `true` N times through agent.Client.Exec (after a warm-up)
// and M times with `docker exec <container> true`, prints p50/p95 of each,
// then N times each with a fresh connection per exec, through the
// runtime's peer-checked DialAgent and through a plain dial (the
// difference is the cost of checking who answers on the agent socket),
// and destroys the container. Then it compares the sandboxes' seccomp
// profile with the engine's default: one more sandbox under each, the
// same execs alternating between them (`true`, and a dd of 20,000 one-byte
// blocks: 40,000 filtered system calls). Absolute numbers are noisy on
// shared machines; the ratio is the figure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

func main() {
	n := flag.Int("n", 200, "agent exec samples")
	dn := flag.Int("docker-n", 30, "docker exec samples")
	image := flag.String("image", "sandboxd/base:bookworm", "sandbox image")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *image, *n, *dn); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, image string, n, dn int) error {
	dir, err := os.MkdirTemp("", "agb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := runtimetest.BuildAgent(ctx, dir)
	if err != nil {
		return fmt.Errorf("build agent: %w", err)
	}
	rt, err := docker.New(docker.Options{NodeID: "agentbench", SocketRoot: filepath.Join(dir, "s")})
	if err != nil {
		return fmt.Errorf("docker.New: %w", err)
	}
	defer rt.Close()
	id := runtimetest.NewSandboxID()
	token := "bench-" + id
	if _, err := rt.Create(ctx, runtime.Spec{SandboxID: id, Image: image, AgentBinary: bin, AgentToken: token}); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rt.Destroy(dctx, id)
	}()
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, token)
	defer c.Close()

	agentExec := func() error {
		res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", res.ExitCode)
		}
		return err
	}
	dockerExec := func() error { return exec.CommandContext(ctx, "docker", "exec", rt.ContainerName(id), "true").Run() }

	for range 10 { // warm-up: connections, page cache
		if err := agentExec(); err != nil {
			return fmt.Errorf("agent exec: %w", err)
		}
	}
	a, err := sample(n, agentExec)
	if err != nil {
		return fmt.Errorf("agent exec: %w", err)
	}
	if err := dockerExec(); err != nil {
		return fmt.Errorf("docker exec: %w", err)
	}
	d, err := sample(dn, dockerExec)
	if err != nil {
		return fmt.Errorf("docker exec: %w", err)
	}
	checked, unchecked, err := dialCost(ctx, rt, id, token, n)
	if err != nil {
		return err
	}
	// Context for absolute figures on a loaded machine: a bare fork+exec of
	// `true` on the host, no container, no RPC.
	h, err := sample(n, func() error { return exec.CommandContext(ctx, "true").Run() })
	if err != nil {
		return fmt.Errorf("host exec: %w", err)
	}
	fmt.Printf("image %s, container %s\n", image, id)
	fmt.Printf("%-24s %5s %10s %10s\n", "exec `true` round trip", "n", "p50", "p95")
	fmt.Printf("%-24s %5d %10s %10s\n", "agent (unix socket)", n, pct(a, 50), pct(a, 95))
	fmt.Printf("%-24s %5d %10s %10s\n", "docker exec", dn, pct(d, 50), pct(d, 95))
	fmt.Printf("%-24s %5d %10s %10s\n", "host fork+exec (no RPC)", n, pct(h, 50), pct(h, 95))
	fmt.Printf("p50 speed-up: %.1fx\n", float64(pct(d, 50))/float64(pct(a, 50)))
	fmt.Printf("\n%-40s %5s %10s %10s\n", "exec `true`, a fresh connection each", "n", "p50", "p95")
	fmt.Printf("%-40s %5d %10s %10s\n", "DialAgent (peer-checked)", n, pct(checked, 50), pct(checked, 95))
	fmt.Printf("%-40s %5d %10s %10s\n", "plain unix dial (no check)", n, pct(unchecked, 50), pct(unchecked, 95))
	fmt.Printf("peer check cost, p50: %s\n", pct(checked, 50)-pct(unchecked, 50))
	return seccompCost(ctx, dir, bin, image, n)
}

// seccompCost prints the exec round trip in a sandbox under the
// sandboxes' own seccomp profile beside one under the engine's default,
// alternating so that both see the same load.
func seccompCost(ctx context.Context, dir, bin, image string, n int) error {
	ours, err := newSandbox(ctx, filepath.Join(dir, "o"), "agentbench-ours", bin, image, false)
	if err != nil {
		return err
	}
	defer ours.close()
	engine, err := newSandbox(ctx, filepath.Join(dir, "e"), "agentbench-engine", bin, image, true)
	if err != nil {
		return err
	}
	defer engine.close()
	if err := createCost(ctx, bin, image, ours.rt, engine.rt, 10); err != nil {
		return err
	}
	fmt.Printf("\n%-44s %5s %10s %10s\n", "exec round trip, by seccomp profile", "n", "p50", "p95")
	for _, w := range []struct {
		name string
		cmd  []string
	}{
		{"`true`", []string{"true"}},
		{"dd, 40k syscalls", []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=20000", "status=none"}},
	} {
		var o, e []time.Duration
		for range 10 { // warm-up
			if _, err := ours.exec(ctx, w.cmd); err != nil {
				return err
			}
			if _, err := engine.exec(ctx, w.cmd); err != nil {
				return err
			}
		}
		for i := range n {
			// Which goes first alternates: no profile always follows the other.
			pair := []*benchSandbox{ours, engine}
			if i%2 == 1 {
				pair[0], pair[1] = engine, ours
			}
			for _, sb := range pair {
				d, err := sb.exec(ctx, w.cmd)
				if err != nil {
					return err
				}
				if sb == ours {
					o = append(o, d)
				} else {
					e = append(e, d)
				}
			}
		}
		slices.Sort(o)
		slices.Sort(e)
		fmt.Printf("%-44s %5d %10s %10s\n", w.name+": sandboxd profile", n, pct(o, 50), pct(o, 95))
		fmt.Printf("%-44s %5d %10s %10s\n", w.name+": engine default (baseline)", n, pct(e, 50), pct(e, 95))
		fmt.Printf("%s: p50 %+.1f%%, p95 %+.1f%%\n", w.name, change(pct(o, 50), pct(e, 50)), change(pct(o, 95), pct(e, 95)))
	}
	return nil
}

// createCost prints create → agent ready under each profile (the engine
// parses and runc compiles whichever it is given), n each, alternating.
func createCost(ctx context.Context, bin, image string, ours, engine *docker.Runtime, n int) error {
	var o, e []time.Duration
	for i := range n {
		pair := []*docker.Runtime{ours, engine}
		if i%2 == 1 {
			pair[0], pair[1] = engine, ours
		}
		for _, rt := range pair {
			id := runtimetest.NewSandboxID()
			begin := time.Now()
			_, err := rt.Create(ctx, runtime.Spec{SandboxID: id, Image: image, AgentBinary: bin, AgentToken: "bench-" + id})
			d := time.Since(begin)
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = rt.Destroy(dctx, id)
			cancel()
			if err != nil {
				return fmt.Errorf("create sandbox: %w", err)
			}
			if rt == ours {
				o = append(o, d)
			} else {
				e = append(e, d)
			}
		}
	}
	slices.Sort(o)
	slices.Sort(e)
	fmt.Printf("\n%-44s %5s %10s %10s\n", "create → agent ready, by seccomp profile", "n", "p50", "p95")
	fmt.Printf("%-44s %5d %10s %10s\n", "sandboxd profile", n, pct(o, 50), pct(o, 95))
	fmt.Printf("%-44s %5d %10s %10s\n", "engine default (baseline)", n, pct(e, 50), pct(e, 95))
	return nil
}

func change(got, base time.Duration) float64 {
	return 100 * (float64(got) - float64(base)) / float64(base)
}

// benchSandbox is one sandbox of its own runtime, with an agent client.
type benchSandbox struct {
	rt *docker.Runtime
	id string
	c  *agent.Client
}

func newSandbox(ctx context.Context, sockets, node, bin, image string, engineSeccomp bool) (*benchSandbox, error) {
	rt, err := docker.New(docker.Options{NodeID: node, SocketRoot: sockets, EngineSeccomp: engineSeccomp})
	if err != nil {
		return nil, fmt.Errorf("docker.New: %w", err)
	}
	id := runtimetest.NewSandboxID()
	token := "bench-" + id
	if _, err := rt.Create(ctx, runtime.Spec{SandboxID: id, Image: image, AgentBinary: bin, AgentToken: token}); err != nil {
		rt.Close()
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, token)
	return &benchSandbox{rt: rt, id: id, c: c}, nil
}

func (b *benchSandbox) exec(ctx context.Context, cmd []string) (time.Duration, error) {
	begin := time.Now()
	res, err := b.c.Exec(ctx, agent.ExecRequest{Cmd: cmd})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%q: exit code %d: %s", cmd, res.ExitCode, res.Stderr)
	}
	return time.Since(begin), err
}

func (b *benchSandbox) close() {
	b.c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = b.rt.Destroy(ctx, b.id)
	b.rt.Close()
}

// dialCost measures the exec round trip when every exec opens a new
// connection (a tunnel always does; a client does after idling), through
// the runtime's peer-checked DialAgent and through a plain dial of the
// same socket, alternating so that both see the same load.
func dialCost(ctx context.Context, rt *docker.Runtime, id, token string, n int) (checked, unchecked []time.Duration, err error) {
	viaRuntime := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, token)
	plain := agent.NewClient(agent.UnixDialer(rt.AgentSocketPath(id)), token)
	defer viaRuntime.Close()
	defer plain.Close()
	once := func(c *agent.Client) (time.Duration, error) {
		c.Close() // drop the idle connection: the exec dials
		begin := time.Now()
		_, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"true"}})
		return time.Since(begin), err
	}
	for range n {
		for _, c := range []*agent.Client{viaRuntime, plain} {
			d, err := once(c)
			if err != nil {
				return nil, nil, fmt.Errorf("fresh-connection exec: %w", err)
			}
			if c == viaRuntime {
				checked = append(checked, d)
			} else {
				unchecked = append(unchecked, d)
			}
		}
	}
	slices.Sort(checked)
	slices.Sort(unchecked)
	return checked, unchecked, nil
}

func sample(n int, f func() error) ([]time.Duration, error) {
	if n <= 0 {
		return nil, errors.New("need at least one sample")
	}
	ds := make([]time.Duration, 0, n)
	for range n {
		begin := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(begin))
	}
	slices.Sort(ds)
	return ds, nil
}

// pct is the p-th percentile (nearest rank) of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (len(ds)*p + 99) / 100
	return ds[max(i-1, 0)].Round(10 * time.Microsecond)
}
