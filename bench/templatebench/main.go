// Command templatebench measures templates, snapshots, forks and pause
// beside their baselines, all in one run against one daemon:
//
//		go run ./bench/templatebench [-n 5] [-image sandboxd/base:bookworm]
//
//	 1. a template build of a small recipe (a file, env, two run steps;
//	    each sample a fresh recipe, so nothing is cached) beside
//	    `docker build` of the same steps as a Dockerfile (--no-cache);
//	 1b. the same recipe again: the native API's cache hit, E2B's
//	    Template.build requests (a new build id, the same image), beside
//	    `docker build` with its layer cache;
//	 2. a snapshot of a sandbox with a file written at run time, beside
//	    `docker commit` of a container of the same image;
//	 3. create from that snapshot → first exec `true`, beside a cold create →
//	    first exec of the image;
//	 4. a fork into 1 and into 8 (POST → 201 with every sandbox);
//	 5. pause → resume → first exec `true`, beside `docker pause` →
//	    `docker unpause` → `docker exec true`.
//
// The daemon runs from bin/ with --pool none, so every create is cold.
// Everything is destroyed at the end, by the daemon and then by label.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

const buildWait = 5 * time.Minute

func main() {
	n := flag.Int("n", 5, "samples per side")
	image := flag.String("image", "sandboxd/base:bookworm", "the base image of every side")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "templatebench: -n must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *image); err != nil {
		fmt.Fprintln(os.Stderr, "templatebench:", err)
		os.Exit(1)
	}
}

type bench struct {
	d     *benchd.Daemon
	image string
	tmp   string
	// images are the engine images the baselines made, removed at the end.
	images []string
}

