package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestMain fails the run if a test left a container of a node it used.
func TestMain(m *testing.M) { os.Exit(testenv.Exit(m.Run())) }

func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedsDocker(t)
}

func newDaemon(t *testing.T, agent string, extra ...string) *daemon.Daemon {
	t.Helper()
	return newDaemonWith(t, agent, daemon.Options{}, extra...)
}

func newDaemonWith(t *testing.T, agent string, opts daemon.Options, extra ...string) *daemon.Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "dmn") // short: agent socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A node id of its own, whose containers go when the test ends,
	// passed or failed.
	node := "dmntest-" + filepath.Base(dir)
	testenv.TrackNode(t, node)
	// The Docker engine: the package's tests look at its containers
	// (testenv.TrackNode removes them).
	cfg, err := config.Parse(append([]string{"--engine", "docker", "--data-dir", dir, "--listen", "127.0.0.1:0", "--agent-binary", agent,
		"--node-id", node, "--default-image", "sandboxd/busybox:latest", "--tls-listen", "127.0.0.1:0", "--pool", "none"}, extra...),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(t.Context(), cfg, ln, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestNew_TwoDaemonsOnOneEngineKeepTheirSandboxes: daemons with their own
// data directories get their own node ids, so one's startup reconcile never
// takes the other's containers for orphans.
func TestNew_TwoDaemonsOnOneEngineKeepTheirSandboxes(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	admin := service.Caller{Admin: true}
	a := newDaemon(t, agent)
	sb, err := a.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Service.Destroy(context.Background(), admin, sb.ID) })

	b := newDaemon(t, agent) // its startup reconcile runs now
	if a.Config.NodeID == b.Config.NodeID {
		t.Fatalf("both daemons have node id %q", a.Config.NodeID)
	}
	res, err := a.Service.Exec(ctx, admin, sb.ID, service.ExecRequest{Cmd: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the first daemon's sandbox after the second started: %v %v", res, err)
	}
}

// TestHTTPS_PreviewURLWithTheLocalCA: with --https-listen and no ACME
// email, preview URLs are served over TLS with certificates from a local
// CA whose certificate is written to the data dir.
func TestHTTPS_PreviewURLWithTheLocalCA(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := newDaemon(t, agent, "--https-listen", httpsAddr)
	go d.Serve(ctx)

	admin := service.Caller{Admin: true}
	sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), admin, sb.ID) })
	if _, err := d.Service.Exec(ctx, admin, sb.ID, service.ExecRequest{
		Command: "mkdir -p /www && echo hello-tls > /www/index.html && httpd -p 8080 -h /www",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Service.ExposePort(ctx, admin, sb.ID, 8080, "http", true); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(d.Config.DataDir, "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	host := "8080-" + sb.ID + ".localhost"
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", httpsAddr)
		},
	}}
	resp, err := client.Get("https://" + host + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello-tls\n" {
		t.Fatalf("https preview: %d %q", resp.StatusCode, body)
	}
}

// TestHTTPS_E2BPortHostWithoutExpose: E2B's getHost(port) names any port
// of an E2B sandbox with no expose call; with --https-listen those names
// get a certificate from the local CA and are served over TLS as the
// README says (the handshake failed: "no route for this server name").
func TestHTTPS_E2BPortHostWithoutExpose(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := newDaemon(t, agent, "--https-listen", httpsAddr)
	go d.Serve(ctx)

	admin := service.Caller{Admin: true}
	// What the E2B facade's create records: the sandbox is E2B's.
	sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Annotations: map[string]string{"e2b.template": "base"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), admin, sb.ID) })
	if _, err := d.Service.Exec(ctx, admin, sb.ID, service.ExecRequest{
		Command: "mkdir -p /www && echo hello-e2b-tls > /www/index.html && httpd -p 8080 -h /www",
	}); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(d.Config.DataDir, "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	get := func(host string) (int, string, error) {
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", httpsAddr)
			},
		}}
		resp, err := client.Get("https://" + host + "/")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	code, body, err := get("8080-" + sb.ID + ".localhost")
	if err != nil || code != 200 || body != "hello-e2b-tls\n" {
		t.Fatalf("https port host of an E2B sandbox: %d %q %v; want 200 hello-e2b-tls", code, body, err)
	}
	// A name no sandbox serves still gets no certificate.
	if _, _, err := get("8080-sb-00000000deadbeef.localhost"); err == nil {
		t.Errorf("a port host of no sandbox got a certificate")
	}
}

