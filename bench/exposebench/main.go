// Command exposebench measures expose-port latency through the real
// daemon stack (internal/daemon: SQLite, Docker, the agent, the ingress)
// over the v1 API on loopback, on one sandbox, and prints p50 and p95
// beside a baseline from the same run: GET /v1/sandboxes/{id}, the same
// authentication and row lookup with no write and no ingress work.
//
// Each sample of a series is one request: expose (a fresh exposure: a
// write transaction, the route and, for tcp, a host-port bind), expose
// again (the idempotent path a retry takes), and unexpose; the port is
// unexposed between samples so every fresh expose does the full work.
//
//	go run ./bench/exposebench [-n 200] [-host-ports 40000-40999]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// image is the sandbox the ports belong to: no server needs to listen for
// an exposure to be made, so the smallest image will do.
const image = "sandboxd/busybox:latest"

func main() {
	n := flag.Int("n", 200, "samples per series")
	hostPorts := flag.String("host-ports", "40000-40999", "the daemon's host-port pool for tcp exposures")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *hostPorts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "exposebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, hostPorts string, out io.Writer) (err error) {
	if n < 1 {
		return errors.New("-n must be at least 1")
	}
	dir, err := os.MkdirTemp("", "exposebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agent, err := runtimetest.BuildAgent(ctx, dir)
	if err != nil {
		return fmt.Errorf("build agent: %w", err)
	}
	api, closeDaemon, err := startDaemon(ctx, filepath.Join(dir, "data"), agent, hostPorts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeDaemon()) }()

	var sb struct{ ID string }
	if err := api.call(ctx, "POST", "/v1/sandboxes", `{"image":"`+image+`"}`, http.StatusCreated, &sb); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	defer func() {
		err = errors.Join(err, api.call(context.WithoutCancel(ctx), "DELETE", "/v1/sandboxes/"+sb.ID, "", http.StatusNoContent, nil))
	}()

	base := "/v1/sandboxes/" + sb.ID
	get := func(ctx context.Context) error { return api.call(ctx, "GET", base, "", http.StatusOK, nil) }
	baseline, err := series(ctx, n, get)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	type row struct {
		name string
		s    stats
	}
	rows := []row{{"GET sandbox (baseline)", baseline}}
	for _, proto := range []string{"http", "tcp"} {
		s, err := exposeSeries(ctx, api, base, proto, n)
		if err != nil {
			return fmt.Errorf("%s: %w", proto, err)
		}
		rows = append(rows,
			row{"expose " + proto, s.expose},
			row{"expose " + proto + " again (existing)", s.again},
			row{"unexpose " + proto, s.unexpose})
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "v1 API on loopback, one sandbox (n=%d)\tp50\tp95\tmean\tp50 / baseline p50\t\n", n)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fx\t\n", r.name, ms(r.s.p50), ms(r.s.p95), ms(r.s.mean), float64(r.s.p50)/float64(baseline.p50))
	}
	return tw.Flush()
}

type exposeStats struct{ expose, again, unexpose stats }

// exposeSeries times n rounds of expose, expose again and unexpose of one
// port with protocol proto.
func exposeSeries(ctx context.Context, api *client, base, proto string, n int) (exposeStats, error) {
	const port = 8080
	// tcp and tls carry no credential, so only a public exposure of them is
	// allowed; http keeps its default.
	body := fmt.Sprintf(`{"port":%d,"protocol":%q,"public":%v}`, port, proto, proto != "http")
	var expose, again, unexpose []time.Duration
	for range n {
		for _, step := range []struct {
			into   *[]time.Duration
			method string
			path   string
			body   string
			status int
		}{
			{&expose, "POST", base + "/ports", body, http.StatusOK},
			{&again, "POST", base + "/ports", body, http.StatusOK},
			{&unexpose, "DELETE", fmt.Sprintf("%s/ports/%d", base, port), "", http.StatusNoContent},
		} {
			start := time.Now()
			if err := api.call(ctx, step.method, step.path, step.body, step.status, nil); err != nil {
				return exposeStats{}, err
			}
			*step.into = append(*step.into, time.Since(start))
		}
	}
	return exposeStats{summarize(expose), summarize(again), summarize(unexpose)}, nil
}

// series times n calls of f.
func series(ctx context.Context, n int, f func(context.Context) error) (stats, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := f(ctx); err != nil {
			return stats{}, err
		}
		d = append(d, time.Since(start))
	}
	return summarize(d), nil
}

// startDaemon assembles and serves a daemon on a loopback listener, as the
// binary does, and returns a client holding its admin token.
func startDaemon(ctx context.Context, dataDir, agent, hostPorts string) (*client, func() error, error) {
	cfg, err := config.Parse([]string{
		"--data-dir", dataDir,
		"--listen", "127.0.0.1:0",
		"--node-id", "exposebench-" + filepath.Base(filepath.Dir(dataDir)),
		"--agent-binary", agent,
		"--host-ports", hostPorts,
		"--tls-listen", "127.0.0.1:0",
	}, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	d, err := daemon.New(ctx, cfg, ln, slog.New(slog.DiscardHandler), daemon.Options{})
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("daemon.New: %w", err)
	}
	tok, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- d.Serve(sctx) }()
	stop := func() error {
		cancel()
		return errors.Join(<-served, d.Close())
	}
	c := &client{base: "http://" + ln.Addr().String(), token: strings.TrimSpace(string(tok)), http: &http.Client{}}
	return c, stop, nil
}

// client calls the v1 API with the admin token, over one keep-alive
// connection pool.
type client struct {
	base, token string
	http        *http.Client
}

// call sends a request and fails unless the answer has status want; into,
// if non-nil, receives the decoded JSON body.
func (c *client) call(ctx context.Context, method, path, body string, want int, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if into != nil {
		return json.Unmarshal(b, into)
	}
	return nil
}

type stats struct{ p50, p95, mean time.Duration }

func summarize(d []time.Duration) stats {
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return stats{p50: at(0.50), p95: at(0.95), mean: sum / time.Duration(len(d))}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