func run(ctx context.Context, n int, image string) (err error) {
	tmp, err := os.MkdirTemp("", "tb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, "", false, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "templatebench", Args: []string{"--pool", "none", "--cpu-budget", "256000", "--memory-budget", "131072"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	b := &bench{d: d, image: image, tmp: tmp}
	defer b.removeImages()
	fmt.Printf("templatebench: image %s; %d CPUs; docker %s; sandboxd %s\n\n", image, goruntime.NumCPU(), benchd.DockerVersion(ctx), d.Version)
	t := benchd.Table{W: os.Stdout}

	var build, dockerBuild []time.Duration
	for i := range n {
		db, err := b.dockerBuild(ctx, i)
		if err != nil {
			return err
		}
		sb, err := b.templateBuild(ctx, i)
		if err != nil {
			return err
		}
		build, dockerBuild = append(build, sb), append(dockerBuild, db)
		benchd.Progress("builds: %d/%d", i+1, n)
	}
	benchd.Progress("")
	t.Head("1. template build (4 steps, uncached)")
	t.Row("POST /v1/templates → ready", build)
	t.Row("docker build --no-cache", dockerBuild)
	fmt.Println()

	native, viaE2B, cachedDocker, err := b.rebuilds(ctx, n)
	if err != nil {
		return err
	}
	t.Head("1b. the same recipe again")
	t.Row("POST /v1/templates (cached)", native)
	t.Row("E2B Template.build → ready", viaE2B)
	t.Row("docker build (layer cache)", cachedDocker)
	fmt.Println()

	var snap, commit, fromSnap, cold []time.Duration
	for i := range n {
		s, tplID, err := b.snapshot(ctx)
		if err != nil {
			return err
		}
		c, err := b.dockerCommit(ctx, i)
		if err != nil {
			return err
		}
		f, err := b.createExec(ctx, map[string]any{"template": tplID})
		if err != nil {
			return err
		}
		if err := b.deleteTemplate(ctx, tplID); err != nil {
			return err
		}
		k, err := b.createExec(ctx, map[string]any{"image": b.image})
		if err != nil {
			return err
		}
		snap, commit, fromSnap, cold = append(snap, s), append(commit, c), append(fromSnap, f), append(cold, k)
		benchd.Progress("snapshots: %d/%d", i+1, n)
	}
	benchd.Progress("")
	t.Head("2. snapshot (a sandbox with a file written)")
	t.Row("POST /v1/sandboxes/{id}/snapshots", snap)
	t.Row("docker commit", commit)
	fmt.Println()
	t.Head("3. create → first exec `true`")
	t.Row("from the snapshot", fromSnap)
	t.Row("cold, from the image", cold)
	fmt.Println()

	var fork1, fork8 []time.Duration
	for i := range n {
		f1, err := b.fork(ctx, 1)
		if err != nil {
			return err
		}
		f8, err := b.fork(ctx, 8)
		if err != nil {
			return err
		}
		fork1, fork8 = append(fork1, f1), append(fork8, f8)
		benchd.Progress("forks: %d/%d", i+1, n)
	}
	benchd.Progress("")
	t.Head("4. fork (POST → 201 with every sandbox)")
	t.Row("fork into 1", fork1)
	t.Row("fork into 8", fork8)
	fmt.Println()

	pr, dpr, err := b.pauses(ctx, n*4)
	if err != nil {
		return err
	}
	t.Head("5. pause → resume → first exec `true`")
	t.Row("sandboxd", pr)
	t.Row("docker pause/unpause/exec", dpr)
	return nil
}

// recipe is sample i's recipe: i makes it another, so nothing is cached.
func (b *bench) recipe(i int) (map[string]any, string) {
	marker := fmt.Sprintf("%d-%d", os.Getpid(), i)
	recipe := map[string]any{
		"base": b.image,
		"steps": []map[string]any{
			{"copy": map[string]any{"path": "/opt/app/config.txt", "content": []byte("sample " + marker + "\n")}},
			{"env": map[string]string{"APP_MODE": "bench"}},
			{"run": "mkdir -p /opt/app/data && echo " + marker + " > /opt/app/data/marker"},
			{"run": "cat /opt/app/config.txt /opt/app/data/marker > /opt/app/all.txt"},
		},
	}
	dockerfile := "FROM " + b.image + "\n" +
		"COPY config.txt /opt/app/config.txt\n" +
		"ENV APP_MODE=bench\n" +
		"RUN mkdir -p /opt/app/data && echo " + marker + " > /opt/app/data/marker\n" +
		"RUN cat /opt/app/config.txt /opt/app/data/marker > /opt/app/all.txt\n"
	return recipe, dockerfile
}

func (b *bench) templateBuild(ctx context.Context, i int) (time.Duration, error) {
	recipe, _ := b.recipe(i)
	start := time.Now()
	id, err := b.buildReady(ctx, recipe)
	if err != nil {
		return 0, err
	}
	dur := time.Since(start)
	return dur, b.deleteTemplate(ctx, id)
}

// buildReady builds recipe and waits for the template to be ready.
func (b *bench) buildReady(ctx context.Context, recipe map[string]any) (string, error) {
	resp, err := b.d.Do(ctx, http.MethodPost, "/v1/templates", recipe)
	if err != nil || (resp.Status != http.StatusAccepted && resp.Status != http.StatusOK) {
		return "", fmt.Errorf("POST /v1/templates: %v %v", err, resp)
	}
	var tpl struct{ ID, State, Error string }
	if err := json.Unmarshal(resp.Body, &tpl); err != nil {
		return "", err
	}
	deadline := time.Now().Add(buildWait)
	for tpl.State == "building" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		resp, err := b.d.Do(ctx, http.MethodGet, "/v1/templates/"+tpl.ID, nil)
		if err != nil || resp.Status != http.StatusOK {
			return "", fmt.Errorf("GET /v1/templates/%s: %v %v", tpl.ID, err, resp)
		}
		if err := json.Unmarshal(resp.Body, &tpl); err != nil {
			return "", err
		}
	}
	if tpl.State != "ready" {
		return "", fmt.Errorf("template %s is %s: %s", tpl.ID, tpl.State, tpl.Error)
	}
	return tpl.ID, nil
}

// rebuilds builds one recipe, then measures building it again n times:
// through the native API (a cache hit answers the template), through
// E2B's Template.build requests (POST /v3/templates, the start, the
// status polled until ready: a new template of the same image), and
// docker build with its layer cache.
func (b *bench) rebuilds(ctx context.Context, n int) (native, viaE2B, dockerCached []time.Duration, err error) {
	recipe, _ := b.recipe(n + 1)
	recipe["name"] = "rebuilt"
	if _, err := b.buildReady(ctx, recipe); err != nil {
		return nil, nil, nil, err
	}
	defer b.deleteE2BTemplate(ctx, "rebuilt")
	if _, err := b.dockerBuild(ctx, n+1); err != nil {
		return nil, nil, nil, err
	}
	e2bSteps := []map[string]any{
		{"type": "RUN", "args": []string{"echo e2b-rebuild > /opt/marker"}},
	}
	// The E2B recipe's first build, so that the samples are rebuilds.
	if _, err := b.e2bBuild(ctx, "rebuilt", e2bSteps); err != nil {
		return nil, nil, nil, err
	}
	for i := range n {
		start := time.Now()
		resp, err := b.d.Do(ctx, http.MethodPost, "/v1/templates", recipe)
		if err != nil || resp.Status != http.StatusOK || resp.Header.Get("Template-Cached") != "true" {
			return nil, nil, nil, fmt.Errorf("POST /v1/templates again: %v %v", err, resp)
		}
		native = append(native, time.Since(start))
		d, err := b.e2bBuild(ctx, "rebuilt", e2bSteps)
		if err != nil {
			return nil, nil, nil, err
		}
		viaE2B = append(viaE2B, d)
		dur, out, err := benchd.Docker(ctx, "build", "--network", "none", "-q", "-t", fmt.Sprintf("sandboxd-bench/build:%d-%d", os.Getpid(), n+1), filepath.Join(b.tmp, fmt.Sprintf("build-%d", n+1)))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("docker build: %w: %s", err, out)
		}
		dockerCached = append(dockerCached, dur)
		benchd.Progress("rebuilds: %d/%d", i+1, n)
	}
	benchd.Progress("")
	return native, viaE2B, dockerCached, nil
}

