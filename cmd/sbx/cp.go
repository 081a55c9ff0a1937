package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/internal/archive"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// progressThreshold is the size from which cp shows a progress bar: below
// it a transfer is over before a bar would tell anything.
const progressThreshold = 8 << 20

// endpoint is one side of a copy.
type endpoint struct {
	ref  string // sandbox id or name; empty for a local endpoint
	path string // remote or local path; empty for stdio
}

func (e endpoint) remote() bool { return e.ref != "" }
func (e endpoint) stdio() bool  { return e.ref == "" && e.path == "" }

func (e endpoint) String() string {
	switch {
	case e.remote():
		return e.ref + ":" + e.path
	case e.stdio():
		return "-"
	}
	return e.path
}

// parseEndpoint reads "-" (stdin or stdout), "<id|name>:<path>" (a path in
// a sandbox) or a local path. A colon makes an argument remote unless a
// slash comes before it: write ./a:b for a local file named a:b (and
// ./:b for one named :b).
func parseEndpoint(s string) (endpoint, error) {
	if s == "-" {
		return endpoint{}, nil
	}
	if s == "" {
		return endpoint{}, errors.New("empty path")
	}
	ref, p, ok := strings.Cut(s, ":")
	if ok && ref == "" {
		return endpoint{}, fmt.Errorf("%q: want <id|name>:<path> (write ./%s for a local file)", s, s)
	}
	if !ok || strings.Contains(ref, "/") {
		return endpoint{path: s}, nil
	}
	if p == "" {
		return endpoint{}, fmt.Errorf("%q: want <id|name>:<path>", s)
	}
	return endpoint{ref: ref, path: p}, nil
}

// parseCopy checks that exactly one side of a copy is in a sandbox.
func parseCopy(src, dst string) (from, to endpoint, err error) {
	if from, err = parseEndpoint(src); err != nil {
		return from, to, err
	}
	if to, err = parseEndpoint(dst); err != nil {
		return from, to, err
	}
	switch {
	case from.remote() == to.remote():
		return from, to, errors.New("exactly one of SRC and DST must be <id|name>:<path>")
	case to.remote() && from.stdio() && strings.HasSuffix(to.path, "/"):
		return from, to, errors.New("a destination directory needs a file name when copying from stdin")
	}
	return from, to, nil
}

