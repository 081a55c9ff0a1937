// Command cpbench measures copies into and out of a sandbox beside
// `docker cp` of the same bytes into and out of a plain container of the
// same image, in the same run:
//
//	100 MB file up    sbx cp FILE sb:/opt/cpbench/big.bin; the Go SDK's
//	                  UploadFile (PUT /v1/sandboxes/{id}/files); docker cp
//	100 MB file down  sbx cp sb:... FILE; the SDK's DownloadFile to a file;
//	                  docker cp
//	1,000-file tree   sbx cp -r DIR sb:/opt/cpbench/tree (a tar through
//	up and down       PUT and GET /v1/sandboxes/{id}/files/archive) and
//	                  back; docker cp of the directory both ways
//
// The file is random (nothing compresses it); the tree is 1,000 files of
// 4 KiB in 10 directories. Each copy lands in the container's own file
// system (/opt, not a tmpfs), and is removed before the next. Usage (from
// the repository root; scripts/bench.sh runs it):
//
//	go run ./bench/cpbench [-n 5] [-mb 100] [-files 1000] [-image sandboxd/busybox:latest]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func main() {
	n := flag.Int("n", 5, "repetitions of each copy")
	mb := flag.Int("mb", 100, "megabytes of the file")
	files := flag.Int("files", 1000, "files in the tree")
	image := flag.String("image", "sandboxd/busybox:latest", "image of the sandbox and of the docker cp container")
	cpu := flag.Float64("cpu", 0, "the sandbox's and the container's CPUs (0: the daemon's default)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *n, *mb, *files, *image, *cpu); err != nil {
		fmt.Fprintln(os.Stderr, "cpbench:", err)
		os.Exit(1)
	}
}

// samples are the timings of one row.
type samples []time.Duration

