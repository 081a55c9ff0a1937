// Command pullbench measures the pull of a ~100 MB image through the
// daemon beside `docker pull` of the same image, from a registry on
// loopback (Debian's docker-registry, internal/testenv/registrytest), one
// run each:
//
//	daemon      a create naming the image the engine lacks: the create's
//	            `image` step (Server-Timing: the engine's pull, its stream
//	            drained) and the whole create
//	docker pull the same reference with the docker CLI
//
// The image is a base image plus 100 MB of random bytes (nothing
// compresses them), built once, pushed, and removed from the engine, so
// each side downloads the big layer; the image is removed again after
// each side. Usage (from the repository root; scripts/bench.sh runs it):
//
//	go run ./bench/pullbench [-base sandboxd/base:bookworm] [-mb 100]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

func main() {
	base := flag.String("base", "sandboxd/base:bookworm", "image the big one is built over")
	mb := flag.Int("mb", 100, "megabytes of random bytes in the big layer")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if why := registrytest.Available(); why != "" {
		fmt.Println("  skipped:", why)
		return
	}
	if err := run(ctx, os.Stdout, *base, *mb); err != nil {
		fmt.Fprintln(os.Stderr, "pullbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, base string, mb int) (err error) {
	tmp, err := os.MkdirTemp("", "pullbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	big := "sandboxd-bench/big:" + registrytest.RandomTag()
	df := fmt.Sprintf("FROM %s\nRUN head -c %d /dev/urandom > /big.bin\n", base, mb*1000*1000)
	if err := os.MkdirAll(filepath.Join(tmp, "ctx"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "ctx", "Dockerfile"), []byte(df), 0o600); err != nil {
		return err
	}
	benchd.Progress("building a %d MB image…", mb)
	if _, _, err := benchd.Docker(ctx, "build", "--network", "none", "-q", "-t", big, filepath.Join(tmp, "ctx")); err != nil {
		return err
	}
	defer registrytest.RemoveLocal(big)

	reg, err := registrytest.New(filepath.Join(tmp, "registry"), registrytest.Options{})
	if err != nil {
		return err
	}
	if err := reg.Start(); err != nil {
		return err
	}
	defer reg.Stop()
	benchd.Progress("pushing it to %s…", reg.Host)
	ref, err := reg.PushRef(ctx, big, "bench/big")
	if err != nil {
		return err
	}
	registrytest.RemoveLocal(big) // the engine lacks the big layer now
	defer registrytest.RemoveLocal(ref)

	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, "", true, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "pullbench",
		Args: []string{"--pool", "none", "--registry-allow", "127.0.0.1"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)

	benchd.Progress("daemon: create from %s…", ref)
	start := time.Now()
	c, err := d.Create(ctx, map[string]any{"image": ref, "cpu": 0.5, "memory_mb": 256})
	total := time.Since(start)
	if err != nil {
		return err
	}
	d.Destroy(ctx, c.ID)
	var image time.Duration
	for _, s := range c.Steps {
		if s.Name == "image" {
			image = s.Dur
		}
	}
	registrytest.RemoveLocal(ref)

	benchd.Progress("docker pull %s…", ref)
	dockerPull, _, err := benchd.Docker(ctx, "pull", "-q", ref)
	if err != nil {
		return err
	}
	benchd.Progress("")

	fmt.Fprintf(out, "pull of a %d MB layer (over %s) from a loopback registry, one run each; docker %s\n", mb, base, benchd.DockerVersion(ctx))
	t := benchd.Table{W: out}
	t.Head("")
	t.Row("daemon: the create's image step (the pull)", []time.Duration{image})
	t.Row("daemon: the whole create (pull + container)", []time.Duration{total})
	t.Row("docker pull", []time.Duration{dockerPull})
	t.Ratio("image step / docker pull", []time.Duration{image}, []time.Duration{dockerPull})
	return nil
}
