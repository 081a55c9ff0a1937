// Command createbench measures the product's headline numbers — how fast
// a create is, how many a host sustains, how a burst fares against the
// pool, and what an idle sandbox costs the host — each beside a baseline
// measured in the same run (`docker run` of the same image):
//
//	go run ./bench/createbench [-sections cold,sustained,burst,idle] [-engine E]
//	    [-n 30] [-images sandboxd/busybox:latest,sandboxd/base:bookworm]
//	    [-image sandboxd/busybox:latest] [-duration 60s] [-concurrency 8]
//	    [-burst 50] [-pool 8] [-idle 500] [-idle-memory-mb 64] [-bin bin] [-build]
//
// It starts sandboxd as a child process (from -bin when it holds sandboxd
// and toolboxd, else built from this checkout into a temporary directory)
// on a free 127.0.0.1 port with a temporary data directory, its own node
// id, no warm pool unless a section sets one (--pool none), a host budget
// large enough for every section, and -engine passed through as --engine
// when set (the daemon's default otherwise). The sections:
//
//  1. cold: create → first exec of a cold sandbox through the native API,
//     for each of -images, n samples per side, interleaved, beside
//     `docker run --rm IMAGE true` (with and without --network none, since
//     sandboxes have no network by default) and `docker run -d` + `docker
//     exec CONTAINER true`, with the create broken down by step from its
//     Server-Timing header. Each sandbox sample is
//
//     POST /v1/sandboxes {"image": IMAGE}          → 201 (Server-Timing)
//     POST /v1/sandboxes/{id}/exec {"cmd":["true"]} → 200, exit 0
//
//     timed from the first request to the second answer; the sandbox is
//     then destroyed, untimed.
//
//  2. sustained (sustained.go): creates/s through POST /v1/sandboxes for
//     -duration at -concurrency, each sandbox destroyed after by a bounded
//     set of destroyers (so at most a few dozen live at once; only creates
//     are timed), beside `docker run -d` the same way.
//
//  3. burst (burst.go): -burst creates at once against a pool of -pool
//     idle sandboxes, against a pool whose size follows demand (-pool to
//
//  64. after a first burst grew it, and beside -burst `docker run -d`
//     at once.
//
//  4. idle (idle.go): -idle sandboxes of -image at once (-idle-memory-mb
//     each), all answering an exec; the host memory used outside their own
//     processes per sandbox, the daemon's RSS, and the time a restart of
//     the daemon (SIGKILL, then a start that reconciles them all) takes to
//     be ready; beside the same number of `docker run -d` containers.
//
// Everything it creates is destroyed at the end, by the daemon and then
// by label. Absolute numbers are noisy on shared machines; compare the
// two sides of one run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

// config is the command line.
type config struct {
	sections     map[string]bool
	engine       string
	n            int
	images       []string
	image        string
	duration     time.Duration
	concurrency  int
	burst, pool  int
	idle         int
	idleMemoryMB int64
	binDir       string
	build        bool
}

// Bounds of the daemon's budget: every section fits in it (the budget is
// bookkeeping; what the host really holds is what the sections make).
const (
	budgetMilliCPU = 1_000_000
	budgetMemoryMB = 1 << 20
)

