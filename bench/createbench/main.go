// Command createbench measures the product's headline number — create →
// first exec of a cold Docker sandbox through the native API — beside
// `docker run --rm IMAGE true` of the same image (and the same with
// --network none, since sandboxes have no network by default), interleaved
// in one run, and breaks the create down by step from its Server-Timing
// header:
//
//	go run ./bench/createbench [-n 20] [-images sandboxd/busybox:latest,sandboxd/base:bookworm] [-bin bin] [-build]
//
// It starts sandboxd as a child process (from -bin when it holds sandboxd
// and toolboxd, else built from this checkout into a temporary directory)
// on a free 127.0.0.1 port with a temporary data directory and its own
// node id and no warm pool (--pool none: this is the cold path; poolbench
// measures the pool). For each image it warms up once, then takes N samples of each
// side, alternating which side goes first. Each sandbox sample is
//
//	POST /v1/sandboxes {"image": IMAGE}          → 201 (Server-Timing)
//	POST /v1/sandboxes/{id}/exec {"cmd":["true"]} → 200, exit 0
//
// timed from the first request to the second answer; the sandbox is then
// destroyed, untimed. Everything it creates is destroyed at the end, by the
// daemon and then by node label. Absolute numbers are noisy on shared
// machines; compare the two sides of one run.
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
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

func main() {
	n := flag.Int("n", 20, "samples per image and side")
	images := flag.String("images", "sandboxd/busybox:latest,sandboxd/base:bookworm", "comma-separated images; each is measured on both sides")
	binDir := flag.String("bin", "", "directory holding sandboxd and toolboxd (default: bin/ of this checkout when both are there)")
	build := flag.Bool("build", false, "build sandboxd and toolboxd from this checkout even when -bin has them")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "createbench: -n must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, strings.Split(*images, ","), *n, *binDir, *build); err != nil {
		fmt.Fprintln(os.Stderr, "createbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, images []string, n int, binDir string, forceBuild bool) (err error) {
	tmp, err := os.MkdirTemp("", "cb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, binDir, forceBuild, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{
		Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "createbench",
		Args: []string{"--pool", "none"},
	})
	if err != nil {
		return err
	}
	defer d.Finish(&err)

	fmt.Printf("createbench: n=%d per side, interleaved; no warm pool; %d CPUs; docker %s; sandboxd %s\n",
		n, goruntime.NumCPU(), benchd.DockerVersion(ctx), d.Version)
	for _, image := range images {
		image = strings.TrimSpace(image)
		if image == "" {
			continue
		}
		res, err := measure(ctx, d, image, n)
		if err != nil {
			return fmt.Errorf("%s: %w", image, err)
		}
		res.print(os.Stdout)
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
		r.dockerNoNet = append(r.dockerNoNet, dur)
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
	t.Ratio("p50 ratio sandboxd / docker run", r.total, r.docker)
	t.Ratio("p50 ratio sandboxd / docker run (no net)", r.total, r.dockerNoNet)
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
