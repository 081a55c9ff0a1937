// Command runtimebench measures the Docker runtime's boot path beside a
// baseline taken in the same run, with the same image:
//
//	create → agent ready   runtime.Create (create + start + first GET /health answered)
//	docker run --rm true   the docker CLI creating, starting, waiting for and removing a container
//
// and, when the engine has runsc (scripts/setup-gvisor.sh), gVisor beside
// runc: create → agent ready, and an agent exec round trip of `true` in a
// running sandbox of each.
//
// Samples of the two are interleaved so that drift on a noisy machine hits
// both alike. Usage (from the repository root; scripts/bench.sh runs it):
//
//	go run ./bench/runtimebench [-n 20] [-image sandboxd/busybox:latest] [-agent bin/toolboxd] [-only name,...]
//
// More pairs (agent exec against docker exec, …) are added to the pairs
// table in main; each needs a name, the measured operation and its baseline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
)

type config struct {
	n      int
	image  string
	agent  string
	only   string
	warmup int
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 20, "samples per measurement")
	flag.IntVar(&cfg.warmup, "warmup", 1, "unrecorded samples per measurement before the first")
	flag.StringVar(&cfg.image, "image", "sandboxd/busybox:latest", "local image for both the runtime and the baseline")
	flag.StringVar(&cfg.agent, "agent", "", "agent binary (default: bin/toolboxd if present, else built from ./cmd/toolboxd)")
	flag.StringVar(&cfg.only, "only", "", "comma-separated measurement names to run (default: all)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "runtimebench:", err)
		os.Exit(1)
	}
}

// pair is one measurement and the baseline it is printed beside. Each
// function performs one sample and returns its duration; cleanup it needs
// is done inside, untimed.
type pair struct {
	name     string
	subject  measurement
	baseline measurement
}

type measurement struct {
	label  string
	sample func(ctx context.Context) (time.Duration, error)
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.n < 1 {
		return errors.New("-n must be at least 1")
	}
	tmp, err := os.MkdirTemp("", "sbbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	agent, err := benchd.AgentBinary(ctx, cfg.agent, tmp)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	ver, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return fmt.Errorf("docker engine: %w (run scripts/setup-docker.sh)", err)
	}
	if _, err := cli.ImageInspect(ctx, cfg.image); err != nil {
		return fmt.Errorf("image %s: %w (run scripts/build-images.sh)", cfg.image, err)
	}
	rt, err := docker.New(docker.Options{
		Client:     cli,
		NodeID:     "runtimebench",
		SocketRoot: filepath.Join(tmp, "s"),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer rt.Close()

	pairs := []pair{
		{
			name: "boot",
			subject: measurement{"create → agent ready (runtime.Create)", func(ctx context.Context) (time.Duration, error) {
				return createReady(ctx, rt, cfg.image, agent)
			}},
			baseline: measurement{"docker run --rm " + cfg.image + " true", func(ctx context.Context) (time.Duration, error) {
				return dockerRun(ctx, cfg.image)
			}},
		},
	}
	gv, err := gvisorPairs(ctx, rt, cfg.image, agent)
	if err != nil {
		return err
	}
	defer gv.close()
	pairs = append(pairs, gv.pairs...)
	if cfg.only != "" {
		want := strings.Split(cfg.only, ",")
		pairs = slices.DeleteFunc(pairs, func(p pair) bool { return !slices.Contains(want, p.name) })
		if len(pairs) == 0 {
			return fmt.Errorf("-only %q matches no measurement", cfg.only)
		}
	}

	fmt.Fprintf(out, "engine %s (API %s), image %s, %d samples each after %d warm-up, interleaved\n\n",
		ver.Version, ver.APIVersion, cfg.image, cfg.n, cfg.warmup)
	type row struct {
		label string
		d     []time.Duration
	}
	var rows []row
	for _, p := range pairs {
		subj, base, err := samplePair(ctx, p, cfg.n, cfg.warmup)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		rows = append(rows, row{p.subject.label, subj}, row{"  baseline: " + p.baseline.label, base})
	}
	w := len("measurement") // fmt pads by runes, so widths count runes
	for _, r := range rows {
		w = max(w, utf8.RuneCountInString(r.label))
	}
	fmt.Fprintf(out, "%-*s %4s %9s %9s %9s %9s\n", w, "measurement", "n", "p50", "p95", "min", "max")
	for _, r := range rows {
		fmt.Fprintf(out, "%-*s %4d %9s %9s %9s %9s\n", w, r.label, len(r.d),
			ms(quantile(r.d, 0.50)), ms(quantile(r.d, 0.95)), ms(r.d[0]), ms(r.d[len(r.d)-1]))
	}
	return nil
}

// samplePair interleaves subject and baseline samples; results are sorted.
func samplePair(ctx context.Context, p pair, n, warmup int) (subj, base []time.Duration, err error) {
	for i := range warmup + n {
		for _, m := range []struct {
			meas measurement
			dst  *[]time.Duration
		}{{p.subject, &subj}, {p.baseline, &base}} {
			d, err := m.meas.sample(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", m.meas.label, err)
			}
			if i >= warmup {
				*m.dst = append(*m.dst, d)
			}
		}
	}
	slices.Sort(subj)
	slices.Sort(base)
	return subj, base, nil
}

func createReady(ctx context.Context, rt *docker.Runtime, image, agent string) (time.Duration, error) {
	return createReadyIn(ctx, rt, image, agent, runtime.IsolationContainer)
}

// benchSpec is the sandbox every measurement makes: limits gVisor accepts.
func benchSpec(id, image, agent string, iso runtime.Isolation) runtime.Spec {
	return runtime.Spec{
		SandboxID: id, Image: image, AgentBinary: agent, AgentToken: "bench-" + id,
		CPU: 1, MemoryMB: runtime.MinGVisorMemoryMB, PidsLimit: runtime.MinGVisorPidsLimit, Isolation: iso,
	}
}

func createReadyIn(ctx context.Context, rt *docker.Runtime, image, agent string, iso runtime.Isolation) (time.Duration, error) {
	id := benchd.NewSandboxID()
	start := time.Now()
	_, err := rt.Create(ctx, benchSpec(id, image, agent, iso))
	d := time.Since(start)
	// Untimed; with a fresh context so an interrupt still cleans up.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if derr := rt.Destroy(dctx, id); derr != nil && err == nil {
		err = derr
	}
	return d, err
}

func dockerRun(ctx context.Context, image string) (time.Duration, error) {
	start := time.Now()
	b, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", image, "true").CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, b)
	}
	return d, nil
}