// TestReadyz_NotReadyUntilTheStartupRepairSucceeds: a daemon that starts
// while the engine does not answer serves (/healthz 200) but is not ready
// (/readyz 503 with the reason, creates 503); once the engine answers, the
// repair it retries in the background succeeds and /readyz is 200.
func TestReadyz_NotReadyUntilTheStartupRepairSucceeds(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var faulty *runtimetest.Faulty
	d := newDaemonWith(t, agent, daemon.Options{WrapRuntime: func(rt runtime.Runtime) runtime.Runtime {
		faulty = runtimetest.NewFaulty(rt)
		faulty.Inject(runtimetest.ListOurs, runtimetest.Fault{Err: errors.New("engine not answering yet")})
		return faulty
	}})
	srv := httptest.NewServer(d.Handler)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200 (liveness)", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "engine not answering yet") {
		t.Errorf("/readyz = %d %s, want 503 naming the failure", code, body)
	}
	if _, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"}); !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("create before the repair: %v, want ErrUnavailable", err)
	}
	bg, stop := context.WithCancel(ctx)
	defer stop()
	go d.Service.RunBackground(bg, time.Hour, time.Hour) // what Serve runs
	faulty.Clear(runtimetest.ListOurs)
	testenv.WaitFor(t, "/readyz answers 200", func() error {
		if code, body := get("/readyz"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// TestDomains_APIHostIsReserved: behind a proxy that names the API
// api.example.test (--api-host), no tenant may bind that name as a custom
// domain: the ingress would then take the API's own traffic. The bind is
// refused whatever its spelling, and the API still answers on that host.
func TestDomains_APIHostIsReserved(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, agent, "--api-host", "api.example.test")
	srv := httptest.NewServer(d.Handler)
	defer srv.Close()
	tok, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), service.Caller{Admin: true}, sb.ID) })
	send := func(method, host, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	domains := "/v1/sandboxes/" + sb.ID + "/domains"
	for _, name := range []string{"api.example.test", "API.Example.Test."} {
		code, body := send("POST", "", domains, `{"hostname":"`+name+`","port":8080}`)
		if code != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) || !strings.Contains(body, "hostname") {
			t.Errorf("bind %s: %d %s, want 400 invalid_argument on hostname", name, code, body)
		}
	}
	if code, body := send("POST", "", domains, `{"hostname":"app.example.test","port":8080}`); code != http.StatusOK {
		t.Errorf("bind a name that is not reserved: %d %s, want 200", code, body)
	}
	if code, body := send("GET", "api.example.test", "/healthz", ""); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("GET /healthz on the API host: %d %s, want the API's 200", code, body)
	}
}