// e2bBuild runs E2B's Template.build requests for name with steps over
// the base image and polls the status until the build is ready.
func (b *bench) e2bBuild(ctx context.Context, name string, steps []map[string]any) (time.Duration, error) {
	start := time.Now()
	resp, err := b.d.Do(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": name})
	if err != nil || resp.Status != http.StatusAccepted {
		return 0, fmt.Errorf("POST /v3/templates: %v %v", err, resp)
	}
	var req struct{ TemplateID, BuildID string }
	if err := json.Unmarshal(resp.Body, &req); err != nil {
		return 0, err
	}
	resp, err = b.d.Do(ctx, http.MethodPost, "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID,
		map[string]any{"fromImage": b.image, "steps": steps})
	if err != nil || resp.Status != http.StatusAccepted {
		return 0, fmt.Errorf("start the E2B build: %v %v", err, resp)
	}
	deadline := time.Now().Add(buildWait)
	for time.Now().Before(deadline) {
		resp, err := b.d.Do(ctx, http.MethodGet, "/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", nil)
		if err != nil || resp.Status != http.StatusOK {
			return 0, fmt.Errorf("E2B build status: %v %v", err, resp)
		}
		var st struct{ Status string }
		if err := json.Unmarshal(resp.Body, &st); err != nil {
			return 0, err
		}
		switch st.Status {
		case "ready":
			return time.Since(start), nil
		case "error":
			return 0, fmt.Errorf("the E2B build failed: %s", resp.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("the E2B build did not end within %s", buildWait)
}

// deleteE2BTemplate deletes every build of name (best effort).
func (b *bench) deleteE2BTemplate(ctx context.Context, name string) {
	if resp, err := b.d.Do(ctx, http.MethodDelete, "/templates/"+name, nil); err != nil || resp.Status != http.StatusNoContent {
		fmt.Fprintf(os.Stderr, "templatebench: delete template %s: %v %v\n", name, err, resp)
	}
}

func (b *bench) deleteTemplate(ctx context.Context, id string) error {
	resp, err := b.d.Do(ctx, http.MethodDelete, "/v1/templates/"+id, nil)
	if err != nil || resp.Status != http.StatusNoContent {
		return fmt.Errorf("DELETE /v1/templates/%s: %v %v", id, err, resp)
	}
	return nil
}

func (b *bench) dockerBuild(ctx context.Context, i int) (time.Duration, error) {
	_, dockerfile := b.recipe(i)
	dir := filepath.Join(b.tmp, fmt.Sprintf("build-%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.txt"), []byte(fmt.Sprintf("sample %d\n", i)), 0o644); err != nil {
		return 0, err
	}
	tag := fmt.Sprintf("sandboxd-bench/build:%d-%d", os.Getpid(), i)
	b.images = append(b.images, tag)
	dur, out, err := benchd.Docker(ctx, "build", "--no-cache", "--network", "none", "-q", "-t", tag, dir)
	if err != nil {
		return 0, fmt.Errorf("docker build: %w: %s", err, out)
	}
	return dur, nil
}

// snapshot creates a sandbox, writes a file in it, and times its snapshot.
func (b *bench) snapshot(ctx context.Context) (time.Duration, string, error) {
	c, err := b.d.Create(ctx, map[string]any{"image": b.image})
	if err != nil {
		return 0, "", err
	}
	defer b.d.Destroy(ctx, c.ID)
	if resp, err := b.d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+c.ID+"/exec", map[string]any{"command": "head -c 1048576 /dev/urandom > /root/state"}); err != nil || resp.Status != http.StatusOK {
		return 0, "", fmt.Errorf("exec: %v %v", err, resp)
	}
	start := time.Now()
	resp, err := b.d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+c.ID+"/snapshots", map[string]any{})
	dur := time.Since(start)
	if err != nil || resp.Status != http.StatusCreated {
		return 0, "", fmt.Errorf("snapshot: %v %v", err, resp)
	}
	var tpl struct{ ID string }
	return dur, tpl.ID, json.Unmarshal(resp.Body, &tpl)
}

func (b *bench) dockerCommit(ctx context.Context, i int) (time.Duration, error) {
	_, id, err := benchd.Docker(ctx, "run", "-d", "--network", "none", "--label", b.d.BaselineLabel(), b.image, "sleep", "600")
	if err != nil {
		return 0, err
	}
	id = strings.TrimSpace(id)
	defer benchd.Docker(context.WithoutCancel(ctx), "rm", "-f", id)
	if _, out, err := benchd.Docker(ctx, "exec", id, "sh", "-c", "head -c 1048576 /dev/urandom > /root/state"); err != nil {
		return 0, fmt.Errorf("docker exec: %w: %s", err, out)
	}
	tag := fmt.Sprintf("sandboxd-bench/commit:%d-%d", os.Getpid(), i)
	b.images = append(b.images, tag)
	dur, out, err := benchd.Docker(ctx, "commit", id, tag)
	if err != nil {
		return 0, fmt.Errorf("docker commit: %w: %s", err, out)
	}
	return dur, nil
}

// createExec times a create of body and its first exec of `true`.
func (b *bench) createExec(ctx context.Context, body map[string]any) (time.Duration, error) {
	start := time.Now()
	c, err := b.d.Create(ctx, body)
	if c.ID != "" {
		defer b.d.Destroy(ctx, c.ID)
	}
	if err != nil {
		return 0, err
	}
	if err := b.d.ExecTrue(ctx, c.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (b *bench) fork(ctx context.Context, count int) (time.Duration, error) {
	c, err := b.d.Create(ctx, map[string]any{"image": b.image})
	if err != nil {
		return 0, err
	}
	defer b.d.Destroy(ctx, c.ID)
	start := time.Now()
	resp, err := b.d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+c.ID+"/fork", map[string]any{"count": count})
	dur := time.Since(start)
	if err != nil || resp.Status != http.StatusCreated {
		return 0, fmt.Errorf("fork: %v %v", err, resp)
	}
	var out struct{ Sandboxes []struct{ ID string } }
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		return 0, err
	}
	for _, s := range out.Sandboxes {
		b.d.Destroy(ctx, s.ID)
	}
	if len(out.Sandboxes) != count {
		return 0, fmt.Errorf("fork into %d made %d", count, len(out.Sandboxes))
	}
	return dur, nil
}

// pauses times n rounds of pause → resume → exec on one sandbox, and on
// one container, interleaved.
func (b *bench) pauses(ctx context.Context, n int) (sbx, dkr []time.Duration, err error) {
	c, err := b.d.Create(ctx, map[string]any{"image": b.image})
	if err != nil {
		return nil, nil, err
	}
	defer b.d.Destroy(ctx, c.ID)
	_, id, err := benchd.Docker(ctx, "run", "-d", "--network", "none", "--label", b.d.BaselineLabel(), b.image, "sleep", "600")
	if err != nil {
		return nil, nil, err
	}
	id = strings.TrimSpace(id)
	defer benchd.Docker(context.WithoutCancel(ctx), "rm", "-f", id)
	for range n {
		start := time.Now()
		for _, op := range []string{"pause", "resume"} {
			if resp, err := b.d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+c.ID+"/"+op, nil); err != nil || resp.Status != http.StatusOK {
				return nil, nil, fmt.Errorf("%s: %v %v", op, err, resp)
			}
		}
		if err := b.d.ExecTrue(ctx, c.ID); err != nil {
			return nil, nil, err
		}
		sbx = append(sbx, time.Since(start))
		start = time.Now()
		for _, args := range [][]string{{"pause", id}, {"unpause", id}, {"exec", id, "true"}} {
			if _, out, err := benchd.Docker(ctx, args...); err != nil {
				return nil, nil, fmt.Errorf("docker %s: %w: %s", args[0], err, out)
			}
		}
		dkr = append(dkr, time.Since(start))
	}
	return sbx, dkr, nil
}

func (b *bench) removeImages() {
	if len(b.images) > 0 {
		_, _, _ = benchd.Docker(context.Background(), append([]string{"rmi", "-f"}, b.images...)...)
	}
}
