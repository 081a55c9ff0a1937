// Package benchd is what the benchmarks that drive a live sandboxd share:
// the binaries to run, the daemon as a child process (127.0.0.1 only, a
// throwaway data directory, its own node id, every container it leaves
// removed by node label at the end), a small client of the native API,
// and the percentile table every benchmark prints.
package benchd

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds: a call that takes longer than these is a failure, not a figure.
const (
	RequestTimeout = 2 * time.Minute
	startTimeout   = 90 * time.Second
	buildTimeout   = 8 * time.Minute
	cleanupTimeout = 2 * time.Minute
	// maxBody bounds what a benchmark reads of one answer.
	maxBody = 1 << 20
)

// Options say how to start a daemon.
type Options struct {
	// Sandboxd and Toolboxd are the binaries (see Binaries).
	Sandboxd, Toolboxd string
	// Dir holds the data directory and the log; the caller removes it.
	Dir string
	// Name prefixes the node id (NodeID(Name)).
	Name string
	// Args are more flags for sandboxd (say --pool none). A daemon runs
	// the Docker engine (--engine docker: the benches' figures and their
	// baselines are the engine's) unless Args names another.
	Args []string
	// StartTimeout bounds the wait for /healthz (0: 90 s); a start that
	// reconciles hundreds of sandboxes may need more.
	StartTimeout time.Duration
}

// Daemon is a sandboxd child process under measurement.
type Daemon struct {
	URL     string
	Token   string
	NodeID  string
	Version string

	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	hc      *http.Client
}

// Start starts sandboxd on a free 127.0.0.1 port with its data directory
// under o.Dir, and waits until /healthz answers (after its startup
// reconcile). The caller must Close it.
func Start(ctx context.Context, o Options) (*Daemon, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	tlsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		URL:     "http://127.0.0.1:" + strconv.Itoa(port),
		NodeID:  NodeID(o.Name),
		logPath: filepath.Join(o.Dir, "sandboxd.log"),
		exited:  make(chan struct{}),
		// Connections are reused across calls, as an SDK's are; enough
		// idle ones are kept for a burst.
		hc: &http.Client{Timeout: RequestTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	dataDir := DataDir(o.Dir)
	logf, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append([]string{
		"--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--tls-listen", "127.0.0.1:" + strconv.Itoa(tlsPort),
		"--data-dir", dataDir,
		"--node-id", d.NodeID,
		"--agent-binary", o.Toolboxd,
		"--log-level", "warn",
		"--engine", "docker", // later flags win: o.Args may name another
	}, o.Args...)
	d.cmd = exec.Command(o.Sandboxd, args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandboxd: %w", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitHealthy(ctx, cmp.Or(o.StartTimeout, startTimeout)); err != nil {
		d.Close()
		return nil, fmt.Errorf("sandboxd did not become healthy: %w\n%s", err, d.LogTail(20))
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("admin token: %w", err)
	}
	d.Token = strings.TrimSpace(string(tok))
	return d, nil
}

// NodeID is the node id of a daemon that Start starts with Options.Name
// name: name-<pid>, a DNS label when name is one.
func NodeID(name string) string { return fmt.Sprintf("%s-%d", name, os.Getpid()) }

// DataDir is the data directory of a daemon that Start starts with
// Options.Dir dir; a caller may prepare it first (a cluster's files).
func DataDir(dir string) string { return filepath.Join(dir, "data") }

func (d *Daemon) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var h struct{ Version string }
		resp, err := d.Do(ctx, http.MethodGet, "/healthz", nil)
		if err == nil && resp.Status == http.StatusOK && json.Unmarshal(resp.Body, &h) == nil {
			d.Version = h.Version
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

// Close stops the daemon (SIGTERM, then SIGKILL after 10 s: a stopping
// daemon destroys its idle pool) and removes every container labelled with
// its node id, and every baseline container labelled by BaselineLabel,
// whatever was left.
func (d *Daemon) Close() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	return RemoveLabelled(ctx, "sandboxd.node="+d.NodeID, d.BaselineLabel())
}

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Kill stops the daemon with SIGKILL, as a crash would (no shutdown, no
// cleanup), and waits for it to exit. Close still removes its containers.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// Finish is Close for a deferred call in a function whose error *errp
// names: a Close error becomes the function's when it had none, and a
// failed run shows the daemon log's tail.
func (d *Daemon) Finish(errp *error) {
	if cerr := d.Close(); cerr != nil && *errp == nil {
		*errp = cerr
	}
	if *errp != nil {
		fmt.Fprintf(os.Stderr, "daemon log (tail):\n%s\n", d.LogTail(20))
	}
}

// BaselineLabel is the label of the containers a benchmark starts itself
// (docker run baselines): not the daemon's node label, so that its
// reconciler never takes them for orphans, and removed by Close.
func (d *Daemon) BaselineLabel() string { return "sandboxd.bench=" + d.NodeID }

// RemoveLabelled force-removes every container carrying one of labels.
func RemoveLabelled(ctx context.Context, labels ...string) error {
	var ids []string
	for _, l := range labels {
		out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+l).Output()
		if err != nil {
			return fmt.Errorf("list leftover containers: %w", err)
		}
		ids = append(ids, strings.Fields(string(out))...)
	}
	if len(ids) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench: removing %d leftover containers\n", len(ids))
	if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("remove leftover containers: %w: %s", err, out)
	}
	return nil
}

