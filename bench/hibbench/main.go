// Command hibbench measures hibernate beside its baselines, in one run:
// for a gVisor sandbox of the engine-free runtime (sandboxd --engine oci)
// holding 50 MB and 500 MB of touched memory,
//
//	hibernate               POST /v1/sandboxes/{id}/hibernate (checkpoint to disk, memory freed)
//	resume → first exec     POST …/resume (restore) then an exec of `true`
//	pause, resume → exec    the same sandbox frozen in memory instead (POST …/pause, …/resume)
//	fork with memory → exec POST …/fork {"memory": true} then an exec of `true` in the fork
//	fork → exec             POST …/fork (files only: the fork boots) then the same
//	snapshot with memory    POST …/snapshots {"memory": true} (the source pauses, is
//	                        checkpointed and captured, and resumes)
//	create from it → exec   POST /v1/sandboxes {"template": <it>} (a restore) then an
//	                        exec of `true` in the new sandbox
//	create from files → exec the same from a snapshot of the files only (the create boots)
//
// beside, with the same memory touched in a container of the Docker
// engine (runc),
//
//	docker pause / docker unpause + docker exec true
//	docker stop / docker start + docker exec true   (what a sandbox that cannot hibernate gets)
//
// and the size of the hibernate image. The memory is a dd whose buffer
// (bs=SIZE) is filled from /dev/urandom and held while it blocks writing
// to a pipe nobody reads. Every sample's forks and creates are destroyed
// once measured, and the snapshots (DELETE /v1/templates/{id}) once a
// size's measurements end, whatever their outcome. Usage (from the
// repository root):
//
//	go run ./bench/hibbench [-n 3] [-sizes 50,500] [-image sandboxd/busybox:latest]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

