// Command netbench measures network policies beside their
// baselines, in one run against one daemon started with --sandbox-network
// on a bridge of the bench's own, with an HTTP server in a network
// namespace the bench makes (nothing leaves the machine):
//
//		go run ./bench/netbench [-n 20]
//
//	 1. create → first exec `true`: a restricted sandbox (allow the server)
//	    beside one without network and one open;
//	 2. one HTTP GET from inside a sandbox (exec `nc`, so each sample is an
//	    exec round trip plus the connection): open, restricted by CIDR, and
//	    restricted by host name (through the name proxy), beside an exec of
//	    `true` in the same sandbox (the exec's own cost).
//
// It needs root (network namespaces, iptables). Everything is removed at
// the end: sandboxes, the namespace, the bridge and its firewall rules.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

func main() {
	n := flag.Int("n", 20, "samples per side")
	image := flag.String("image", "sandboxd/base:bookworm", "the image of every sandbox")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *image); err != nil {
		fmt.Fprintln(os.Stderr, "netbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, image string) (err error) {
	tmp, err := os.MkdirTemp("", "nb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ns, removeNS, err := testenv.MakeNetNS(1)
	if err != nil {
		return err
	}
	defer removeNS()
	srv := ns.Addrs[0]
	for _, port := range []int{80, 8080} {
		stopSrv, err := ns.ServeHTTP(srv, port)
		if err != nil {
			return err
		}
		defer stopSrv()
	}
	bridge := fmt.Sprintf("sbxnb%d", os.Getpid()%100000)
	defer teardown(bridge)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, "", false, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: sandboxdBin, Toolboxd: toolboxdBin, Dir: tmp, Name: "netbench",
		Args: []string{"--pool", "none", "--sandbox-network", "--sandbox-network-name", bridge, "--cpu-budget", "64000", "--memory-budget", "65536"}})
	if err != nil {
		return err
	}
	defer d.Finish(&err)
	fmt.Printf("netbench: image %s; %d CPUs; docker %s; sandboxd %s; server %s in namespace %s\n\n",
		image, goruntime.NumCPU(), benchd.DockerVersion(ctx), d.Version, srv, ns.Name)

	none := map[string]any{"image": image}
	open := map[string]any{"image": image, "network": map[string]any{"mode": "open"}}
	byCIDR := map[string]any{"image": image, "network": map[string]any{"mode": "restricted", "allow": []string{srv.String()}}}
	byName := map[string]any{"image": image, "network": map[string]any{"mode": "restricted", "allow": []string{"bench.test"}}}

	var firstNone, firstOpen, firstRestricted []time.Duration
	for i := range n {
		for _, side := range []struct {
			body map[string]any
			into *[]time.Duration
		}{{none, &firstNone}, {open, &firstOpen}, {byCIDR, &firstRestricted}} {
			dur, err := createExec(ctx, d, side.body)
			if err != nil {
				return err
			}
			*side.into = append(*side.into, dur)
		}
		benchd.Progress("creates: %d/%d", i+1, n)
	}
	benchd.Progress("")
	// The same from the pool: two idle sandboxes of each class, refilled
	// (untimed) before every sample.
	var pooledNone, pooledRestricted []time.Duration
	for i := range n {
		for _, side := range []struct {
			body    map[string]any
			network bool
			into    *[]time.Duration
		}{{none, false, &pooledNone}, {byCIDR, true, &pooledRestricted}} {
			if err := fillPool(ctx, d, image, side.network); err != nil {
				return err
			}
			dur, err := createExec(ctx, d, side.body)
			if err != nil {
				return err
			}
			*side.into = append(*side.into, dur)
		}
		benchd.Progress("pooled creates: %d/%d", i+1, n)
	}
	benchd.Progress("")
	if _, err := d.Do(ctx, http.MethodPut, "/v1/pools", map[string]any{"pools": []any{}}); err != nil {
		return err
	}
	t := benchd.Table{W: os.Stdout}
	t.Head("1. create → first exec `true`")
	t.Row("cold, network none", firstNone)
	t.Row("cold, network open", firstOpen)
	t.Row("cold, network restricted (1 CIDR)", firstRestricted)
	t.Ratio("p50 ratio restricted / none", firstRestricted, firstNone)
	t.Row("pooled, network none", pooledNone)
	t.Row("pooled, network restricted (1 CIDR)", pooledRestricted)
	t.Ratio("p50 ratio restricted / none, pooled", pooledRestricted, pooledNone)
	fmt.Println()

	get := func(host string, port int) string { // bash's /dev/tcp: the image has no nc
		return fmt.Sprintf(`exec bash -c 'exec 3<>/dev/tcp/%s/%d && printf "GET / HTTP/1.0\r\nHost: %s\r\n\r\n" >&3 && head -1 <&3 | grep -q " 200 "'`, srv, port, host)
	}
	sides := []struct {
		name, cmd string
		body      map[string]any
	}{
		{"exec `true` (the exec's own cost)", "true", open},
		{"GET, network open", get("x", 8080), open},
		{"GET, restricted by CIDR", get("x", 8080), byCIDR},
		{"GET, restricted by host name (proxy)", get("bench.test", 80), byName},
	}
	t.Head("2. one HTTP GET from inside a sandbox (exec + connect)")
	for _, side := range sides {
		c, err := d.Create(ctx, side.body)
		if err != nil {
			return err
		}
		durs, err := execN(ctx, d, c.ID, side.cmd, n*2)
		d.Destroy(ctx, c.ID)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		t.Row(side.name, durs)
	}
	return nil
}

