package e2b_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/netpolicy/netpolicytest"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/volume"
)

var agentBinary string

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run builds the agent only when the tests that need it will run
// (testenv.HasDocker): without an engine every harness test skips, saying
// why, and the pure tests still run. After the tests it fails the run if a
// container of a node a test used is left.
func run(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "e2b-test-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if agentBinary, err = runtimetest.BuildAgent(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, "build toolboxd:", err)
		return 1
	}
	return testenv.Exit(m.Run())
}

// tokens is an in-memory auth.TokenLookup.
type tokens map[[32]byte]auth.StoredToken

func (t tokens) LookupAPITokenByHash(_ context.Context, h [32]byte) (auth.StoredToken, error) {
	st, ok := t[h]
	if !ok {
		return auth.StoredToken{}, auth.ErrTokenNotFound
	}
	return st, nil
}

// harness is the facade over a real service: SQLite in a temporary
// directory, the Docker runtime (behind a fault injector), a real keyring
// and agent, on a loopback HTTP server.
type harness struct {
	svc   *service.Service
	store *store.Store
	rt    *runtimetest.Faulty
	clock *storetest.Clock
	url   string
	// facade is the facade behind url.
	facade *e2b.Facade
	// volRoot is the volume directory on the host.
	volRoot string
	// admin and user are API keys: admin in our token form, user (another
	// owner) in the e2b_ hex form.
	admin, user string
}

type harnessOptions struct {
	// dedupe is the facade's BodyDedupe; "" its default (undelivered).
	dedupe e2b.Dedupe
	// realClock uses time.Now instead of a settable clock.
	realClock bool
	// wrap, when set, wraps each request's ResponseWriter (to fail writes).
	wrap func(http.ResponseWriter, *http.Request) http.ResponseWriter
	// network is the daemon's --sandbox-network: a network of the test's
	// own (a bridge, traffic between its containers off), the firewall on
	// it, and sandboxes allowed network.
	network bool
}

func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	testenv.NeedsDocker(t)
	ctx := t.Context()
	var b [6]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	clk := storetest.NewClockAt(time.Now())
	now := clk.Now
	if opts.realClock {
		now = time.Now
	}
	dir := t.TempDir()

	st, err := store.Open(ctx, filepath.Join(dir, "db.sqlite"), store.Options{Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kr, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	sockRoot := filepath.Join(os.TempDir(), "e2bt-"+suffix)
	t.Cleanup(func() { os.RemoveAll(sockRoot) })
	testenv.TrackNode(t, "e2btest-"+suffix) // runs after the cleanup below: removes what it missed
	netName := ""
	if opts.network {
		netName = "e2n" + suffix // an interface name: at most 15 bytes
	}
	drt, err := docker.New(docker.Options{NodeID: "e2btest-" + suffix, SocketRoot: sockRoot, Network: netName})
	if err != nil {
		t.Fatal(err)
	}
	var firewall service.Firewall
	if opts.network {
		firewall = netpolicytest.New(t, drt, netName)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ins, _ := drt.ListOurs(ctx)
		for _, in := range ins {
			drt.Destroy(ctx, in.SandboxID)
		}
		// The images of the snapshots and forks the test made (the store
		// is open still: its Close was registered before this).
		ts, _ := st.ListTemplates(ctx, "", true)
		for _, tpl := range ts {
			drt.RemoveImage(ctx, tpl.Image)
		}
		drt.Close()
	})
	volRoot := filepath.Join(dir, "volumes")
	vols, _, err := volume.New(volRoot, volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{store: st, rt: runtimetest.NewFaulty(drt), clock: clk, volRoot: volRoot}
	h.svc, err = service.New(service.Config{
		NodeID:       "e2btest-" + suffix,
		DefaultImage: "sandboxd/base:bookworm",
		AgentBinary:  agentBinary,
		AllowNetwork: opts.network,
	}, service.Deps{
		Store:     st,
		Runtime:   h.rt,
		Router:    nopRouter{},
		Admission: admission.New(admission.Budget{MilliCPU: 256_000, MemoryMB: 256 * 1024}),
		Volumes:   vols,
		Images:    drt,
		Keyring:   kr,
		Clock:     now,
		Firewall:  firewall,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}

	lookup := tokens{}
	admin, atok, ahash := auth.Generate(auth.RoleAdmin, "admin")
	lookup[ahash] = auth.StoredToken{ID: atok.ID, Role: string(atok.Role), Owner: atok.Owner, SecretSHA256: ahash}
	user, utok, uhash := auth.Generate(auth.RoleUser, "alice")
	lookup[uhash] = auth.StoredToken{ID: utok.ID, Role: string(utok.Role), Owner: utok.Owner, SecretSHA256: uhash}
	h.admin, h.user = admin, auth.E2BKey(user)

	key := make([]byte, 32)
	rand.Read(key)
	f := e2b.New(e2b.Options{
		Service:        h.svc,
		Auth:           auth.NewAuthenticator(lookup),
		Domain:         "e2b.test",
		AccessTokenKey: key,
		BodyDedupe:     opts.dedupe,
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.Match(r) {
			http.NotFound(w, r)
			return
		}
		if opts.wrap != nil {
			w = opts.wrap(w, r)
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h.url, h.facade = srv.URL, f
	return h
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a control-plane request with key as X-API-KEY ("" for none) and
// body as JSON (nil for none).
func (h *harness) do(t *testing.T, key, method, path string, body any) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// created is the part of the Sandbox answer tests look at.
type created struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// create makes a sandbox through POST /v2/sandboxes and registers its kill.
func (h *harness) create(t *testing.T, body map[string]any) created {
	t.Helper()
	resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", body)
	if resp.status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var c created
	decode(t, resp.body, &c)
	h.cleanup(t, c.SandboxID)
	return c
}

// cleanup destroys sandbox id when the test ends.
func (h *harness) cleanup(t *testing.T, id string) {
	t.Cleanup(func() { h.svc.Destroy(context.Background(), service.Caller{Admin: true}, id) })
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// wantError checks an E2B error answer: status and the same code in the body.
func wantError(t *testing.T, resp response, status int) {
	t.Helper()
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.status != status {
		t.Fatalf("status %d (body %s), want %d", resp.status, resp.body, status)
	}
	if err := json.Unmarshal(resp.body, &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", resp.body, err)
	}
	if body.Code != status || body.Message == "" {
		t.Errorf("error body %s: want code %d and a message", resp.body, status)
	}
}

// containers counts this harness's containers.
func (h *harness) containers(t *testing.T) int {
	t.Helper()
	ins, err := h.rt.ListOurs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(ins)
}

var errInjected = errors.New("injected fault")

// nopRouter stands in for the ingress, which the facade does not use: it
// accepts every route change and keeps none.
type nopRouter struct{}

func (nopRouter) Install(context.Context, string) error                  { return nil }
func (nopRouter) Remove(context.Context, string) error                   { return nil }
func (nopRouter) ExposePort(context.Context, string, ingress.Port) error { return nil }
func (nopRouter) UnexposePort(context.Context, string, int) error        { return nil }
func (nopRouter) ListenTCP(context.Context, int, string, int) error      { return nil }
func (nopRouter) CloseTCP(int) error                                     { return nil }
func (nopRouter) BindDomain(context.Context, string, string, int) error  { return nil }
func (nopRouter) UnbindDomain(context.Context, string, string) error     { return nil }