type config struct {
	n     int
	sizes string
	image string
	bin   string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 3, "samples per measurement")
	flag.StringVar(&cfg.sizes, "sizes", "50,500", "touched memory per sandbox, MB, comma-separated")
	flag.StringVar(&cfg.image, "image", "sandboxd/busybox:latest", "local image (busybox: dd, sleep)")
	flag.StringVar(&cfg.bin, "bin", "", "directory with sandboxd and toolboxd (default: bin/, else built)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hibbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) (err error) {
	// Where it cannot run, it says so and measures nothing (make bench
	// goes on with the others).
	if os.Geteuid() != 0 {
		fmt.Println("hibbench: skipped: needs root (sandboxd --engine oci)")
		return nil
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		fmt.Println("hibbench: skipped: needs runsc (scripts/setup-gvisor.sh)")
		return nil
	}
	tmp, err := os.MkdirTemp("", "hibbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sd, tb, err := benchd.Binaries(ctx, cfg.bin, false, tmp)
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sd, Toolboxd: tb, Dir: tmp, Name: "hibbench", Args: []string{"--engine", "oci", "--pool", "none"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		_ = benchd.RemoveLabelled(cctx, d.BaselineLabel())
	}()
	fmt.Printf("hibbench: sandboxd %s (--engine oci, gVisor) beside docker %s (runc), %d samples each\n\n", d.Version, benchd.DockerVersion(ctx), cfg.n)
	t := benchd.Table{W: os.Stdout, Width: 54}
	for _, f := range strings.Split(cfg.sizes, ",") {
		mb, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || mb <= 0 {
			return fmt.Errorf("-sizes: %q", f)
		}
		if err := measure(ctx, cfg, d, t, mb, filepath.Join(benchd.DataDir(tmp), "hibernate")); err != nil {
			return err
		}
		fmt.Println()
	}
	return nil
}

// holdScript touches mb MB and holds it.
func holdScript(mb int) string {
	return fmt.Sprintf("dd if=/dev/urandom bs=%dM count=1 iflag=fullblock 2>/dev/null | sleep 1000000", mb)
}

// rssScript prints the resident memory of the dd holding the memory, kB.
const rssScript = `for p in $(pidof dd); do grep VmRSS /proc/$p/status; done | awk '{s += $2} END {print s + 0}'`

// waitFilled waits until the dd holds mb MB, asking with rss.
func waitFilled(ctx context.Context, mb int, rss func() (string, error)) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := rss()
		if err != nil {
			return err
		}
		if kb, _ := strconv.Atoi(strings.TrimSpace(out)); kb >= mb*1000 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dd holds %s kB, not %d MB, after 3 minutes", strings.TrimSpace(out), mb)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func measure(ctx context.Context, cfg config, d *benchd.Daemon, t benchd.Table, mb int, hibDir string) error {
	memLimit := max(512, 2*mb+256) // room for gVisor's own kernel
	sb, err := d.Create(ctx, map[string]any{"image": cfg.image, "runtime": "gvisor", "memory_mb": memLimit, "timeout_s": 3600})
	if err != nil {
		return err
	}
	defer d.Destroy(ctx, sb.ID)
	if err := post(ctx, d, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"command": "(" + holdScript(mb) + ") >/dev/null 2>&1 &"}); err != nil {
		return err
	}
	execOut := func() (string, error) {
		r, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"command": rssScript})
		if err != nil || r.Status != http.StatusOK {
			return "", fmt.Errorf("exec: %v %s", err, r)
		}
		var res struct{ Stdout string }
		return res.Stdout, json.Unmarshal(r.Body, &res)
	}
	if err := waitFilled(ctx, mb, execOut); err != nil {
		return err
	}
	var hib, res, pause, unpause []time.Duration
	var imageMB float64
	for i := range cfg.n {
		benchd.Progress("%d MB: sample %d/%d", mb, i+1, cfg.n)
		start := time.Now()
		if err := postWant(ctx, d, "/v1/sandboxes/"+sb.ID+"/hibernate", func(b []byte) error {
			var h struct {
				Stopped bool   `json:"stopped"`
				Reason  string `json:"stopped_reason"`
			}
			if json.Unmarshal(b, &h) != nil || h.Stopped {
				return fmt.Errorf("not hibernated: %s", b)
			}
			return nil
		}); err != nil {
			return err
		}
		hib = append(hib, time.Since(start))
		imageMB = dirMB(filepath.Join(hibDir, sb.ID))
		start = time.Now()
		if err := post(ctx, d, "/v1/sandboxes/"+sb.ID+"/resume", nil); err != nil {
			return err
		}
		if err := d.ExecTrue(ctx, sb.ID); err != nil {
			return err
		}
		res = append(res, time.Since(start))
		start = time.Now()
		if err := post(ctx, d, "/v1/sandboxes/"+sb.ID+"/pause", nil); err != nil {
			return err
		}
		pause = append(pause, time.Since(start))
		start = time.Now()
		if err := post(ctx, d, "/v1/sandboxes/"+sb.ID+"/resume", nil); err != nil {
			return err
		}
		if err := d.ExecTrue(ctx, sb.ID); err != nil {
			return err
		}
		unpause = append(unpause, time.Since(start))
	}
	// Forks of the running sandbox: with its memory (a checkpoint of it,
	// each fork restored from it) and of its files only (a boot).
	var memFork, plainFork []time.Duration
	for i := range cfg.n {
		for _, memory := range []bool{true, false} {
			benchd.Progress("%d MB: fork sample %d/%d (memory %v)", mb, i+1, cfg.n, memory)
			start := time.Now()
			id, err := fork(ctx, d, sb.ID, memory)
			if err != nil {
				return err
			}
			if err := d.ExecTrue(ctx, id); err != nil {
				return err
			}
			if memory {
				memFork = append(memFork, time.Since(start))
			} else {
				plainFork = append(plainFork, time.Since(start))
			}
			d.Destroy(ctx, id)
		}
	}
	// Snapshots of the running sandbox: with its memory (timed: the
	// source is paused, checkpointed, captured and resumed), each create
	// from it a restore; and of its files only, each create from it a
	// boot with the source's runtime and size. A create from a snapshot
	// with memory gets those from the snapshot and names nothing else.
	var snapMem, memCreate, fileCreate []time.Duration
	var snaps []string
	defer func() {
		for _, id := range snaps {
			deleteTemplate(ctx, d, id)
		}
	}()
	for i := range cfg.n {
		benchd.Progress("%d MB: snapshot sample %d/%d", mb, i+1, cfg.n)
		start := time.Now()
		id, err := snapshot(ctx, d, sb.ID, true)
		if err != nil {
			return err
		}
		snapMem = append(snapMem, time.Since(start))
		snaps = append(snaps, id)
		dur, err := createExec(ctx, d, map[string]any{"template": id})
		if err != nil {
			return fmt.Errorf("from the snapshot with memory: %w", err)
		}
		memCreate = append(memCreate, dur)
		if id, err = snapshot(ctx, d, sb.ID, false); err != nil {
			return err
		}
		snaps = append(snaps, id)
		dur, err = createExec(ctx, d, map[string]any{"template": id, "runtime": "gvisor", "memory_mb": memLimit, "timeout_s": 3600})
		if err != nil {
			return fmt.Errorf("from the files-only snapshot: %w", err)
		}
		fileCreate = append(fileCreate, dur)
	}
	dpause, dunpause, dstop, dstart, err := dockerBaselines(ctx, cfg, d, mb)
	if err != nil {
		return err
	}
	benchd.Progress("")
	t.Head(fmt.Sprintf("%d MB touched", mb))
	t.Row("gVisor hibernate", hib)
	t.Row("gVisor resume → first exec (restore)", res)
	t.Row("gVisor pause (in memory)", pause)
	t.Row("gVisor resume → first exec (thaw)", unpause)
	t.Row("docker pause (runc)", dpause)
	t.Row("docker unpause + exec true", dunpause)
	t.Row("docker stop (runc)", dstop)
	t.Row("docker start + exec true", dstart)
	t.Ratio("restore → exec / docker start → exec", res, dstart)
	t.Row("gVisor fork with memory → first exec", memFork)
	t.Row("gVisor fork (files only) → first exec", plainFork)
	t.Ratio("fork with memory / fork of files", memFork, plainFork)
	t.Row("gVisor snapshot with memory", snapMem)
	t.Row("gVisor create from snapshot with memory → first exec", memCreate)
	t.Row("gVisor create from files-only snapshot → first exec", fileCreate)
	t.Ratio("create from snapshot with memory / from files", memCreate, fileCreate)
	t.Note("hibernate image", fmt.Sprintf("%.1f MB", imageMB))
	for _, step := range []string{"runtime", "token"} {
		if mean, n := stepMean(ctx, d, step); n > 0 {
			t.Note(fmt.Sprintf("create step %q, mean of %d (all creates so far)", step, n), benchd.Ms(mean))
		}
	}
	return nil
}

