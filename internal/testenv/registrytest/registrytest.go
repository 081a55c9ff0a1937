// Package registrytest runs a real distribution registry (Debian's
// docker-registry, installed by scripts/setup.sh) on 127.0.0.1 for the pull
// tests, behind a small reverse proxy of the test's own that counts the
// requests it forwards. The engine pulls from 127.0.0.1:<port>/… without
// TLS: dockerd treats 127.0.0.0/8 as an insecure registry by default.
//
// Stop kills the registry and closes the proxy with its connections (a
// registry that is gone, or that dies mid-pull); Start brings both back on
// the same port with the same storage. CutManifests makes the proxy break
// off every manifest request while the registry stays up.
package registrytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Binary is the distribution registry's executable (Debian's package).
const Binary = "docker-registry"

// Registry is a registry on loopback. Its Host ("127.0.0.1:<port>") is
// the proxy's; the registry itself listens on a port of its own.
type Registry struct {
	Host string

	dir      string
	regAddr  string
	user     string
	password string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	srv      *http.Server
	requests []Request
	log      bytes.Buffer
	// delay holds each manifest request this long; rate caps each
	// response's bytes per second (0: no cap).
	delay time.Duration
	rate  int64
	// cut closes the connection of every manifest request unanswered.
	cut bool
}

// Request is one request the proxy forwarded (or refused because the
// registry was down).
type Request struct {
	Method, Path string
	Auth         bool // carried an Authorization header
}

// Options configure a registry.
type Options struct {
	// User and Password, when set, turn on htpasswd auth with that one
	// account.
	User, Password string
}

// Available reports why a registry cannot run here ("" when it can).
func Available() string {
	if _, err := exec.LookPath(Binary); err != nil {
		return Binary + " is not installed (scripts/setup.sh installs it)"
	}
	return ""
}

