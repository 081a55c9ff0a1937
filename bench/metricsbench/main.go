// Command metricsbench measures what a /metrics scrape costs as running
// sandboxes grow: the scrape carries per-sandbox series (up to 64
// sandboxes), each sampled from the engine during the scrape. Beside it,
// in the same run, `docker stats --no-stream` of the same containers (the
// engine's own way to sample them all):
//
//	go run ./bench/metricsbench [-n 10] [-counts 0,8,64] [-bin bin] [-build]
//
// It starts sandboxd as a child process (see benchd) with no warm pool,
// grows the running busybox sandboxes (0.1 CPU and 64 MB each, so that 64
// fit the default budget) to each count in turn, and at each count times
// n scrapes of GET /metrics (with the admin token) and n runs of docker
// stats, alternating which goes first. It prints the per-sandbox series each scrape carried and the sandboxes its
// sample left out. Everything it created is destroyed at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

func main() {
	n := flag.Int("n", 10, "samples per count and side")
	counts := flag.String("counts", "0,8,64", "comma-separated numbers of running sandboxes, ascending")
	binDir := flag.String("bin", "", "directory holding sandboxd and toolboxd (default: bin/ of this checkout when both are there)")
	build := flag.Bool("build", false, "build sandboxd and toolboxd from this checkout even when -bin has them")
	flag.Parse()
	var cs []int
	for f := range strings.SplitSeq(*counts, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 0 || (len(cs) > 0 && c < cs[len(cs)-1]) {
			fmt.Fprintln(os.Stderr, "metricsbench: -counts must be ascending non-negative numbers")
			os.Exit(2)
		}
		cs = append(cs, c)
	}
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "metricsbench: -n must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cs, *n, *binDir, *build); err != nil {
		fmt.Fprintln(os.Stderr, "metricsbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, counts []int, n int, binDir string, forceBuild bool) (err error) {
	tmp, err := os.MkdirTemp("", "metricsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sd, tb, err := benchd.Binaries(ctx, binDir, forceBuild, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sd, Toolboxd: tb, Dir: tmp, Name: "metricsbench", Args: []string{"--pool", "none"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	var ids []string
	defer func() {
		for _, id := range ids {
			d.Destroy(ctx, id)
		}
	}()
	fmt.Fprintf(out, "metricsbench: sandboxd %s, docker %s, busybox sandboxes of 0.1 CPU, 64 MB\n", d.NodeID, benchd.DockerVersion(ctx))
	t := benchd.Table{W: out}
	for _, c := range counts {
		for len(ids) < c {
			benchd.Progress("creating sandbox %d of %d", len(ids)+1, c)
			sb, err := d.Create(ctx, map[string]any{"image": "sandboxd/busybox:latest", "memory_mb": 64, "cpu": 0.1})
			if err != nil {
				return err
			}
			ids = append(ids, sb.ID)
		}
		benchd.Progress("")
		var scrapes, stats []time.Duration
		var series, omitted, missing string
		for i := range n {
			scrape := func() error {
				dur, body, err := scrapeOnce(ctx, d)
				if err != nil {
					return err
				}
				scrapes = append(scrapes, dur)
				series = strconv.Itoa(strings.Count(body, "\nsandboxd_sandbox_memory_bytes{"))
				omitted = sampleValues(body, "sandboxd_sandbox_series_omitted")
				missing = sampleValues(body, "sandboxd_sandbox_samples_missing")
				return nil
			}
			dockerStats := func() error {
				if c == 0 {
					return nil
				}
				_, names, err := benchd.Docker(ctx, "ps", "-q", "--filter", "label=sandboxd.node="+d.NodeID)
				if err != nil {
					return err
				}
				dur, _, err := benchd.Docker(ctx, append([]string{"stats", "--no-stream", "--format", "{{.ID}}"}, strings.Fields(names)...)...)
				if err != nil {
					return err
				}
				stats = append(stats, dur)
				return nil
			}
			first, second := scrape, dockerStats
			if i%2 == 1 {
				first, second = dockerStats, scrape
			}
			if err := first(); err != nil {
				return err
			}
			if err := second(); err != nil {
				return err
			}
		}
		t.Head(fmt.Sprintf("%d running sandboxes", c))
		t.Row("GET /metrics", scrapes)
		if c > 0 {
			t.Row("docker stats --no-stream (baseline)", stats)
		}
		t.Note("per-sandbox series in the last scrape", series)
		t.Note("left out (sandboxd_sandbox_series_omitted)", omitted)
		t.Note("late or failed (..._samples_missing)", missing)
	}
	return nil
}

// scrapeOnce times one GET /metrics with the admin token.
func scrapeOnce(ctx context.Context, d *benchd.Daemon) (time.Duration, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	dur := time.Since(start)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("GET /metrics: %d %.200s", resp.StatusCode, b)
	}
	return dur, "\n" + string(b), nil
}

// sampleValues returns the values of metric's samples in a Prometheus
// text body, "label=value" when labelled, joined by spaces ("-" if none).
func sampleValues(body, metric string) string {
	var vals []string
	for line := range strings.SplitSeq(body, "\n") {
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		vals = append(vals, strings.TrimSpace(rest))
	}
	if len(vals) == 0 {
		return "-"
	}
	return strings.Join(vals, " ")
}
