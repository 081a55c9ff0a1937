// Command poolbench measures the warm pool (a pooled create in
// under 3 ms) beside the cold path and `docker run -d` of the same image,
// all in one run against one daemon:
//
//		go run ./bench/poolbench [-n 20] [-image sandboxd/base:bookworm] [-burst 16] [-rounds 2] [-exec-n 200] [-cpuprofile FILE]
//
//	 1. create: POST /v1/sandboxes → 201 served by the pool (Server-Timing
//	    pool;desc=hit), beside a cold create of the same image and
//	    `docker run -d` of it; interleaved, rotating which side goes first;
//	 2. create → first exec `true` through /v1, the same three sides (the
//	    baseline adds `docker exec CONTAINER true`);
//	 3. a burst of B concurrent creates against a pool of B, beside B cold
//	    creates and B `docker run -d` at once;
//	 4. refill: PUT /v1/pools from 0 to B, timed until GET /v1/pools shows
//	    B ready, beside B `docker run -d` with the refill's concurrency (2);
//	 5. the exec round trip of `true` on a running sandbox, beside a bare
//	    fork+exec of `true` on the host, interleaved.
//
// The pool keeps one class: the image with the create defaults (1 CPU,
// 512 MB). A cold sample asks for the same image with memory_mb 511, a
// class the pool does not keep, so it runs the whole create chain (and
// the refill yields to it). After every sample the bench waits, untimed,
// until the pool is full again, so no refill runs under a measurement.
//
// The daemon runs from bin/ (as createbench), with --pool none (the bench
// sets the pool itself) and a host budget large enough for the bursts. With
// -cpuprofile it also serves pprof on 127.0.0.1, and after the measured exec
// loop a second, unmeasured loop runs while a CPU profile of the daemon is
// taken. Everything is destroyed at the end, by the daemon and then by
// label, also on failure or Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

// Bounds.
const (
	// poolWait bounds a wait for the pool to reach its target.
	poolWait = 3 * time.Minute
	// refillConcurrency is the pool's refills in flight (service default).
	refillConcurrency = 2
	// coldMemoryMB makes a create of the image miss the pool.
	coldMemoryMB = 511
	// settledPool is the pool's size during the create samples.
	settledPool = 2
	// profileSeconds is the length of the -cpuprofile profile.
	profileSeconds = 10
)

type config struct {
	n, burst, rounds, execN int
	image, binDir           string
	build                   bool
	cpuProfile              string
	sections                map[string]bool
}

func main() {
	var c config
	flag.IntVar(&c.n, "n", 20, "create samples per side")
	flag.StringVar(&c.image, "image", "sandboxd/base:bookworm", "image of every side")
	flag.IntVar(&c.burst, "burst", 16, "concurrent creates of a burst, and the pool's size for it (at most 64)")
	flag.IntVar(&c.rounds, "rounds", 2, "bursts (and refills) per side")
	flag.IntVar(&c.execN, "exec-n", 200, "exec round trips per side")
	flag.StringVar(&c.binDir, "bin", "", "directory holding sandboxd and toolboxd (default: bin/ of this checkout when both are there)")
	flag.BoolVar(&c.build, "build", false, "build sandboxd and toolboxd from this checkout even when -bin has them")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the daemon during an exec loop to this file")
	sections := flag.String("sections", "create,burst,exec", "which sections to run: create (1, 2), burst (3, 4), exec (5)")
	flag.Parse()
	c.sections = map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		c.sections[strings.TrimSpace(s)] = true
	}
	if c.n < 1 || c.rounds < 1 || c.execN < 1 || c.burst < 1 || c.burst > 64 {
		fmt.Fprintln(os.Stderr, "poolbench: -n, -rounds and -exec-n must be at least 1, -burst from 1 to 64")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "poolbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) (err error) {
	tmp, err := os.MkdirTemp("", "pb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, c.binDir, c.build, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	args := []string{"--pool", "none", "--cpu-budget", "256000", "--memory-budget", "131072"}
	pprofAddr := ""
	if c.cpuProfile != "" {
		port, err := benchd.FreePort()
		if err != nil {
			return err
		}
		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--pprof-listen", pprofAddr)
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "poolbench", Args: args})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	b := &bench{d: d, image: c.image}
	fmt.Printf("poolbench: image %s; %d CPUs; docker %s; sandboxd %s\n",
		c.image, goruntime.NumCPU(), benchd.DockerVersion(ctx), d.Version)
	fmt.Printf("pooled: the pool keeps the image's default class (1 CPU, 512 MB); cold: memory_mb %d, a class it does not keep\n", coldMemoryMB)
	if c.sections["create"] {
		if err := b.creates(ctx, c.n); err != nil {
			return fmt.Errorf("creates: %w", err)
		}
	}
	if c.sections["burst"] {
		if err := b.bursts(ctx, c.burst, c.rounds); err != nil {
			return fmt.Errorf("bursts: %w", err)
		}
	}
	if c.sections["exec"] {
		if err := b.execs(ctx, c.execN, pprofAddr, c.cpuProfile); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
	}
	return nil
}