// TestNew_DataDirIsPrivate: a data dir others may enter is made 0700,
// and the database, its WAL and its index are 0600.
func TestNew_DataDirIsPrivate(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemonWith(t, agent, daemon.Options{}, "--data-dir", loosePrivateDir(t))
	fi, err := os.Stat(d.Config.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("data dir mode = %o, want 700", got)
	}
	for _, name := range []string{"sandboxd.db", "sandboxd.db-wal", "sandboxd.db-shm"} {
		fi, err := os.Stat(filepath.Join(d.Config.DataDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode = %o, want 600", name, got)
		}
	}
}

// loosePrivateDir is a fresh directory of mode 0755, removed at the end.
func loosePrivateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dmn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHTTPS_LocalCAIssuanceIsBounded: the TLS handshake comes before any
// credential, so a stranger chooses the server names. Names no sandbox
// serves make the local CA sign nothing; walking the ports of one E2B
// sandbox that nothing listens on signs nothing either (before: all 100,
// each signed under one lock, and the cache cleared whole at 4,096; then
// 32, the sandbox's budget); concurrent handshakes for one new name (the
// interpreter's port, always served) get one certificate between them;
// and a name signed before the walk (envd's port) keeps its certificate.
func TestHTTPS_LocalCAIssuanceIsBounded(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := newDaemon(t, agent, "--https-listen", httpsAddr)
	go d.Serve(ctx)

	admin := service.Caller{Admin: true}
	sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Annotations: map[string]string{"e2b.template": "base"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), admin, sb.ID) })
	pem, err := os.ReadFile(filepath.Join(d.Config.DataDir, "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// shake returns the serial of the certificate the daemon presented
	// for name, or the handshake's error.
	shake := func(name string) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", httpsAddr, &tls.Config{ServerName: name, RootCAs: pool})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	host := func(port int) string { return fmt.Sprintf("%d-%s.localhost", port, sb.ID) }

	early, err := shake(host(49983))
	if err != nil {
		t.Fatalf("the sandbox's first port host: %v", err)
	}
	// Many names of no sandbox: all refused.
	for i := range 100 {
		if _, err := shake(fmt.Sprintf("%d-sb-%016x.localhost", 3000+i, 0xdead0000+i)); err == nil {
			t.Fatalf("a port host of no sandbox got a certificate")
		}
	}
	// One new name, 16 handshakes at once: one certificate.
	serials := make(chan string, 16)
	for range 16 {
		go func() { s, _ := shake(host(49999)); serials <- s }()
	}
	first := <-serials
	for range 15 {
		if s := <-serials; s != first || s == "" {
			t.Fatalf("concurrent handshakes for one name: serials %q and %q; want one certificate", first, s)
		}
	}
	// A walk over 100 ports of the sandbox, none listening.
	got := 0
	for port := 10000; port < 10100; port++ {
		if _, err := shake(host(port)); err == nil {
			got++
		}
	}
	if got != 0 {
		t.Errorf("%d of 100 closed port hosts of one sandbox got a certificate; want none", got)
	}
	if again, err := shake(host(49983)); err != nil || again != early {
		t.Errorf("the first port host after the walk: serial %q, %v; want the same certificate %q", again, err, early)
	}
	mfs, err := d.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sandboxd_tls_local_certificates_issued_total" {
			if n := int(mf.GetMetric()[0].GetCounter().GetValue()); n != got+2 {
				t.Errorf("sandboxd_tls_local_certificates_issued_total %d; want %d (49983, 49999 and the walk's)", n, got+2)
			}
		}
	}
}

// TestHTTPS_LocalCAOneTenantCannotStarveAnother: every exposed http port
// is a name the local CA signs for at a stranger's handshake. A tenant
// whose sandboxes expose more ports than the CA's burst (four sandboxes
// of 33: each sandbox's own budget is 32) used to empty the CA's budget
// with one walk over them, and another tenant's new ports then failed
// TLS. Now each name counts against its sandbox's owner, whose share is
// a quarter of the CA's rate: the other tenant's names still get theirs.
func TestHTTPS_LocalCAOneTenantCannotStarveAnother(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := newDaemon(t, agent, "--https-listen", httpsAddr)
	go d.Serve(ctx)

	admin := service.Caller{Admin: true}
	create := func(owner string, ports ...int) string {
		t.Helper()
		sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), admin, sb.ID) })
		for _, p := range ports {
			if _, err := d.Service.ExposePort(ctx, admin, sb.ID, p, "http", true); err != nil {
				t.Fatal(err)
			}
		}
		return sb.ID
	}
	many := make([]int, 33)
	for i := range many {
		many[i] = 10000 + i
	}
	var mallory []string
	for range 4 {
		mallory = append(mallory, create("mallory", many...))
	}
	alicePorts := make([]int, 20)
	for i := range alicePorts {
		alicePorts[i] = 3000 + i
	}
	alice := create("alice", alicePorts...)

	pem, err := os.ReadFile(filepath.Join(d.Config.DataDir, "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	shake := func(port int, id string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", httpsAddr,
			&tls.Config{ServerName: fmt.Sprintf("%d-%s.localhost", port, id), RootCAs: pool})
		if err != nil {
			return err
		}
		return c.Close()
	}
	walked := 0
	for _, id := range mallory {
		for _, p := range many {
			if shake(p, id) == nil {
				walked++
			}
		}
	}
	for _, p := range alicePorts {
		if err := shake(p, alice); err != nil {
			t.Fatalf("alice's exposed port %d after a walk over mallory's %d (%d certificates): %v", p, 4*len(many), walked, err)
		}
	}
}
