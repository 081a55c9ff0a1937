// Package cluster_test drives cluster mode (docs/cluster.md) end to end:
// real sandboxd processes on 127.0.0.1, each running an embedded etcd
// member, joined with `sandboxd cluster init|join` (daemontest.NewCluster),
// on a real Docker engine.
//
// Tests that do not kill nodes share one 3-node cluster (sharedCluster)
// and run in parallel where they can; a test that kills nodes starts a
// cluster of its own. Every node is stopped at the end and every container
// labelled with its node id is removed, whatever the outcome.
//
// The package runs twice. The first pass runs every test on loopback. The
// second (the LAN pass) runs lanTests again with every node of every
// cluster on a host of its own: a network namespace on a bridge that only
// the test's namespaces see, configured by host name with no loopback
// address (daemontest.LAN), as a cluster across machines is; the test
// reaches the nodes from the bridge's own namespace. SANDBOXD_TEST_CLUSTER_LAN
// selects: unset, both passes; "off", the first only; "only", the LAN
// pass only; "all", both, the LAN pass running every test. The LAN pass
// needs root and iproute2; without them it is skipped, and fails in CI.
//
// Without a reachable Docker engine the tests skip, unless CI is set, in
// which case they fail; under -short they skip.
package cluster_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

// Images built by scripts/build-images.sh.
const (
	busyboxImage = "sandboxd/busybox:latest"
	baseImage    = "sandboxd/base:bookworm"
)

// env is what TestMain prepared for every test.
var env struct {
	dt        *daemontest.Env
	dockerErr error // non-nil when Docker is unreachable

	sharedOnce sync.Once
	shared     *daemontest.Cluster
	sharedErr  error
	// registry is the shared cluster's template registry (--registry),
	// nil in the LAN pass.
	registry    *registrytest.Registry
	registryDir string

	// lan is set during the LAN pass; lanAll runs every test in it.
	lan, lanAll bool
}

// lanTests are the tests the LAN pass runs (unless
// SANDBOXD_TEST_CLUSTER_LAN=all): join by name, a sandbox used through
// another node, TLS and TCP exposures from another host, failover,
// quorum loss, and what a stranger on the network gets.
var lanTests = map[string]bool{
	"TestCluster_SandboxOfAnotherNodeWorksThroughThisOne": true,
	"TestTLS_AnswersOnEveryNode":                          true,
	"TestCluster_FailoverRecreatesOnAnotherNode":          true,
	"TestCluster_QuorumLossRefusesCreatesButKeepsExec":    true,
	"TestLAN_NodesByNameClosedToStrangers":                true,
	"TestLAN_TCPExposureAnswersOnItsOwnersName":           true,
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run() // tests skip one by one (requireDocker); no point building
	}
	env.dockerErr = daemontest.PingDocker(busyboxImage, baseImage)
	if env.dockerErr != nil && !testenv.CI() {
		return m.Run()
	}
	var err error
	// Host ports 50000 and up: test/e2e and test/adversarial use the
	// ranges below.
	if env.dt, err = daemontest.Setup("cluster", 50000); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	// Every HTTP client of the tests reaches LAN hosts from their switch,
	// trusting their certificates (and anything else as before).
	roots, err := daemontest.LANRootCAs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	for _, t := range []*http.Transport{http.DefaultTransport.(*http.Transport), freshConns.Transport.(*http.Transport)} {
		t.DialContext, t.TLSClientConfig = daemontest.DialContext, &tls.Config{RootCAs: roots}
	}
	mode := os.Getenv("SANDBOXD_TEST_CLUSTER_LAN")
	code := 0
	if mode != "only" {
		code = m.Run()
		code = max(code, closeShared(code))
	}
	if mode != "off" && !testenv.Short() {
		if why := daemontest.CanMakeLAN(); why != "" {
			fmt.Fprintf(os.Stderr, "cluster: LAN pass skipped: %s\n", why)
			if testenv.CI() {
				code = 1
			}
		} else {
			fmt.Fprintln(os.Stderr, "cluster: LAN pass: every node on a network namespace of its own, by name (SANDBOXD_TEST_CLUSTER_LAN)")
			env.lan, env.lanAll, env.dt.LAN = true, mode == "all", true
			env.sharedOnce, env.shared, env.sharedErr = sync.Once{}, nil, nil
			code = max(code, m.Run())
			code = max(code, closeShared(code))
		}
	}
	code = testenv.Exit(code)
	env.dt.Close(code != 0)
	return code
}

