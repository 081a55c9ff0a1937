package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

// idleMilliCPU is each idle sandbox's CPU (the smallest a create may ask).
const idleMilliCPU = 100

// idle is section 4: c.idle idle sandboxes at once, what they cost the
// host beyond their own processes, the daemon's RSS, and the time a
// restart takes to reconcile them; beside as many `docker run -d`
// containers with the same limits. It answers the daemon that runs at its
// end (the restarted one).
func idle(ctx context.Context, d *benchd.Daemon, opts benchd.Options, c config) (*benchd.Daemon, error) {
	n := c.idle
	fmt.Printf("\n4. %d idle sandboxes at once (image %s, %d MB, %.1f CPU each; created %d at a time), beside as many\n"+
		"   `docker run -d --network none --memory %dm` containers; host memory is MemTotal − MemAvailable, shared\n"+
		"   with whatever else runs here, so compare the two sides\n",
		n, c.image, c.idleMemoryMB, float64(idleMilliCPU)/1000, c.concurrency, c.idleMemoryMB)

	// The sandboxes.
	usedBefore, err := hostUsed()
	if err != nil {
		return d, err
	}
	rssBefore, _ := rssOf(d.PID())
	body := map[string]any{"image": c.image, "memory_mb": c.idleMemoryMB, "cpu": float64(idleMilliCPU) / 1000, "timeout_s": 7200}
	var (
		ids   []string
		idsMu sync.Mutex
	)
	destroyAll := func() {
		each(ctx, ids, c.concurrency, func(id string) error { d.Destroy(ctx, id); return nil })
		ids = nil
	}
	defer func() { destroyAll() }() // on failure too; d is the live daemon then
	createLat, err := each(ctx, make([]string, n), c.concurrency, func(string) error {
		created, err := d.Create(ctx, body)
		if created.ID != "" {
			idsMu.Lock()
			ids = append(ids, created.ID)
			idsMu.Unlock()
		}
		return err
	})
	if err != nil {
		return d, err
	}
	execLat, err := each(ctx, ids, c.concurrency, func(id string) error { return d.ExecTrue(ctx, id) })
	if err != nil {
		return d, fmt.Errorf("an idle sandbox did not answer an exec: %w", err)
	}
	usedAfter, err := hostUsed()
	if err != nil {
		return d, err
	}
	var own int64
	var ownMu sync.Mutex
	if _, err := each(ctx, ids, c.concurrency, func(id string) error {
		b, err := sandboxMemory(ctx, d, id)
		ownMu.Lock()
		own += b
		ownMu.Unlock()
		return err
	}); err != nil {
		return d, err
	}
	rssAfter, _ := rssOf(d.PID())
	shims, shimPss := enginePSS(ctx, "sandboxd.node="+d.NodeID)

	// A restart: SIGKILL, then a start that reconciles every sandbox
	// before it is ready.
	d.Kill()
	t0 := time.Now()
	restarted, err := benchd.Start(ctx, opts)
	if err != nil {
		return d, fmt.Errorf("restart with %d sandboxes: %w", n, err)
	}
	d = restarted
	ready := time.Since(t0)
	afterRestart, err := each(ctx, ids, c.concurrency, func(id string) error { return d.ExecTrue(ctx, id) })
	if err != nil {
		return d, fmt.Errorf("after the restart: %w", err)
	}
	rssRestarted, _ := rssOf(d.PID())
	t1 := time.Now()
	destroyAll()
	destroyed := time.Since(t1)

	// The baseline: as many containers, the same limits.
	dUsedBefore, err := hostUsed()
	if err != nil {
		return d, err
	}
	var cids []string
	var cidsMu sync.Mutex
	defer func() { dockerRemove(ctx, cids...) }()
	dockerLat, err := each(ctx, make([]string, n), c.concurrency, func(string) error {
		id, err := dockerStart(ctx, d, c.image, "--memory", fmt.Sprintf("%dm", c.idleMemoryMB), "--cpus", fmt.Sprintf("%.1f", float64(idleMilliCPU)/1000))
		if id != "" {
			cidsMu.Lock()
			cids = append(cids, id)
			cidsMu.Unlock()
		}
		return err
	})
	if err != nil {
		return d, err
	}
	dockerExecLat, err := each(ctx, cids, c.concurrency, func(id string) error {
		_, _, err := benchd.Docker(ctx, "exec", id, "true")
		return err
	})
	if err != nil {
		return d, err
	}
	dUsedAfter, err := hostUsed()
	if err != nil {
		return d, err
	}
	dOwn, err := containersMemory(ctx, cids)
	if err != nil {
		return d, err
	}
	dShims, dShimPss := enginePSS(ctx, d.BaselineLabel())

	t := benchd.Table{W: os.Stdout}
	t.Head(fmt.Sprintf("%d at once", n))
	t.Row("sandboxd create (POST → 201)", createLat)
	t.Row("sandboxd exec `true` in each, all answered", execLat)
	t.Row("docker run -d", dockerLat)
	t.Row("docker exec CONTAINER true in each", dockerExecLat)
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	t.Note("sandboxd: host memory used, growth", mib(usedAfter-usedBefore))
	t.Note("  the sandboxes' own (cgroup, sum)", mib(own))
	t.Note("  outside them, per sandbox", mib((usedAfter-usedBefore-own)/int64(n)))
	t.Note("  of which the engine's per-sandbox process", perShim(shims, shimPss))
	t.Note("docker: host memory used, growth", mib(dUsedAfter-dUsedBefore))
	t.Note("  the containers' own (cgroup, sum)", mib(dOwn))
	t.Note("  outside them, per container", mib((dUsedAfter-dUsedBefore-dOwn)/int64(n)))
	t.Note("  of which the engine's per-container process", perShim(dShims, dShimPss))
	t.Note("sandboxd RSS before → with them", mib(rssBefore)+" → "+mib(rssAfter))
	t.Note("restart (SIGKILL) → ready, reconciled", benchd.Ms(ready))
	t.Row("  exec `true` in each after it, all answered", afterRestart)
	t.Note("  sandboxd RSS after it", mib(rssRestarted))
	t.Note(fmt.Sprintf("destroy all %d (%d at a time)", n, c.concurrency), benchd.Ms(destroyed))
	return d, nil
}