func main() {
	var c config
	sections := flag.String("sections", "cold,sustained,burst,idle", "sections to run: cold, sustained, burst, idle")
	flag.StringVar(&c.engine, "engine", "", "passed to sandboxd as --engine (docker, oci; default: docker, as every bench daemon)")
	flag.IntVar(&c.n, "n", 30, "cold: samples per image and side")
	images := flag.String("images", "sandboxd/busybox:latest,sandboxd/base:bookworm", "cold: comma-separated images; each is measured on every side")
	flag.StringVar(&c.image, "image", "sandboxd/busybox:latest", "sustained, burst, idle: the image of every side")
	flag.DurationVar(&c.duration, "duration", time.Minute, "sustained: how long each side creates")
	flag.IntVar(&c.concurrency, "concurrency", 8, "sustained, idle: creates in flight")
	flag.IntVar(&c.burst, "burst", 50, "burst: creates at once")
	flag.IntVar(&c.pool, "pool", 8, "burst: the pool's size (the adaptive pool's minimum)")
	flag.IntVar(&c.idle, "idle", 500, "idle: sandboxes at once")
	flag.Int64Var(&c.idleMemoryMB, "idle-memory-mb", 64, "idle: each sandbox's memory limit")
	flag.StringVar(&c.binDir, "bin", "", "directory holding sandboxd and toolboxd (default: bin/ of this checkout when both are there)")
	flag.BoolVar(&c.build, "build", false, "build sandboxd and toolboxd from this checkout even when -bin has them")
	flag.Parse()
	c.sections = map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		switch s = strings.TrimSpace(s); s {
		case "cold", "sustained", "burst", "idle":
			c.sections[s] = true
		case "":
		default:
			fmt.Fprintf(os.Stderr, "createbench: unknown section %q\n", s)
			os.Exit(2)
		}
	}
	for _, img := range strings.Split(*images, ",") {
		if img = strings.TrimSpace(img); img != "" {
			c.images = append(c.images, img)
		}
	}
	if c.n < 1 || c.concurrency < 1 || c.burst < 1 || c.pool < 1 || c.pool >= 64 || c.idle < 1 || c.duration <= 0 {
		fmt.Fprintln(os.Stderr, "createbench: -n, -concurrency, -burst, -idle and -duration must be positive, -pool from 1 to 63")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "createbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) (err error) {
	tmp, err := os.MkdirTemp("", "cb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, c.binDir, c.build, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	args := []string{"--pool", "none", "--cpu-budget", strconv.Itoa(budgetMilliCPU), "--memory-budget", strconv.Itoa(budgetMemoryMB)}
	if c.engine != "" {
		args = append(args, "--engine", c.engine)
	}
	opts := benchd.Options{
		Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "createbench", Args: args,
		// A restart reconciles every idle sandbox of section 4.
		StartTimeout: 10 * time.Minute,
	}
	d, err := benchd.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { d.Finish(&err) }() // d is the restarted daemon after section 4

	engine := c.engine
	if engine == "" {
		engine = "docker"
	}
	fmt.Printf("createbench: engine %s; %d CPUs; docker %s; sandboxd %s\n",
		engine, goruntime.NumCPU(), benchd.DockerVersion(ctx), d.Version)
	if c.sections["cold"] {
		fmt.Printf("\n1. cold create → first exec: n=%d per side, interleaved; no warm pool\n", c.n)
		for _, image := range c.images {
			res, err := measure(ctx, d, image, c.n)
			if err != nil {
				return fmt.Errorf("cold %s: %w", image, err)
			}
			res.print(os.Stdout)
		}
	}
	if c.sections["sustained"] {
		if err := sustained(ctx, d, c); err != nil {
			return fmt.Errorf("sustained: %w", err)
		}
	}
	if c.sections["burst"] {
		if err := bursts(ctx, d, c); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
	}
	if c.sections["idle"] {
		if d, err = idle(ctx, d, opts, c); err != nil {
			return fmt.Errorf("idle: %w", err)
		}
	}
	return nil
}

// result holds the samples of one image.
type result struct {
	image string
	// total is create → first exec; create and exec are its two parts.
	total, create, exec []time.Duration
	// docker is `docker run --rm IMAGE true`; dockerNoNet adds
	// --network none, which is what a sandbox gets by default (no network
	// setup), so the pair brackets the fair comparison.
	docker, dockerNoNet []time.Duration
	// dockerExec is `docker run -d --network none IMAGE sleep` then
	// `docker exec CONTAINER true`: a container that stays, and its first
	// command, as a sandbox's create and first exec.
	dockerExec []time.Duration
	// steps are the Server-Timing durations by step name; order is the
	// order in which the steps first appeared.
	steps map[string][]time.Duration
	order []string
}

func measure(ctx context.Context, d *benchd.Daemon, image string, n int) (*result, error) {
	// Warm-up, untimed: image metadata, page cache, connections.
	if _, err := sample(ctx, d, image); err != nil {
		return nil, fmt.Errorf("warm-up create: %w", err)
	}
	if _, err := dockerRun(ctx, image); err != nil {
		return nil, fmt.Errorf("warm-up docker run: %w", err)
	}
	if _, err := dockerRun(ctx, image, "--network", "none"); err != nil {
		return nil, fmt.Errorf("warm-up docker run: %w", err)
	}
	if _, err := dockerRunExec(ctx, d, image); err != nil {
		return nil, fmt.Errorf("warm-up docker run -d + exec: %w", err)
	}
	r := &result{image: image, steps: map[string][]time.Duration{}}
	sandboxSide := func() error {
		s, err := sample(ctx, d, image)
		if err != nil {
			return err
		}
		r.total = append(r.total, s.create+s.exec)
		r.create = append(r.create, s.create)
		r.exec = append(r.exec, s.exec)
		for _, st := range s.steps {
			if _, ok := r.steps[st.Name]; !ok {
				r.order = append(r.order, st.Name)
			}
			r.steps[st.Name] = append(r.steps[st.Name], st.Dur)
		}
		return nil
	}
	dockerSide := func() error {
		dur, err := dockerRun(ctx, image)
		if err != nil {
			return err
		}
		r.docker = append(r.docker, dur)
		dur, err = dockerRun(ctx, image, "--network", "none")
		if err != nil {
			return err
		}
		r.dockerNoNet = append(r.dockerNoNet, dur)
		dur, err = dockerRunExec(ctx, d, image)
		r.dockerExec = append(r.dockerExec, dur)
		return err
	}
	for i := range n {
		first, second := sandboxSide, dockerSide
		if i%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		benchd.Progress("%s: %d/%d", image, i+1, n)
	}
	benchd.Progress("")
	return r, nil
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "\nimage %s\n", r.image)
	t := benchd.Table{W: w}
	t.Head("")
	t.Row("sandboxd create → first exec", r.total)
	t.Row("  create (POST → 201)", r.create)
	t.Row("  first exec `true`", r.exec)
	t.Row("docker run --rm IMAGE true", r.docker)
	t.Row("docker run --rm --network none IMAGE true", r.dockerNoNet)
	t.Row("docker run -d --network none + docker exec", r.dockerExec)
	t.Ratio("p50 ratio sandboxd / docker run", r.total, r.docker)
	t.Ratio("p50 ratio sandboxd / docker run (no net)", r.total, r.dockerNoNet)
	t.Ratio("p50 ratio sandboxd / docker run -d + exec", r.total, r.dockerExec)
	fmt.Fprintln(w)
	t.Head("create steps (Server-Timing)")
	var sum time.Duration
	for _, name := range r.order {
		t.Row("  "+name, r.steps[name])
		sum += benchd.Pct(r.steps[name], 50)
	}
	t.Note("  sum of the step p50s", benchd.Ms(sum))
}