// closeShared checks that the tests left nothing on the shared cluster,
// if one was started, and closes it; it returns 1 on a leak or a failed
// cleanup. code is the run's so far: when it is not 0 the nodes' logs are
// printed.
func closeShared(code int) int {
	if env.shared != nil {
		// Every test destroys what it made on the shared cluster: a
		// sandbox still there is a leak, which Close's sweep would hide
		// (Leftovers: the engine's containers of the node, or under
		// --engine oci every trace of its sandboxes).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for _, d := range env.shared.Nodes {
			left, err := d.Leftovers(ctx, nil)
			if err != nil || len(left) > 0 {
				fmt.Fprintf(os.Stderr, "FAIL: cluster: the tests left %d sandbox trace(s) on shared node %s: %v\n\t%s\n",
					len(left), d.NodeID(), err, strings.Join(left, "\n\t"))
				code = 1
			}
		}
		cancel()
		if code != 0 {
			for _, d := range env.shared.Nodes {
				fmt.Fprintf(os.Stderr, "node %s log (tail):\n%s\n", d.NodeID(), d.LogTail(40))
			}
		}
		if err := env.shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: shared cluster cleanup:", err)
			code = 1
		}
	}
	if env.registry != nil {
		env.registry.Stop()
		_ = os.RemoveAll(env.registryDir)
		env.registry, env.registryDir = nil, ""
	}
	return code
}

// requireDocker skips t under -short or when Docker (or a test image) is
// missing outside CI, and fails it in CI.
//
// In the LAN pass it also skips the tests that pass does not run.
func requireDocker(t *testing.T) {
	t.Helper()
	if env.lan && !env.lanAll && !lanTests[t.Name()] {
		t.Skip("not in the LAN pass (SANDBOXD_TEST_CLUSTER_LAN=all runs it there)")
	}
	testenv.NeedsDocker(t)
	if env.dockerErr == nil {
		return
	}
	if !testenv.CI() {
		t.Skipf("skipping: Docker is unreachable (%v); these tests need a Docker engine (set CI=1 to make this a failure)", env.dockerErr)
	}
	t.Fatalf("Docker is unreachable and CI is set: %v", env.dockerErr)
}

// sharedCluster returns the 3-node cluster shared by the tests that kill
// no node, starting it on first use. TestMain closes it.
func sharedCluster(t *testing.T) *daemontest.Cluster {
	t.Helper()
	requireDocker(t)
	env.sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*daemontest.StartTimeout)
		defer cancel()
		nodes := daemontest.Nodes("s1", "s2", "s3")
		if !env.lan {
			// The nodes share templates through a registry with a password,
			// as a production cluster would. (The LAN pass has none: the
			// engine all nodes share reaches it on loopback only.)
			args, err := sharedRegistry()
			if err != nil {
				env.sharedErr = err
				return
			}
			for i := range nodes {
				nodes[i].Args = args
			}
		}
		env.shared, env.sharedErr = env.dt.NewCluster(ctx, nodes)
	})
	if env.sharedErr != nil {
		t.Fatalf("start the shared cluster: %v", env.sharedErr)
	}
	return env.shared
}

// sharedRegistry starts the shared cluster's template registry and
// returns the nodes' flags for it.
func sharedRegistry() ([]string, error) {
	if why := registrytest.Available(); why != "" {
		if testenv.CI() {
			return nil, errors.New(why)
		}
		return nil, nil // templates stay node-local; their test skips
	}
	dir, err := os.MkdirTemp("", "sandboxd-cluster-registry-")
	if err != nil {
		return nil, err
	}
	user, password := "cluster", rand.Text()
	reg, err := registrytest.New(dir, registrytest.Options{User: user, Password: password})
	if err == nil {
		err = reg.Start()
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("template registry: %w", err)
	}
	env.registry, env.registryDir = reg, dir
	authFile := filepath.Join(dir, "auth")
	if err := os.WriteFile(authFile, []byte(user+":"+password+"\n"), 0o600); err != nil {
		return nil, err
	}
	return []string{"--registry", reg.Host, "--registry-auth-file", authFile}, nil
}

// testContext returns t's context bounded by d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