// quantile is the nearest-rank quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// gvisorSet is the gVisor measurements and the sandboxes they exec in.
type gvisorSet struct {
	pairs []pair
	close func()
}

// gvisorPairs returns the gVisor-beside-runc measurements, none when the
// engine has no runsc. It starts one sandbox of each isolation for the
// exec round trips; close destroys them.
func gvisorPairs(ctx context.Context, rt *docker.Runtime, image, agentPath string) (gvisorSet, error) {
	isos, err := rt.Isolations(ctx)
	if err != nil {
		return gvisorSet{}, err
	}
	if !slices.Contains(isos, runtime.IsolationGVisor) {
		fmt.Fprintln(os.Stderr, "runtimebench: the engine has no runsc: gVisor measurements skipped (scripts/setup-gvisor.sh)")
		return gvisorSet{close: func() {}}, nil
	}
	var ids []string
	closeAll := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, id := range ids {
			_ = rt.Destroy(dctx, id)
		}
	}
	clientIn := func(iso runtime.Isolation) (*agent.Client, error) {
		id := benchd.NewSandboxID()
		ids = append(ids, id)
		if _, err := rt.Create(ctx, benchSpec(id, image, agentPath, iso)); err != nil {
			return nil, err
		}
		return agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, "bench-"+id), nil
	}
	runc, err := clientIn(runtime.IsolationContainer)
	if err != nil {
		closeAll()
		return gvisorSet{}, err
	}
	gvisor, err := clientIn(runtime.IsolationGVisor)
	if err != nil {
		closeAll()
		return gvisorSet{}, err
	}
	execTrue := func(c *agent.Client) func(ctx context.Context) (time.Duration, error) {
		return func(ctx context.Context) (time.Duration, error) {
			start := time.Now()
			res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("true exited %d", res.ExitCode)
			}
			return time.Since(start), err
		}
	}
	return gvisorSet{
		pairs: []pair{
			{
				name: "boot-gvisor",
				subject: measurement{"gVisor: create → agent ready", func(ctx context.Context) (time.Duration, error) {
					return createReadyIn(ctx, rt, image, agentPath, runtime.IsolationGVisor)
				}},
				baseline: measurement{"runc: create → agent ready", func(ctx context.Context) (time.Duration, error) {
					return createReadyIn(ctx, rt, image, agentPath, runtime.IsolationContainer)
				}},
			},
			{
				name:     "exec-gvisor",
				subject:  measurement{"gVisor: agent exec `true` round trip", execTrue(gvisor)},
				baseline: measurement{"runc: agent exec `true` round trip", execTrue(runc)},
			},
		},
		close: func() { runc.Close(); gvisor.Close(); closeAll() },
	}, nil
}