// fillPool keeps two idle sandboxes of the image, with network or not,
// and waits until they are ready.
func fillPool(ctx context.Context, d *benchd.Daemon, image string, network bool) error {
	want := map[string]any{"pools": []map[string]any{{"image": image, "network": network, "size": 2}}}
	if resp, err := d.Do(ctx, http.MethodPut, "/v1/pools", want); err != nil || resp.Status != http.StatusOK {
		return fmt.Errorf("PUT /v1/pools: %v %v", err, resp)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := d.Do(ctx, http.MethodGet, "/v1/pools", nil)
		if err != nil {
			return err
		}
		var st struct {
			Pools []struct {
				Network        bool
				Ready, Filling int
			}
		}
		if err := json.Unmarshal(resp.Body, &st); err != nil {
			return err
		}
		for _, p := range st.Pools {
			if p.Network == network && p.Ready == 2 && p.Filling == 0 && len(st.Pools) == 1 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the pool did not fill")
}

func createExec(ctx context.Context, d *benchd.Daemon, body map[string]any) (time.Duration, error) {
	start := time.Now()
	c, err := d.Create(ctx, body)
	if c.ID != "" {
		defer d.Destroy(ctx, c.ID)
	}
	if err != nil {
		return 0, err
	}
	if err := d.ExecTrue(ctx, c.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// execN times n execs of cmd in sandbox id (after one untimed), each
// checked to exit 0.
func execN(ctx context.Context, d *benchd.Daemon, id, cmd string, n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := range n + 1 {
		start := time.Now()
		resp, err := d.Do(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/exec", map[string]any{"command": cmd})
		dur := time.Since(start)
		if err != nil || resp.Status != http.StatusOK || !strings.Contains(string(resp.Body), `"exit_code":0`) {
			return nil, fmt.Errorf("exec %q: %v %v", cmd, err, resp)
		}
		if i > 0 {
			out = append(out, dur)
		}
	}
	return out, nil
}

// teardown removes the bench's bridge and its firewall rules (the daemon
// keeps them when it stops, for sandboxes that run on).
func teardown(bridge string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := netpolicy.New(netpolicy.Options{Bridge: bridge, Gateway: netip.IPv4Unspecified()}).Teardown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "netbench: firewall teardown:", err)
	}
	if out, err := exec.CommandContext(ctx, "docker", "network", "rm", bridge).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "netbench: docker network rm %s: %v: %s\n", bridge, err, out)
	}
}