// Start starts a registry for t and stops it, removing its storage, when
// t ends. It skips t when the registry is not installed, unless in CI.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	if why := Available(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	r, err := New(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// New prepares a registry whose storage, config and htpasswd file live in
// dir; Start runs it.
func New(dir string, opts Options) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	rp, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{
		Host: fmt.Sprintf("127.0.0.1:%d", pp), dir: dir,
		regAddr: fmt.Sprintf("127.0.0.1:%d", rp),
		user:    opts.User, password: opts.Password,
	}
	auth := ""
	if opts.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		htp := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htp, []byte(opts.User+":"+string(hash)+"\n"), 0o600); err != nil {
			return nil, err
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: sandboxd-test\n    path: %s\n", htp)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
%s`, filepath.Join(dir, "storage"), r.regAddr, auth)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return r, nil
}

// Start runs the registry and its proxy and waits until the registry
// answers. Starting a running registry does nothing.
func (r *Registry) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	cmd := exec.Command(Binary, "serve", filepath.Join(r.dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = &r.log, &r.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited

	target := &url.URL{Scheme: "http", Host: r.regAddr}
	proxy := httputil.NewSingleHostReverseProxy(target)
	ln, err := listenRetry(r.Host)
	if err != nil {
		r.stopLocked()
		return err
	}
	r.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.requests = append(r.requests, Request{Method: req.Method, Path: req.URL.Path, Auth: req.Header.Get("Authorization") != ""})
			delay, rate, cut := r.delay, r.rate, r.cut
			r.mu.Unlock()
			if cut && strings.Contains(req.URL.Path, "/manifests/") {
				if hj, ok := w.(http.Hijacker); ok {
					if conn, _, err := hj.Hijack(); err == nil {
						_ = conn.Close()
						return
					}
				}
				panic(http.ErrAbortHandler) // closes the connection unanswered
			}
			if delay > 0 && strings.Contains(req.URL.Path, "/manifests/") {
				select {
				case <-time.After(delay):
				case <-req.Context().Done():
					return
				}
			}
			if rate > 0 {
				w = &slowWriter{ResponseWriter: w, rate: rate}
			}
			proxy.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = r.srv.Serve(ln) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.regAddr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			err := fmt.Errorf("%s exited: %s", Binary, r.log.String())
			r.stopLocked()
			return err
		default:
		}
		if time.Now().After(deadline) {
			r.stopLocked()
			return fmt.Errorf("%s did not answer on %s: %w", Binary, r.regAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listenRetry listens on addr, retrying a while: a port just closed by
// Stop may still be held by connections in TIME_WAIT (Go sets
// SO_REUSEADDR, so this is brief).
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("listen %s: %w", addr, err)
}

// Stop kills the registry and closes the proxy and every connection
// through it, at once: a pull under way fails mid-stream.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *Registry) stopLocked() {
	if r.srv != nil {
		_ = r.srv.Close()
		r.srv = nil
	}
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		<-r.exited
		r.cmd = nil
	}
}

// Slow holds every manifest request for delay before it is forwarded
// (so that concurrent pulls overlap), and caps each response at rate
// bytes per second (so that a pull is under way long enough to be cut).
// Zero values turn each off.
func (r *Registry) Slow(delay time.Duration, rate int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay, r.rate = delay, rate
}

// CutManifests makes the proxy close the connection of every manifest
// request without an answer while on is true: a registry that breaks off
// (the engine sees EOF) although it is up.
func (r *Registry) CutManifests(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = on
}

// slowWriter writes at most rate bytes per second, in small pieces.
type slowWriter struct {
	http.ResponseWriter
	rate int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := min(len(p), max(1, int(w.rate/20)))
		m, err := w.ResponseWriter.Write(p[:chunk])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[chunk:]
		time.Sleep(time.Duration(int64(chunk) * int64(time.Second) / w.rate))
	}
	return n, nil
}

// Requests returns the requests forwarded so far.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// ManifestRequests counts the requests (GET or HEAD) for the manifest of
// repo:tag: the engine asks for it once per pull (then for the digest it
// names, which is not counted).
func (r *Registry) ManifestRequests(repo, tag string) int {
	n := 0
	for _, q := range r.Requests() {
		if (q.Method == http.MethodGet || q.Method == http.MethodHead) && q.Path == "/v2/"+repo+"/manifests/"+tag {
			n++
		}
	}
	return n
}

// Push tags the local image src as <host>/<repo>:<random tag>, pushes it
// (logging in first when the registry has auth), and removes the local
// tag, so the engine lacks the reference afterwards. It returns the
// reference. The pushed image is removed from the engine again at the end
// of t (it is pulled by the test).
func (r *Registry) Push(t testing.TB, src, repo string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ref, err := r.PushRef(ctx, src, repo)
	if ref != "" {
		t.Cleanup(func() { RemoveLocal(ref) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// PushRef is Push outside a test: the caller removes the pulled reference
// (RemoveLocal) when it is done.
func (r *Registry) PushRef(ctx context.Context, src, repo string) (string, error) {
	ref := fmt.Sprintf("%s/%s:%s", r.Host, repo, RandomTag())
	if err := docker(ctx, "", "tag", src, ref); err != nil {
		return "", err
	}
	defer RemoveLocal(ref)
	if r.user == "" {
		return ref, docker(ctx, "", "push", ref)
	}
	cfg, err := os.MkdirTemp("", "registrytest-login") // the CLI's login, in a config of its own
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(cfg)
	if err := docker(ctx, r.password, "--config", cfg, "login", "-u", r.user, "--password-stdin", r.Host); err != nil {
		return "", err
	}
	return ref, docker(ctx, "", "--config", cfg, "push", ref)
}

// RemoveLocal removes the engine's local reference ref (not the image
// other tags still name), ignoring a reference that is not there.
func RemoveLocal(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, "docker", "rmi", ref).Run()
}

// RandomTag is a fresh tag.
func RandomTag() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

func docker(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "docker", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Manifest asks the registry itself (not through the proxy, with the
// registry's account) for repo's manifest ref, a tag or a digest: its
// HTTP status and, when there, its digest.
func (r *Registry) Manifest(ctx context.Context, repo, ref string) (status int, digest string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+r.regAddr+"/v2/"+repo+"/manifests/"+ref, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	if r.user != "" {
		req.SetBasicAuth(r.user, r.password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Docker-Content-Digest"), nil
}