// dockerRun times `docker run --rm [flags] image true`.
func dockerRun(ctx context.Context, image string, flags ...string) (time.Duration, error) {
	dur, _, err := benchd.Docker(ctx, append(append([]string{"run", "--rm"}, flags...), image, "true")...)
	return dur, err
}

// dockerRunExec times `docker run -d --network none IMAGE sleep` and
// `docker exec CONTAINER true` together; the container is then removed,
// untimed.
func dockerRunExec(ctx context.Context, d *benchd.Daemon, image string) (time.Duration, error) {
	start := time.Now()
	id, err := dockerStart(ctx, d, image)
	if err != nil {
		return 0, err
	}
	defer dockerRemove(ctx, id)
	if _, _, err := benchd.Docker(ctx, "exec", id, "true"); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// dockerStart is `docker run -d --network none` of a container of image
// that sleeps (labelled as the benchmark's, so Close removes what a
// failed run leaves); it returns the container's id.
func dockerStart(ctx context.Context, d *benchd.Daemon, image string, flags ...string) (string, error) {
	args := append([]string{"run", "-d", "--network", "none", "--label", d.BaselineLabel()}, flags...)
	_, id, err := benchd.Docker(ctx, append(args, image, "sleep", "86400")...)
	return id, err
}

// dockerRemove removes containers, with a fresh bound (it runs on the
// way out of a cancelled run too), and logs a failure: Close's label
// sweep catches what it leaves.
func dockerRemove(ctx context.Context, ids ...string) {
	if len(ids) == 0 {
		return
	}
	if _, _, err := benchd.Docker(context.WithoutCancel(ctx), append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
}

// sampled is one create → first exec through the API.
type sampled struct {
	create, exec time.Duration
	steps        []benchd.Step
}

// sample creates a sandbox from image, runs `true` in it, and destroys it
// (untimed).
func sample(ctx context.Context, d *benchd.Daemon, image string) (sampled, error) {
	var s sampled
	start := time.Now()
	c, err := d.Create(ctx, map[string]any{"image": image})
	s.create = time.Since(start)
	if c.ID != "" {
		defer d.Destroy(ctx, c.ID)
	}
	if err != nil {
		return s, err
	}
	s.steps = c.Steps
	start = time.Now()
	if err := d.ExecTrue(ctx, c.ID); err != nil {
		return s, err
	}
	s.exec = time.Since(start)
	return s, nil
}
