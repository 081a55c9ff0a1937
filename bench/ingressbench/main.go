// Command ingressbench measures the ingress and prints each figure beside
// its baseline from the same run:
//
//   - route install cost (Install + ExposePort + Remove of one sandbox)
//     with 1, 100 and 10,000 sandboxes already routed: it should be flat;
//
//   - request round trip through a preview URL (the daemon-side handler,
//     the agent tunnel over a unix socket, a loopback HTTP server) beside a
//     direct request to the same server, p50 and p95.
//
//     go run ./bench/ingressbench [-n 500] [-installs 20000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
	"github.com/sandboxd/sandboxd/internal/ingress"
)

type config struct {
	n        int // requests per round-trip series
	installs int // install+remove cycles per table size
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 500, "requests per round-trip series")
	flag.IntVar(&cfg.installs, "installs", 20000, "install+remove cycles per table size (a multiple of 200)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ingressbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "ingressbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "route install+remove\troutes present\tns/op\tp50\tp95\t")
	for _, present := range []int{1, 100, 10000} {
		r, err := routeInstall(ctx, present, cfg.installs)
		if err != nil {
			return fmt.Errorf("route install with %d routes: %w", present, err)
		}
		fmt.Fprintf(tw, "\t%d\t%d\t%v\t%v\t\n", present, r.nsPerOp, r.p50, r.p95)
	}
	tw.Flush()
	fmt.Fprintln(out)

	rt, err := roundTrips(ctx, dir, cfg.n)
	if err != nil {
		return fmt.Errorf("round trips: %w", err)
	}
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "GET round trip (n=%d)\tp50\tp95\tmean\t\n", cfg.n)
	for _, s := range rt {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t\n", s.name, s.p50, s.p95, s.mean)
	}
	return tw.Flush()
}

// stats summarizes one series of latencies.
type stats struct {
	name     string
	p50, p95 time.Duration
	mean     time.Duration
}

func summarize(name string, d []time.Duration) stats {
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return stats{name: name, p50: at(0.50), p95: at(0.95), mean: sum / time.Duration(len(d))}
}

// nopDialer never dials: the install benchmark sends no traffic.
type nopDialer struct{}

func (nopDialer) DialPort(context.Context, string, int) (net.Conn, error) {
	return nil, errors.New("no traffic in this benchmark")
}

// installBatch is how many cycles one ns/op sample averages: long enough
// to hide the clock's cost, short enough that a preemption on a busy
// machine spoils one sample rather than the figure.
const installBatch = 200

// installResult is one table size's figures: ns/op is the median over
// batches of installBatch cycles; p50 and p95 are of single cycles.
type installResult struct {
	nsPerOp  int64
	p50, p95 time.Duration
}

// routeInstall times Install + ExposePort + Remove of one sandbox with
// present sandboxes (each with a port and a custom domain) routed.
func routeInstall(ctx context.Context, present, cycles int) (installResult, error) {
	r, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: nopDialer{}})
	if err != nil {
		return installResult{}, err
	}
	defer r.Close()
	id := func(i int) string { return fmt.Sprintf("sb-%016x", i) }
	for i := range present {
		if err := r.Install(ctx, id(i)); err != nil {
			return installResult{}, err
		}
		if err := r.ExposePort(ctx, id(i), ingress.Port{Number: 8080, Protocol: ingress.HTTP}); err != nil {
			return installResult{}, err
		}
		if err := r.BindDomain(ctx, "app"+strconv.Itoa(i)+".example.com", id(i), 8080); err != nil {
			return installResult{}, err
		}
	}
	runtime.GC() // every size starts from a collected heap
	// The first cycles (warmup) are not timed: they grow the maps once.
	const warmup = 1000
	lat := make([]time.Duration, 0, cycles)
	var batches []time.Duration
	var batch time.Duration
	for i := range warmup + cycles {
		sb := id(present + i)
		start := time.Now()
		if err := r.Install(ctx, sb); err != nil {
			return installResult{}, err
		}
		if err := r.ExposePort(ctx, sb, ingress.Port{Number: 8080, Protocol: ingress.HTTP}); err != nil {
			return installResult{}, err
		}
		if err := r.Remove(ctx, sb); err != nil {
			return installResult{}, err
		}
		if i < warmup {
			continue
		}
		d := time.Since(start)
		lat = append(lat, d)
		if batch += d; len(lat)%installBatch == 0 {
			batches = append(batches, batch/installBatch)
			batch = 0
		}
	}
	slices.Sort(batches)
	s := summarize("", lat)
	return installResult{nsPerOp: batches[len(batches)/2].Nanoseconds(), p50: s.p50, p95: s.p95}, nil
}

// agentDialer reaches ports through a real tunnel handler on a unix
// socket, as the service does through a sandbox's agent.
type agentDialer struct{ sock string }

func (a agentDialer) DialPort(ctx context.Context, _ string, port int) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "unix", a.sock)
	if err != nil {
		return nil, err
	}
	return tunnel.Dial(ctx, raw, "bench", port)
}

// serve runs h on ln until the returned stop is called.
func serve(ln net.Listener, h http.Handler) (stop func()) {
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return func() { srv.Close() }
}

func roundTrips(ctx context.Context, dir string, n int) ([]stats, error) {
	const sandboxID = "sb-0123456789abcdef"
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer serve(upLn, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello from the sandbox\n")
	}))()
	upPort := upLn.Addr().(*net.TCPAddr).Port

	sock := filepath.Join(dir, "agent.sock")
	agentLn, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	defer serve(agentLn, tunnel.Handler())()

	r, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: agentDialer{sock}})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := r.Install(ctx, sandboxID); err != nil {
		return nil, err
	}
	if err := r.ExposePort(ctx, sandboxID, ingress.Port{Number: upPort, Protocol: ingress.HTTP, Public: true}); err != nil {
		return nil, err
	}
	daemonLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer serve(daemonLn, r.Wrap(http.NotFoundHandler()))()
	daemonAddr := daemonLn.Addr().String()

	// One keep-alive client per series; preview hosts resolve to the
	// daemon, as *.localhost does in a browser.
	newClient := func(addr string) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		}}
	}
	_, daemonPort, _ := net.SplitHostPort(daemonAddr)
	series := []struct {
		name, url, addr string
	}{
		{"direct to the server", "http://" + upLn.Addr().String() + "/", upLn.Addr().String()},
		{"through the preview URL", "http://" + r.PreviewHost(sandboxID, upPort) + ":" + daemonPort + "/", daemonAddr},
	}
	var out []stats
	for _, s := range series {
		c := newClient(s.addr)
		lat, err := timeGets(ctx, c, s.url, n)
		c.CloseIdleConnections()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		out = append(out, summarize(s.name, lat))
	}
	return out, nil
}

// timeGets warms up, then times n sequential GETs of url.
func timeGets(ctx context.Context, c *http.Client, url string, n int) ([]time.Duration, error) {
	const warmup = 50
	lat := make([]time.Duration, 0, n)
	for i := range warmup + n {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		if i >= warmup {
			lat = append(lat, time.Since(start))
		}
	}
	return lat, nil
}