func (c *cli) cpCmd() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "cp [-r] SRC DST",
		Short: "Copy a file or a directory into or out of a sandbox",
		Long: `Copy a file or a directory into or out of a sandbox. One of SRC and DST is
<id|name>:<path>; the other is a local path, or - for standard input or output.

  sbx cp ./data.csv web:/srv/data.csv
  sbx cp web:/srv/out.tar.gz .
  tar cz . | sbx cp - web:/tmp/src.tgz
  sbx cp -r ./src web:/app          # /app/src if /app exists, else /app
  sbx cp -r web:/app/logs ./logs
  sbx cp -r web:/app - | tar t      # -r with -: a tar on stdin or stdout

A remote DST ending in / (or an existing local directory as DST) receives
the file under its own name. A local file is written to a temporary file
beside it and renamed into place once complete. A progress bar is shown on
a terminal for files over 8 MiB.

With -r, SRC may be a directory and is copied as docker cp does: when DST
is an existing directory, SRC lands inside it under its own name, else DST
becomes the copy. Directories, files and symbolic links are copied with
their permission bits (setuid and setgid dropped); links are never
followed. The tree travels as a tar stream: an archive with an entry
outside DST, one reached through a symbolic link, a hard link out or a
device node is refused, in the sandbox and on this machine alike. A local
DST that did not exist is assembled beside it and renamed into place.
With --json, sbx prints {"source", "destination", "bytes"} (for -r, the
bytes of the tar stream).`,
		Args: args(2, 2, "SRC and DST"),
		RunE: func(cmd *cobra.Command, a []string) error {
			from, to, err := parseCopy(a[0], a[1])
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			if c.jsonOut && to.stdio() {
				return usagef(cmd, "--json cannot share standard output with the file")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var n int64
			switch {
			case recursive && to.remote():
				n, err = c.uploadTree(cmd.Context(), cl, from, to)
			case recursive:
				n, err = c.downloadTree(cmd.Context(), cl, from, to)
			case to.remote():
				n, err = c.upload(cmd.Context(), cl, from, to)
			default:
				n, err = c.download(cmd.Context(), cl, from, to)
			}
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(map[string]any{"source": from.String(), "destination": to.String(), "bytes": n})
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories (as a tar stream)")
	return cmd
}

func (c *cli) upload(ctx context.Context, cl *sandboxd.Client, from, to endpoint) (int64, error) {
	id, err := resolve(ctx, cl, to.ref)
	if err != nil {
		return 0, err
	}
	var r io.Reader = c.stdin
	size := int64(-1)
	if !from.stdio() {
		f, err := os.Open(from.path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if fi.IsDir() {
			return 0, fmt.Errorf("%s is a directory: copy it with sbx cp -r", from.path)
		}
		r, size = f, fi.Size()
	}
	dst := to.path
	if strings.HasSuffix(dst, "/") {
		dst += filepath.Base(from.path)
	}
	pr := &progressReader{r: r, size: size, bar: c.progressBar(size, "upload")}
	defer pr.stopRedraws()
	var body io.Reader = pr
	if size >= 0 {
		body = sizedReader{pr} // keeps the Content-Length
	}
	if err := cl.UploadFile(ctx, id, dst, body); err != nil {
		return pr.bytes(), err
	}
	pr.finish()
	return pr.bytes(), nil
}

func (c *cli) download(ctx context.Context, cl *sandboxd.Client, from, to endpoint) (n int64, err error) {
	id, err := resolve(ctx, cl, from.ref)
	if err != nil {
		return 0, err
	}
	src, err := cl.DownloadFile(ctx, id, from.path)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	pr := &progressReader{r: src, size: src.Size, bar: c.progressBar(src.Size, "download")}
	defer pr.stopRedraws()
	if to.stdio() {
		n, err = io.Copy(c.stdout, pr)
		if err == nil {
			pr.finish()
		}
		return n, err
	}

	target := to.path
	if fi, err := os.Stat(target); err == nil && fi.IsDir() {
		target = filepath.Join(target, path.Base(from.path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".sbx-*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if n, err = io.Copy(tmp, pr); err != nil {
		return n, err
	}
	// CreateTemp made it 0600; a downloaded file gets the mode of the
	// user's other new files (0666 less the umask), as the tree
	// download's extraction does (archive.LocalMask).
	if err = tmp.Chmod(os.FileMode(0o666 &^ archive.LocalMask())); err != nil {
		return n, err
	}
	if err = tmp.Close(); err != nil {
		return n, err
	}
	if err = os.Rename(tmp.Name(), target); err != nil {
		return n, err
	}
	pr.finish()
	return n, nil
}

// progressBar returns a byte progress bar on stderr for a transfer of
// size bytes, or nil when none is wanted: small or unknown sizes, or a
// stderr that is not a terminal.
func (c *cli) progressBar(size int64, what string) *progressbar.ProgressBar {
	if size < progressThreshold || !isTerminal(c.stderr) {
		return nil
	}
	return progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(c.stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// progressReader counts the bytes read through it and advances an
// optional progress bar. The bar is redrawn from a goroutine of its own
// every 100 ms, never from Read: drawing on the terminal in the copy's
// path slowed a 100 MB upload by a fifth.
type progressReader struct {
	r    io.Reader
	size int64 // -1 when unknown
	n    atomic.Int64
	bar  *progressbar.ProgressBar
	once sync.Once
	halt sync.Once
	stop chan struct{}
	done chan struct{}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	if p.bar != nil {
		p.once.Do(p.start)
	}
	return n, err
}

// bytes is the count read so far.
func (p *progressReader) bytes() int64 { return p.n.Load() }

func (p *progressReader) start() {
	_ = p.bar.RenderBlank() // the bar's clock (its rate) starts with the first read
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				_ = p.bar.Set64(p.n.Load())
			}
		}
	}()
}

// sizedReader is a progressReader of known size. Its Len (the bytes left)
// lets UploadFile send a Content-Length, as it would for the file itself.
type sizedReader struct{ *progressReader }

func (s sizedReader) Len() int { return int(max(s.size-s.n.Load(), 0)) }

// stopRedraws stops the redrawing goroutine, if it started, and waits
// for it. Deferred by every copy, so no redraw follows an error message.
func (p *progressReader) stopRedraws() {
	p.once.Do(func() {}) // a Read from now on starts nothing
	p.halt.Do(func() {
		if p.stop != nil {
			close(p.stop)
			<-p.done
		}
	})
}

// finish stops the redraws and completes the bar.
func (p *progressReader) finish() {
	if p.bar == nil {
		return
	}
	p.stopRedraws()
	_ = p.bar.Set64(p.n.Load())
	p.bar.Finish()
}