type bench struct {
	d     *benchd.Daemon
	image string
}

func (b *bench) pooledBody() map[string]any { return map[string]any{"image": b.image} }
func (b *bench) coldBody() map[string]any {
	return map[string]any{"image": b.image, "memory_mb": coldMemoryMB}
}

// setPool sets the pool's one class to size (PUT /v1/pools).
func (b *bench) setPool(ctx context.Context, size int) error {
	resp, err := b.d.Do(ctx, http.MethodPut, "/v1/pools", map[string]any{"pools": []map[string]any{{"image": b.image, "size": size}}})
	if err != nil {
		return fmt.Errorf("PUT /v1/pools: %w", err)
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("PUT /v1/pools: %s", resp)
	}
	return nil
}

// waitPool polls GET /v1/pools until the image's class has ready idle
// sandboxes and none being made, and returns how long that took.
func (b *bench) waitPool(ctx context.Context, ready int) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, poolWait)
	defer cancel()
	for {
		resp, err := b.d.Do(ctx, http.MethodGet, "/v1/pools", nil)
		if err != nil {
			return 0, fmt.Errorf("GET /v1/pools: %w (waiting for %d ready)", err, ready)
		}
		var st struct {
			Pools []struct {
				Image          string
				Ready, Filling int
			}
		}
		if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &st) != nil {
			return 0, fmt.Errorf("GET /v1/pools: %s", resp)
		}
		got, filling := 0, 0
		for _, p := range st.Pools {
			if p.Image == b.image {
				got, filling = p.Ready, p.Filling
			}
		}
		if got == ready && filling == 0 {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the pool has %d ready, %d filling, want %d: %w", got, filling, ready, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// create is one create through the API, timed to its answer, checked to
// have been served by the pool or not as wanted.
func (b *bench) create(ctx context.Context, pooled bool) (benchd.Created, time.Duration, error) {
	body := b.coldBody()
	if pooled {
		body = b.pooledBody()
	}
	start := time.Now()
	c, err := b.d.Create(ctx, body)
	dur := time.Since(start)
	if err == nil && c.Pooled() != pooled {
		err = fmt.Errorf("create %v: pooled=%v, want %v", body, c.Pooled(), pooled)
	}
	return c, dur, err
}

// firstExec is a create and its first exec of `true`, both timed.
type firstExec struct{ create, total time.Duration }

func (b *bench) sandboxFirstExec(ctx context.Context, pooled bool) (firstExec, error) {
	c, dur, err := b.create(ctx, pooled)
	if c.ID != "" {
		defer b.d.Destroy(ctx, c.ID)
	}
	if err != nil {
		return firstExec{}, err
	}
	start := time.Now()
	if err := b.d.ExecTrue(ctx, c.ID); err != nil {
		return firstExec{}, err
	}
	return firstExec{create: dur, total: dur + time.Since(start)}, nil
}

// dockerFirstExec is `docker run -d IMAGE sleep` and `docker exec C true`
// (the container removed afterwards, untimed).
func (b *bench) dockerFirstExec(ctx context.Context) (firstExec, error) {
	run, id, err := b.dockerRunD(ctx)
	if id != "" {
		defer b.dockerRm(ctx, id)
	}
	if err != nil {
		return firstExec{}, err
	}
	ex, _, err := benchd.Docker(ctx, "exec", id, "true")
	if err != nil {
		return firstExec{}, err
	}
	return firstExec{create: run, total: run + ex}, nil
}

// dockerRunD is `docker run -d --network none` of the image (a sandbox
// has no network by default), labelled for the cleanup; it answers once
// the container runs.
func (b *bench) dockerRunD(ctx context.Context) (time.Duration, string, error) {
	return benchd.Docker(ctx, "run", "-d", "--network", "none", "--label", b.d.BaselineLabel(), b.image, "sleep", "600")
}

func (b *bench) dockerRm(ctx context.Context, ids ...string) {
	if _, _, err := benchd.Docker(context.WithoutCancel(ctx), append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
		fmt.Fprintln(os.Stderr, "poolbench:", err)
	}
}

// creates measures sections 1 and 2.
func (b *bench) creates(ctx context.Context, n int) error {
	if err := b.setPool(ctx, settledPool); err != nil {
		return err
	}
	if _, err := b.waitPool(ctx, settledPool); err != nil {
		return err
	}
	var pooled, cold, docker []firstExec
	var claim []time.Duration // the pool step of Server-Timing
	sides := []func() error{
		func() error {
			s, err := b.sandboxFirstExec(ctx, true)
			if err != nil {
				return err
			}
			pooled = append(pooled, s)
			// The refill replaces the claimed sandbox before anything else
			// is measured.
			_, err = b.waitPool(ctx, settledPool)
			return err
		},
		func() error {
			s, err := b.sandboxFirstExec(ctx, false)
			cold = append(cold, s)
			return err
		},
		func() error {
			s, err := b.dockerFirstExec(ctx)
			docker = append(docker, s)
			return err
		},
	}
	// Warm-up, untimed: image metadata, page cache, connections.
	for _, side := range sides {
		if err := side(); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	pooled, cold, docker = nil, nil, nil
	for i := range n {
		for j := range sides {
			if err := sides[(i+j)%len(sides)](); err != nil {
				return err
			}
		}
		benchd.Progress("creates: %d/%d", i+1, n)
	}
	benchd.Progress("")
	// The claim as the daemon times it, from fresh creates.
	for range min(n, 10) {
		c, _, err := b.create(ctx, true)
		if c.ID != "" {
			b.d.Destroy(ctx, c.ID)
		}
		if err != nil {
			return err
		}
		for _, st := range c.Steps {
			if st.Name == "pool" {
				claim = append(claim, st.Dur)
			}
		}
		if _, err := b.waitPool(ctx, settledPool); err != nil {
			return err
		}
	}
	part := func(s []firstExec, total bool) []time.Duration {
		out := make([]time.Duration, len(s))
		for i, x := range s {
			out[i] = x.create
			if total {
				out[i] = x.total
			}
		}
		return out
	}
	t := benchd.Table{W: os.Stdout}
	fmt.Println()
	t.Head("1. create (→ 201; docker: run -d returns)")
	t.Row("pooled create", part(pooled, false))
	t.Row("  its pool step (Server-Timing)", claim)
	t.Row("cold create", part(cold, false))
	t.Row("docker run -d --network none", part(docker, false))
	t.Ratio("p50 ratio pooled / cold", part(pooled, false), part(cold, false))
	t.Ratio("p50 ratio pooled / docker run -d", part(pooled, false), part(docker, false))
	fmt.Println()
	t.Head("2. create → first exec `true` (/v1)")
	t.Row("pooled create → exec", part(pooled, true))
	t.Row("cold create → exec", part(cold, true))
	t.Row("docker run -d → docker exec true", part(docker, true))
	t.Ratio("p50 ratio pooled / cold", part(pooled, true), part(cold, true))
	t.Ratio("p50 ratio pooled / docker", part(pooled, true), part(docker, true))
	return b.setPool(ctx, 0)
}

// bursts measures sections 3 and 4: per round, the refill from 0 to size,
// a burst of size pooled creates, one of size cold creates, one of size
// `docker run -d`, and size `docker run -d` at the refill's concurrency.
func (b *bench) bursts(ctx context.Context, size, rounds int) error {
	var refill, dockerRefill, pooled, cold, docker, pooledWall, coldWall, dockerWall []time.Duration
	for r := range rounds {
		if _, err := b.waitPool(ctx, 0); err != nil {
			return err
		}
		// 4. refill 0 → size.
		if err := b.setPool(ctx, size); err != nil {
			return err
		}
		d, err := b.waitPool(ctx, size)
		if err != nil {
			return err
		}
		refill = append(refill, d)

		// 3. the pooled burst; then the pool stops refilling, so that
		// nothing runs behind the other sides.
		ds, wall, err := b.sandboxBurst(ctx, size, true)
		if err != nil {
			return err
		}
		pooled, pooledWall = append(pooled, ds...), append(pooledWall, wall)
		if err := b.setPool(ctx, 0); err != nil {
			return err
		}
		if _, err := b.waitPool(ctx, 0); err != nil {
			return err
		}
		ds, wall, err = b.sandboxBurst(ctx, size, false)
		if err != nil {
			return err
		}
		cold, coldWall = append(cold, ds...), append(coldWall, wall)
		ds, wall, err = b.dockerBurst(ctx, size, size)
		if err != nil {
			return err
		}
		docker, dockerWall = append(docker, ds...), append(dockerWall, wall)
		_, wall, err = b.dockerBurst(ctx, size, refillConcurrency)
		if err != nil {
			return err
		}
		dockerRefill = append(dockerRefill, wall)
		benchd.Progress("bursts: %d/%d", r+1, rounds)
	}
	benchd.Progress("")
	t := benchd.Table{W: os.Stdout}
	fmt.Println()
	t.Head(fmt.Sprintf("3. burst: %d creates at once (each)", size))
	t.Row(fmt.Sprintf("pooled (a pool of %d)", size), pooled)
	t.Row("cold", cold)
	t.Row("docker run -d", docker)
	t.Head("   the whole burst (last answer)")
	t.Row("pooled", pooledWall)
	t.Row("cold", coldWall)
	t.Row("docker run -d", dockerWall)
	fmt.Println()
	rate := func(ds []time.Duration) string {
		return fmt.Sprintf("%.1f/s", float64(size)/benchd.Pct(ds, 50).Seconds())
	}
	t.Head(fmt.Sprintf("4. refill: %d sandboxes, %d at a time", size, refillConcurrency))
	t.Row(fmt.Sprintf("pool 0 → %d ready (PUT /v1/pools)", size), refill)
	t.Note("  sandboxes per second at p50", rate(refill))
	t.Row(fmt.Sprintf("docker run -d ×%d, %d at a time", size, refillConcurrency), dockerRefill)
	t.Note("  containers per second at p50", rate(dockerRefill))
	return nil
}

// sandboxBurst makes n creates at once and destroys them (untimed); it
// returns each create's time and the time to the last answer.
func (b *bench) sandboxBurst(ctx context.Context, n int, pooled bool) ([]time.Duration, time.Duration, error) {
	ids := make([]string, n)
	ds := make([]time.Duration, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var c benchd.Created
			c, ds[i], errs[i] = b.create(ctx, pooled)
			ids[i] = c.ID
		})
	}
	wg.Wait()
	wall := time.Since(start)
	b.destroyAll(ctx, ids)
	return ds, wall, errors.Join(errs...)
}