// fork forks sandbox id once (with its memory or not) and returns the
// fork's id.
func fork(ctx context.Context, d *benchd.Daemon, id string, memory bool) (string, error) {
	r, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/fork", map[string]any{"count": 1, "memory": memory})
	if err != nil || r.Status != http.StatusCreated {
		return "", fmt.Errorf("fork (memory %v): %v %s", memory, err, r)
	}
	var out struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil || len(out.Sandboxes) != 1 {
		return "", fmt.Errorf("fork: %v %s", err, r.Body)
	}
	return out.Sandboxes[0].ID, nil
}

// snapshot snapshots sandbox id (with its memory or its files only) and
// returns the snapshot's id.
func snapshot(ctx context.Context, d *benchd.Daemon, id string, memory bool) (string, error) {
	r, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/snapshots", map[string]any{"memory": memory})
	if err != nil || r.Status != http.StatusCreated {
		return "", fmt.Errorf("snapshot (memory %v): %v %s", memory, err, r)
	}
	var t struct{ ID string }
	if err := json.Unmarshal(r.Body, &t); err != nil || t.ID == "" {
		return "", fmt.Errorf("snapshot: %v %s", err, r.Body)
	}
	return t.ID, nil
}

// createExec creates a sandbox with body and runs `true` in it, and
// returns the time from the create's request to the exec's answer; the
// sandbox is destroyed, whatever happened.
func createExec(ctx context.Context, d *benchd.Daemon, body map[string]any) (time.Duration, error) {
	start := time.Now()
	sb, err := d.Create(ctx, body)
	if err != nil {
		return 0, err
	}
	defer d.Destroy(ctx, sb.ID)
	if err := d.ExecTrue(ctx, sb.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// deleteTemplate deletes template id (DELETE /v1/templates/{id}), with a
// fresh bound (it runs on the way out of a failed or cancelled run too),
// and logs a failure.
func deleteTemplate(ctx context.Context, d *benchd.Daemon, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchd.RequestTimeout)
	defer cancel()
	if r, err := d.Do(ctx, http.MethodDelete, "/v1/templates/"+id, nil); err != nil || r.Status != http.StatusNoContent {
		fmt.Fprintf(os.Stderr, "hibbench: delete template %s: %v %v\n", id, err, r)
	}
}

// stepMean is the mean of the daemon's create step histogram for step
// (/metrics) and its count.
func stepMean(ctx context.Context, d *benchd.Daemon, step string) (time.Duration, int) {
	r, err := d.Do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil || r.Status != http.StatusOK {
		return 0, 0
	}
	var sum float64
	var n int
	for _, l := range strings.Split(string(r.Body), "\n") {
		sel := `sandboxd_create_step_seconds_%s{step="` + step + `"} `
		if v, ok := strings.CutPrefix(l, fmt.Sprintf(sel, "sum")); ok {
			sum, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		} else if v, ok := strings.CutPrefix(l, fmt.Sprintf(sel, "count")); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if n == 0 {
		return 0, 0
	}
	return time.Duration(sum / float64(n) * float64(time.Second)), n
}

// dockerBaselines are docker pause/unpause and stop/start (each followed
// by an exec of true) of a runc container holding mb MB.
func dockerBaselines(ctx context.Context, cfg config, d *benchd.Daemon, mb int) (pause, unpause, stop, start []time.Duration, err error) {
	_, id, err := benchd.Docker(ctx, "run", "-d", "--label", d.BaselineLabel(), "--memory", fmt.Sprintf("%dm", 2*mb+128), "--network", "none",
		cfg.image, "sh", "-c", holdScript(mb))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _, _ = benchd.Docker(cctx, "rm", "-f", id)
	}()
	rss := func() (string, error) {
		_, out, err := benchd.Docker(ctx, "exec", id, "sh", "-c", rssScript)
		return out, err
	}
	if err := waitFilled(ctx, mb, rss); err != nil {
		return nil, nil, nil, nil, err
	}
	for i := range cfg.n {
		benchd.Progress("%d MB: docker sample %d/%d", mb, i+1, cfg.n)
		dur, _, err := benchd.Docker(ctx, "pause", id)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		pause = append(pause, dur)
		dur, _, err = benchd.Docker(ctx, "unpause", id)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		e, _, err := benchd.Docker(ctx, "exec", id, "true")
		if err != nil {
			return nil, nil, nil, nil, err
		}
		unpause = append(unpause, dur+e)
		dur, _, err = benchd.Docker(ctx, "stop", "-t", "0", id)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		stop = append(stop, dur)
		dur, _, err = benchd.Docker(ctx, "start", id)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		e, _, err = benchd.Docker(ctx, "exec", id, "true")
		if err != nil {
			return nil, nil, nil, nil, err
		}
		start = append(start, dur+e)
		if err := waitFilled(ctx, mb, rss); err != nil { // its dd, started again
			return nil, nil, nil, nil, err
		}
	}
	return pause, unpause, stop, start, nil
}

func post(ctx context.Context, d *benchd.Daemon, path string, body any) error {
	return postWant(ctx, d, path, nil, body)
}

// postWant posts body to path, wants 200, and checks the answer with check.
func postWant(ctx context.Context, d *benchd.Daemon, path string, check func([]byte) error, body ...any) error {
	var in any
	if len(body) > 0 {
		in = body[0]
	}
	r, err := d.Do(ctx, http.MethodPost, path, in)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("POST %s: %s", path, r)
	}
	if check != nil {
		return check(r.Body)
	}
	return nil
}

// dirMB is the size of the files under dir, in MB.
func dirMB(dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return float64(n) / 1e6
}