// LogTail is the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Response is a fully read HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *Response) String() string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%d %s", r.Status, r.Body)
}

// Do sends in (JSON, when not nil) with the admin token and reads the
// answer (at most 1 MiB).
func (d *Daemon) Do(ctx context.Context, method, path string, in any) (*Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.URL+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Created is a sandbox a create made: its id and its Server-Timing steps.
type Created struct {
	ID    string
	Steps []Step
}

// Pooled reports whether the pool served the create (Server-Timing
// `pool;desc=hit`).
func (c Created) Pooled() bool {
	return slices.ContainsFunc(c.Steps, func(s Step) bool { return s.Name == "pool" && s.Desc == "hit" })
}

// Create is POST /v1/sandboxes with body → 201.
func (d *Daemon) Create(ctx context.Context, body map[string]any) (Created, error) {
	resp, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes", body)
	if err != nil {
		return Created{}, fmt.Errorf("create: %w", err)
	}
	if resp.Status != http.StatusCreated {
		return Created{}, fmt.Errorf("create: %s", resp)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal(resp.Body, &sb); err != nil || sb.ID == "" {
		return Created{}, fmt.Errorf("create: bad answer %q", resp.Body)
	}
	steps, err := ParseServerTiming(resp.Header.Get("Server-Timing"))
	return Created{ID: sb.ID, Steps: steps}, err
}

// ExecTrue runs `true` in sandbox id (POST /v1/sandboxes/{id}/exec) and
// checks that it exited 0.
func (d *Daemon) ExecTrue(ctx context.Context, id string) error {
	resp, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"true"}})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	var res struct {
		ExitCode int `json:"exit_code"`
	}
	if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &res) != nil || res.ExitCode != 0 {
		return fmt.Errorf("exec true: %s", resp)
	}
	return nil
}

// Destroy deletes sandbox id, with a fresh bound (it runs on the way out
// of a cancelled run too), and logs a failure: the node label sweep of
// Close catches what it leaves.
func (d *Daemon) Destroy(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RequestTimeout)
	defer cancel()
	if r, err := d.Do(ctx, http.MethodDelete, "/v1/sandboxes/"+id, nil); err != nil || r.Status != http.StatusNoContent {
		fmt.Fprintf(os.Stderr, "bench: destroy %s: %v %v\n", id, err, r)
	}
}

// Step is one entry of a Server-Timing header.
type Step struct {
	Name string
	Desc string
	Dur  time.Duration
}

// ParseServerTiming reads "validate;dur=0.1, pool;desc=hit;dur=0.4"
// (durations in milliseconds, W3C Server Timing).
func ParseServerTiming(h string) ([]Step, error) {
	if strings.TrimSpace(h) == "" {
		return nil, errors.New("create answer has no Server-Timing header")
	}
	var steps []Step
	for entry := range strings.SplitSeq(h, ",") {
		params := strings.Split(strings.TrimSpace(entry), ";")
		st := Step{Name: strings.TrimSpace(params[0])}
		for _, p := range params[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			switch k {
			case "dur":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, fmt.Errorf("Server-Timing %q: %w", entry, err)
				}
				st.Dur = time.Duration(f * float64(time.Millisecond))
			case "desc":
				st.Desc = strings.Trim(v, `"`)
			}
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// Docker runs `docker args...` and times it, bounded by RequestTimeout;
// it returns the command's trimmed standard output.
func Docker(ctx context.Context, args ...string) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return time.Since(start), strings.TrimSpace(stdout.String()), nil
}

// DockerVersion is the engine's version, or "?".
func DockerVersion(ctx context.Context) string {
	_, v, err := Docker(ctx, "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return "?"
	}
	return v
}

// Progress rewrites a status line on stderr when it is a terminal; an
// empty message clears it.
func Progress(format string, args ...any) {
	if fi, err := os.Stderr.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "\r\033[K"+format, args...)
}

// Binaries returns the sandboxd and toolboxd to run: from binDir (or this
// checkout's bin/) when both are there and forceBuild is unset, else built
// from this checkout into buildDir.
func Binaries(ctx context.Context, binDir string, forceBuild bool, buildDir string) (string, string, error) {
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
	fmt.Fprintln(os.Stderr, "bench: building sandboxd and toolboxd…")
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

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// AgentBinary returns flagPath, else bin/toolboxd, else a fresh static
// build in tmp.
func AgentBinary(ctx context.Context, flagPath, tmp string) (string, error) {
	for _, p := range []string{flagPath, "bin/toolboxd"} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs, nil
			} else if p == flagPath {
				return "", err
			}
		}
	}
	out := filepath.Join(tmp, "toolboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/toolboxd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/toolboxd: %w\n%s", err, b)
	}
	return out, nil
}

// NewSandboxID returns a sandbox id in the API's format ("sb-" + 16 hex
// digits).
func NewSandboxID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}