// destroyAll destroys the sandboxes of ids, four at a time.
func (b *bench) destroyAll(ctx context.Context, ids []string) {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, id := range ids {
		if id == "" {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			b.d.Destroy(ctx, id)
		})
	}
	wg.Wait()
}

// dockerBurst starts n containers with `docker run -d`, conc at a time,
// then removes them (untimed); it returns each run's time and the time
// until the last one ran.
func (b *bench) dockerBurst(ctx context.Context, n, conc int) ([]time.Duration, time.Duration, error) {
	ids := make([]string, n)
	ds := make([]time.Duration, n)
	errs := make([]error, n)
	sem := make(chan struct{}, conc)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ds[i], ids[i], errs[i] = b.dockerRunD(ctx)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	var made []string
	for _, id := range ids {
		if id != "" {
			made = append(made, id)
		}
	}
	if len(made) > 0 {
		b.dockerRm(ctx, made...)
	}
	return ds, wall, errors.Join(errs...)
}

// execs measures section 5 on one pooled sandbox and, with profile set,
// takes a CPU profile of the daemon during a second exec loop.
func (b *bench) execs(ctx context.Context, n int, pprofAddr, profile string) error {
	if err := b.setPool(ctx, 1); err != nil {
		return err
	}
	if _, err := b.waitPool(ctx, 1); err != nil {
		return err
	}
	c, _, err := b.create(ctx, true)
	if c.ID != "" {
		defer b.d.Destroy(ctx, c.ID)
	}
	if err != nil {
		return err
	}
	if err := b.setPool(ctx, 0); err != nil {
		return err
	}
	if _, err := b.waitPool(ctx, 0); err != nil {
		return err
	}
	api := func() error { return b.d.ExecTrue(ctx, c.ID) }
	host := func() error { return exec.CommandContext(ctx, "true").Run() }
	for range 10 { // warm-up: connections, page cache
		if err := api(); err != nil {
			return err
		}
		if err := host(); err != nil {
			return err
		}
	}
	var viaAPI, onHost []time.Duration
	type side struct {
		f   func() error
		out *[]time.Duration
	}
	sides := []side{{api, &viaAPI}, {host, &onHost}}
	for i := range n {
		for j := range sides {
			s := sides[(i+j)%len(sides)]
			start := time.Now()
			if err := s.f(); err != nil {
				return err
			}
			*s.out = append(*s.out, time.Since(start))
		}
	}
	t := benchd.Table{W: os.Stdout}
	fmt.Println()
	t.Head("5. exec `true` round trip")
	t.Row("POST /v1/sandboxes/{id}/exec", viaAPI)
	t.Row("host fork+exec of `true` (no sandbox, no RPC)", onHost)
	t.Note("p50 difference", benchd.Ms(benchd.Pct(viaAPI, 50)-benchd.Pct(onHost, 50)))
	if profile == "" {
		return nil
	}
	return b.profileExecs(ctx, c.ID, pprofAddr, profile)
}

// profileExecs runs execs of `true` in id while the daemon takes a CPU
// profile of profileSeconds, and writes it to file.
func (b *bench) profileExecs(ctx context.Context, id, pprofAddr, file string) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		execs int
		eerr  error
	)
	wg.Go(func() {
		for pctx.Err() == nil {
			if err := b.d.ExecTrue(pctx, id); err != nil {
				if pctx.Err() == nil {
					eerr = err
				}
				return
			}
			execs++
		}
	})
	defer wg.Wait()
	hctx, hcancel := context.WithTimeout(ctx, (profileSeconds+30)*time.Second)
	defer hcancel()
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, profileSeconds), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 64<<20)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	cancel()
	wg.Wait()
	fmt.Printf("\nCPU profile of the daemon over %d s, %d execs of `true`: %s (go tool pprof -top %s)\n", profileSeconds, execs, file, file)
	return eerr
}
