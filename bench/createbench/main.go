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
// node id. For each image it warms up once, then takes N samples of each
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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds: a sample that takes longer than these is a failure, not a figure.
const (
	requestTimeout = 2 * time.Minute
	startTimeout   = 90 * time.Second
	buildTimeout   = 8 * time.Minute
	cleanupTimeout = 2 * time.Minute
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
	sandboxdBin, toolboxdBin, err := binaries(ctx, binDir, forceBuild, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := startDaemon(ctx, sandboxdBin, toolboxdBin, tmp)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.close(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "daemon log (tail):\n%s\n", d.logTail(20))
		}
	}()

	dockerVersion, _ := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").Output()
	fmt.Printf("createbench: n=%d per side, interleaved; %d CPUs; docker %s; sandboxd %s\n",
		n, goruntime.NumCPU(), strings.TrimSpace(string(dockerVersion)), d.version)
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

func measure(ctx context.Context, d *daemon, image string, n int) (*result, error) {
	// Warm-up, untimed: image metadata, page cache, connections.
	if _, err := d.sample(ctx, image); err != nil {
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
		s, err := d.sample(ctx, image)
		if err != nil {
			return err
		}
		r.total = append(r.total, s.create+s.exec)
		r.create = append(r.create, s.create)
		r.exec = append(r.exec, s.exec)
		for _, st := range s.steps {
			if _, ok := r.steps[st.name]; !ok {
				r.order = append(r.order, st.name)
			}
			r.steps[st.name] = append(r.steps[st.name], st.dur)
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
		progress("%s: %d/%d", image, i+1, n)
	}
	progress("")
	return r, nil
}

func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "\nimage %s\n", r.image)
	row := func(name string, ds []time.Duration) {
		fmt.Fprintf(w, "  %-40s %10s %10s\n", name, ms(pct(ds, 50)), ms(pct(ds, 95)))
	}
	fmt.Fprintf(w, "  %-40s %10s %10s\n", "", "p50", "p95")
	row("sandboxd create → first exec", r.total)
	row("  create (POST → 201)", r.create)
	row("  first exec `true`", r.exec)
	row("docker run --rm IMAGE true", r.docker)
	row("docker run --rm --network none IMAGE true", r.dockerNoNet)
	fmt.Fprintf(w, "  %-40s %10s\n", "p50 ratio sandboxd / docker run",
		fmt.Sprintf("%.2fx", float64(pct(r.total, 50))/float64(pct(r.docker, 50))))
	fmt.Fprintf(w, "  %-40s %10s\n", "p50 ratio sandboxd / docker run (no net)",
		fmt.Sprintf("%.2fx", float64(pct(r.total, 50))/float64(pct(r.dockerNoNet, 50))))
	fmt.Fprintf(w, "\n  %-40s %10s %10s\n", "create steps (Server-Timing)", "p50", "p95")
	var sum time.Duration
	for _, name := range r.order {
		row("  "+name, r.steps[name])
		sum += pct(r.steps[name], 50)
	}
	fmt.Fprintf(w, "  %-40s %10s\n", "  sum of the step p50s", ms(sum))
}

// dockerRun times `docker run --rm [flags] image true`.
func dockerRun(ctx context.Context, image string, flags ...string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	args := append(append([]string{"run", "--rm"}, flags...), image, "true")
	start := time.Now()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return time.Since(start), nil
}

// progress rewrites a status line on stderr when it is a terminal; an
// empty message clears it.
func progress(format string, args ...any) {
	if fi, err := os.Stderr.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "\r\033[K"+format, args...)
}

// daemon is the sandboxd child process under measurement.
type daemon struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	url     string
	token   string
	nodeID  string
	logPath string
	version string
	hc      *http.Client
}

// startDaemon starts sandboxd with its data directory under dir and waits
// until /healthz answers (after its startup reconcile).
func startDaemon(ctx context.Context, sandboxdBin, toolboxdBin, dir string) (*daemon, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tlsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{
		url:     "http://127.0.0.1:" + strconv.Itoa(port),
		nodeID:  fmt.Sprintf("createbench-%d", os.Getpid()),
		logPath: filepath.Join(dir, "sandboxd.log"),
		exited:  make(chan struct{}),
		hc:      &http.Client{Timeout: requestTimeout},
	}
	dataDir := filepath.Join(dir, "data")
	logf, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(sandboxdBin,
		"--listen", "127.0.0.1:"+strconv.Itoa(port),
		"--tls-listen", "127.0.0.1:"+strconv.Itoa(tlsPort),
		"--data-dir", dataDir,
		"--node-id", d.nodeID,
		"--agent-binary", toolboxdBin,
		"--log-level", "warn",
	)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandboxd: %w", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitHealthy(ctx); err != nil {
		d.close()
		return nil, fmt.Errorf("sandboxd did not become healthy: %w\n%s", err, d.logTail(20))
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		d.close()
		return nil, fmt.Errorf("admin token: %w", err)
	}
	d.token = strings.TrimSpace(string(tok))
	return d, nil
}