// each runs f for every item, at most conc at once, and returns the
// duration of every call that succeeded and the first error (the others
// still run).
func each(ctx context.Context, items []string, conc int, f func(string) error) ([]time.Duration, error) {
	var (
		mu    sync.Mutex
		durs  []time.Duration
		first error
		wg    sync.WaitGroup
		done  int
	)
	sem := make(chan struct{}, conc)
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			err := f(it)
			dur := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			done++
			benchd.Progress("%d/%d", done, len(items))
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			durs = append(durs, dur)
		})
	}
	wg.Wait()
	benchd.Progress("")
	if first == nil {
		first = ctx.Err()
	}
	return durs, first
}

// hostUsed is the host's used memory, MemTotal − MemAvailable: the median
// of memSamples readings memEvery apart, after memSettle (what the last
// creates freed or touched settles; other work on a shared host moves it
// either way).
func hostUsed() (int64, error) {
	time.Sleep(memSettle)
	var samples []int64
	for i := range memSamples {
		if i > 0 {
			time.Sleep(memEvery)
		}
		v, err := readUsed()
		if err != nil {
			return 0, err
		}
		samples = append(samples, v)
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

// How hostUsed samples.
const (
	memSettle  = 3 * time.Second
	memSamples = 9
	memEvery   = 300 * time.Millisecond
)

// readUsed reads MemTotal − MemAvailable once.
func readUsed() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total, avail int64 = -1, -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	if total < 0 || avail < 0 {
		return 0, errors.New("/proc/meminfo: no MemTotal or MemAvailable")
	}
	return total - avail, nil
}

// rssOf is a process's resident memory (VmRSS).
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// enginePSS finds the engine's process beside each container labelled
// label (the parent of the container's first process, when that is a
// containerd shim) and sums their proportional set sizes (PSS: shared
// pages divided among their sharers, so the sum is what they hold
// together). It measures the part of "outside the sandboxes" that a
// shared host's other work cannot blur; it finds nothing on a runtime
// without the engine.
func enginePSS(ctx context.Context, label string) (n int, pss int64) {
	_, out, err := benchd.Docker(ctx, "ps", "-q", "--no-trunc", "--filter", "label="+label)
	if err != nil || out == "" {
		return 0, 0
	}
	_, pids, err := benchd.Docker(ctx, append([]string{"inspect", "--format", "{{.State.Pid}}"}, strings.Fields(out)...)...)
	if err != nil {
		return 0, 0
	}
	for _, pid := range strings.Fields(pids) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after ')'.
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + f[1] + "/comm")
		if !strings.HasPrefix(string(comm), "containerd-shim") {
			continue
		}
		b, err := os.ReadFile("/proc/" + f[1] + "/smaps_rollup")
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				pss += kb << 10
				n++
				break
			}
		}
	}
	return n, pss
}

// perShim formats enginePSS's answer per process.
func perShim(n int, pss int64) string {
	if n == 0 {
		return "none found"
	}
	return fmt.Sprintf("%.1f MiB PSS each (%d)", float64(pss)/float64(n)/(1<<20), n)
}

// sandboxMemory is a sandbox's memory from its cgroup, page cache aside
// (GET /v1/sandboxes/{id}/metrics: the runtime's, whatever the engine).
func sandboxMemory(ctx context.Context, d *benchd.Daemon, id string) (int64, error) {
	resp, err := d.Do(ctx, http.MethodGet, "/v1/sandboxes/"+id+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	var m struct {
		MemoryBytes int64 `json:"memory_bytes"`
	}
	if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &m) != nil {
		return 0, fmt.Errorf("metrics of %s: %s", id, resp)
	}
	return m.MemoryBytes, nil
}

// containersMemory sums the containers' memory as `docker stats` gives it
// (their cgroup's, page cache aside, as the sandboxes' metrics).
func containersMemory(ctx context.Context, ids []string) (int64, error) {
	var sum int64
	for i := 0; i < len(ids); i += 100 {
		batch := ids[i:min(i+100, len(ids))]
		_, out, err := benchd.Docker(ctx, append([]string{"stats", "--no-stream", "--format", "{{.MemUsage}}"}, batch...)...)
		if err != nil {
			return 0, err
		}
		for line := range strings.SplitSeq(out, "\n") {
			used, _, _ := strings.Cut(line, "/")
			b, err := parseSize(strings.TrimSpace(used))
			if err != nil {
				return 0, fmt.Errorf("docker stats %q: %w", line, err)
			}
			sum += b
		}
	}
	return sum, nil
}

// parseSize reads docker's sizes: "1.5MiB", "512KiB", "0B".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			return int64(f * u.mult), err
		}
	}
	return 0, fmt.Errorf("unknown size %q", s)
}