func run(ctx context.Context, out io.Writer, n, mb, files int, image string, cpu float64) (err error) {
	tmp, err := os.MkdirTemp("", "cpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, "", true, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	sbxBin := filepath.Join(tmp, "bin", "sbx")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", sbxBin, "./cmd/sbx").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/sbx: %w\n%s", err, b)
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "cpbench",
		Args: []string{"--pool", "none"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	cl := sandboxd.New(d.URL, d.Token)
	req := map[string]any{"image": image, "memory_mb": 512}
	runArgs := []string{"run", "-d", "--rm", "--network", "none", "--label", d.BaselineLabel(), "--memory", "512m"}
	if cpu > 0 {
		req["cpu"] = cpu
		runArgs = append(runArgs, "--cpus", fmt.Sprint(cpu))
	}
	sb, err := d.Create(ctx, req)
	if err != nil {
		return err
	}
	defer d.Destroy(ctx, sb.ID)
	info, err := cl.GetSandbox(ctx, sb.ID)
	if err != nil {
		return err
	}
	_, ctr, err := benchd.Docker(ctx, append(runArgs, image, "sleep", "3600")...)
	if err != nil {
		return err
	}
	defer benchd.Docker(context.WithoutCancel(ctx), "rm", "-f", ctr)
	prep := func(cmd string) error {
		if _, _, err := benchd.Docker(ctx, "exec", ctr, "sh", "-c", cmd); err != nil {
			return err
		}
		res, err := cl.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: cmd})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("%s: exit %d: %s", cmd, res.ExitCode, res.Stderr)
		}
		return nil
	}
	rmSandbox := func(p string) error {
		res, err := cl.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"rm", "-f", p}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("rm -f %s: exit %d", p, res.ExitCode)
		}
		return err
	}
	if err := prep("mkdir -p /opt/cpbench"); err != nil {
		return err
	}

	big := filepath.Join(tmp, "big.bin")
	if err := randomFile(big, int64(mb)<<20); err != nil {
		return err
	}
	tree := filepath.Join(tmp, "tree")
	if err := makeTree(tree, files); err != nil {
		return err
	}
	sbx := func(args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, sbxBin, args...)
		cmd.Env = append(os.Environ(), "SBX_API_URL="+d.URL, "SBX_TOKEN="+d.Token)
		start := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("sbx %v: %w: %s", args, err, b)
		}
		return time.Since(start), nil
	}
	timeIt := func(f func() error) (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}
	back := filepath.Join(tmp, "back")
	rows := map[string]samples{}
	add := func(name string, dt time.Duration, err error) error {
		rows[name] = append(rows[name], dt)
		return err
	}
	for i := range n {
		benchd.Progress("round %d of %d…", i+1, n)
		const remote = "/opt/cpbench/big.bin"
		steps := []struct {
			name string
			f    func() (time.Duration, error)
		}{
			{"file up: sbx cp", func() (time.Duration, error) {
				if err := rmSandbox(remote); err != nil { // each upload makes the file
					return 0, err
				}
				return sbx("cp", big, sb.ID+":"+remote)
			}},
			{"file up: API (SDK UploadFile)", func() (time.Duration, error) {
				if err := rmSandbox(remote); err != nil {
					return 0, err
				}
				return timeIt(func() error {
					f, err := os.Open(big)
					if err != nil {
						return err
					}
					defer f.Close()
					return cl.UploadFile(ctx, sb.ID, remote, f)
				})
			}},
			{"file up: docker cp", func() (time.Duration, error) {
				if _, _, err := benchd.Docker(ctx, "exec", ctr, "rm", "-f", remote); err != nil {
					return 0, err
				}
				dt, _, err := benchd.Docker(ctx, "cp", big, ctr+":"+remote)
				return dt, err
			}},
			{"file down: sbx cp", func() (time.Duration, error) {
				defer os.Remove(back)
				return sbx("cp", sb.ID+":"+remote, back)
			}},
			{"file down: API (SDK DownloadFile)", func() (time.Duration, error) {
				defer os.Remove(back)
				return timeIt(func() error {
					r, err := cl.DownloadFile(ctx, sb.ID, remote)
					if err != nil {
						return err
					}
					defer r.Close()
					f, err := os.Create(back)
					if err != nil {
						return err
					}
					if _, err := io.Copy(f, r); err != nil {
						f.Close()
						return err
					}
					return f.Close()
				})
			}},
			{"file down: docker cp", func() (time.Duration, error) {
				defer os.Remove(back)
				dt, _, err := benchd.Docker(ctx, "cp", ctr+":"+remote, back)
				return dt, err
			}},
			{"tree up: sbx cp -r", func() (time.Duration, error) {
				return sbx("cp", "-r", tree, sb.ID+":/opt/cpbench/tree")
			}},
			{"tree up: docker cp", func() (time.Duration, error) {
				dt, _, err := benchd.Docker(ctx, "cp", tree, ctr+":/opt/cpbench/tree")
				return dt, err
			}},
			{"tree down: sbx cp -r", func() (time.Duration, error) {
				defer os.RemoveAll(back)
				return sbx("cp", "-r", sb.ID+":/opt/cpbench/tree", back)
			}},
			{"tree down: docker cp", func() (time.Duration, error) {
				defer os.RemoveAll(back)
				dt, _, err := benchd.Docker(ctx, "cp", ctr+":/opt/cpbench/tree", back)
				return dt, err
			}},
		}
		for _, s := range steps {
			dt, err := s.f()
			if err := add(s.name, dt, err); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if err := prep("rm -rf /opt/cpbench/big.bin /opt/cpbench/tree"); err != nil {
			return err
		}
	}
	benchd.Progress("")

	fmt.Fprintf(out, "copies of a %d MB random file and a %d-file tree (4 KiB each), sandbox (%s, %g CPU) beside docker cp into a container of the same image; docker %s\n",
		mb, files, image, info.CPU, benchd.DockerVersion(ctx))
	t := benchd.Table{W: out}
	t.Head("")
	for _, name := range []string{
		"file up: sbx cp", "file up: API (SDK UploadFile)", "file up: docker cp",
		"file down: sbx cp", "file down: API (SDK DownloadFile)", "file down: docker cp",
		"tree up: sbx cp -r", "tree up: docker cp",
		"tree down: sbx cp -r", "tree down: docker cp",
	} {
		t.Row(name, rows[name])
	}
	t.Ratio("file up: sbx cp / docker cp", rows["file up: sbx cp"], rows["file up: docker cp"])
	t.Ratio("file down: sbx cp / docker cp", rows["file down: sbx cp"], rows["file down: docker cp"])
	t.Ratio("tree up: sbx cp -r / docker cp", rows["tree up: sbx cp -r"], rows["tree up: docker cp"])
	t.Ratio("tree down: sbx cp -r / docker cp", rows["tree down: sbx cp -r"], rows["tree down: docker cp"])
	return nil
}

// randomFile writes size random bytes to p.
func randomFile(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeTree writes files files of 4 KiB under root, in 10 directories.
func makeTree(root string, files int) error {
	buf := make([]byte, 4<<10)
	for i := range files {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i%10))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if _, err := rand.Read(buf); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}