func (d *daemon) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		var h struct{ Version string }
		resp, err := d.do(ctx, http.MethodGet, "/healthz", nil)
		if err == nil && resp.status == http.StatusOK && json.Unmarshal(resp.body, &h) == nil {
			d.version = h.Version
			return nil
		}
		select {
		case <-d.exited:
			return errors.New("sandboxd exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close stops the daemon (SIGTERM, then SIGKILL after 10 s) and removes
// every container labelled with its node id, whatever it left.
func (d *daemon) close() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label=sandboxd.node="+d.nodeID).Output()
	if err != nil {
		return fmt.Errorf("list leftover containers: %w", err)
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		fmt.Fprintf(os.Stderr, "createbench: removing %d leftover containers\n", len(ids))
		if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("remove leftover containers: %w: %s", err, out)
		}
	}
	return nil
}

func (d *daemon) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sample is one create → first exec through the API.
type sample struct {
	create, exec time.Duration
	steps        []step
}

// sample creates a sandbox from image, runs `true` in it, and destroys it
// (untimed).
func (d *daemon) sample(ctx context.Context, image string) (sample, error) {
	var s sample
	start := time.Now()
	resp, err := d.do(ctx, http.MethodPost, "/v1/sandboxes", map[string]any{"image": image})
	if err != nil {
		return s, fmt.Errorf("create: %w", err)
	}
	if resp.status != http.StatusCreated {
		return s, fmt.Errorf("create: %d %s", resp.status, resp.body)
	}
	s.create = time.Since(start)
	var sb struct{ ID string }
	if err := json.Unmarshal(resp.body, &sb); err != nil || sb.ID == "" {
		return s, fmt.Errorf("create: bad answer %q", resp.body)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
		if r, err := d.do(dctx, http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil); err != nil || r.status != http.StatusNoContent {
			fmt.Fprintf(os.Stderr, "createbench: destroy %s: %v %v\n", sb.ID, err, r)
		}
	}()
	if s.steps, err = parseServerTiming(resp.header.Get("Server-Timing")); err != nil {
		return s, err
	}

	start = time.Now()
	resp, err = d.do(ctx, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}})
	if err != nil {
		return s, fmt.Errorf("exec: %w", err)
	}
	s.exec = time.Since(start)
	var res struct {
		ExitCode int `json:"exit_code"`
	}
	if resp.status != http.StatusOK || json.Unmarshal(resp.body, &res) != nil || res.ExitCode != 0 {
		return s, fmt.Errorf("exec true: %d %s", resp.status, resp.body)
	}
	return s, nil
}

// response is a fully read HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) String() string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%d %s", r.status, r.body)
}

func (d *daemon) do(ctx context.Context, method, path string, in any) (*response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// step is one entry of a Server-Timing header.
type step struct {
	name string
	dur  time.Duration
}

// parseServerTiming reads "validate;dur=0.1, store;dur=0.4" (durations in
// milliseconds, W3C Server Timing).
func parseServerTiming(h string) ([]step, error) {
	if strings.TrimSpace(h) == "" {
		return nil, errors.New("create answer has no Server-Timing header")
	}
	var steps []step
	for entry := range strings.SplitSeq(h, ",") {
		params := strings.Split(strings.TrimSpace(entry), ";")
		st := step{name: strings.TrimSpace(params[0])}
		for _, p := range params[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, fmt.Errorf("Server-Timing %q: %w", entry, err)
				}
				st.dur = time.Duration(f * float64(time.Millisecond))
			}
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// pct is the p-th percentile of ds by nearest rank.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// ms formats d in milliseconds, with decimals only where they matter.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f ms", f)
	case f >= 1:
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.3f ms", f)
}

// binaries returns the sandboxd and toolboxd to run: from binDir (or this
// checkout's bin/) when both are there and forceBuild is unset, else built
// from this checkout into buildDir.
func binaries(ctx context.Context, binDir string, forceBuild bool, buildDir string) (string, string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	sd, tb := filepath.Join(binDir, "sandboxd"), filepath.Join(binDir, "toolboxd")
	if !forceBuild && isFile(sd) && isFile(tb) {
		return sd, tb, nil
	}
	fmt.Fprintln(os.Stderr, "createbench: building sandboxd and toolboxd…")
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(bctx, "go", "build", "-o", buildDir+string(filepath.Separator), "./cmd/sandboxd", "./cmd/toolboxd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return filepath.Join(buildDir, "sandboxd"), filepath.Join(buildDir, "toolboxd"), nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
