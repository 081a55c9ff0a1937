package daytona_test

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// env is the whole daemon (internal/daemon, the same assembly as the
// binary) with the facade mounted in front of its handler, on a loopback
// listener, shared by the package's tests. Nil when there is no engine
// (need skips, saying why).
var env *stack

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run sets up the shared daemon only when the tests that use it will run
// (testenv.HasDocker), runs the tests, closes the daemon, and fails the
// run if a container of its node is left.
func run(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run()
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dtt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	nodeID := "dtt-" + strings.TrimPrefix(filepath.Base(dir), "dtt")
	testenv.Track(nodeID)
	code := func() int {
		agentBin, err := runtimetest.BuildAgent(ctx, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "build agent:", err)
			return 1
		}
		env, err = newStack(ctx, dir, nodeID, agentBin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stack:", err)
			return 1
		}
		netEnv.agentBin = agentBin
		code := m.Run()
		if err := env.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
		if err := netEnv.close(); err != nil {
			fmt.Fprintln(os.Stderr, "close the network stack:", err)
			code = 1
		}
		return code
	}()
	return testenv.Exit(code)
}

// stack is a running daemon with the facade in front.
type stack struct {
	// URL is the daemon's base URL; the SDK's API URL is URL + "/daytona/api".
	URL string
	// Admin and User are API tokens: an admin, and a user owning "alice".
	Admin, User string
	Service     *service.Service
	// NodeID labels the daemon's containers; DataDir is its data directory.
	NodeID, DataDir string

	daemon *daemon.Daemon
	server *httptest.Server
	cancel context.CancelFunc
}

// newStack starts a daemon in dir; extra are more of its flags.
func newStack(ctx context.Context, dir, nodeID, agentBin string, extra ...string) (_ *stack, err error) {
	s := &stack{NodeID: nodeID, DataDir: dir + "/data"}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	cfg, err := config.Parse(append([]string{
		"--engine", "docker", // the tests look at the engine's containers and images
		"--data-dir", dir + "/data",
		"--listen", "127.0.0.1:0",
		"--node-id", nodeID,
		"--agent-binary", agentBin,
		"--default-image", apitest.BaseImage,
		"--tls-listen", "127.0.0.1:0",
		"--pool", "none", // the warm pool has tests of its own
		"--registry-allow", "127.0.0.1", // pulls stay on this machine

		"--cpu-budget", "1000000", "--memory-budget", "1000000",
	}, extra...), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("SANDBOXD_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if s.daemon, err = daemon.New(ctx, cfg, ln, logger, daemon.Options{}); err != nil {
		ln.Close()
		return nil, err
	}
	s.Service = s.daemon.Service
	if s.Admin, err = issueToken(ctx, s.daemon.Store, auth.RoleAdmin, ""); err != nil {
		return nil, err
	}
	if s.User, err = issueToken(ctx, s.daemon.Store, auth.RoleUser, "alice"); err != nil {
		return nil, err
	}
	// The daemon mounts the facade itself (internal/daemon).
	handler := s.daemon.Handler
	s.server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler}}
	s.server.Start()
	s.URL = s.server.URL
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.Service.RunBackground(bg, 500*time.Millisecond, time.Minute)
	return s, nil
}

func issueToken(ctx context.Context, st *store.Store, role auth.Role, owner string) (string, error) {
	plaintext, tok, hash := auth.Generate(role, owner)
	rec := store.APIToken{ID: tok.ID, Name: "daytona-test", Role: store.Role(role), Owner: owner}
	if err := st.CreateAPIToken(ctx, &rec, hash); err != nil {
		return "", err
	}
	return plaintext, nil
}

// Close stops serving and the reaper, destroys every sandbox and closes
// the daemon.
func (s *stack) Close() error {
	if s.server != nil {
		s.server.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	var errs []error
	if s.Service != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		admin := service.Caller{Admin: true}
		for {
			sbs, _, err := s.Service.List(ctx, admin, service.ListFilter{Limit: store.MaxListLimit})
			if err != nil || len(sbs) == 0 {
				errs = append(errs, err)
				break
			}
			for _, sb := range sbs {
				if err := s.Service.Destroy(ctx, admin, sb.ID); err != nil && !errors.Is(err, service.ErrNotFound) {
					errs = append(errs, err)
				}
			}
		}
	}
	if s.daemon != nil {
		errs = append(errs, s.daemon.Close())
	}
	return errors.Join(errs...)
}

// need skips the test when there is no engine (testenv.NeedsDocker) and
// returns the shared stack.
func need(t *testing.T) *stack {
	t.Helper()
	testenv.NeedsDocker(t)
	if env == nil {
		t.Fatal("no shared daemon, though the engine answers (see TestMain's output)")
	}
	return env
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request under /daytona/api with token as the bearer ("" for
// none); body is JSON unless it is an io.Reader (sent as is, with
// contentType).
func (s *stack) do(t *testing.T, token, method, path string, body any, contentType ...string) response {
	t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ct = b, contentType[0]
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+daytona.Prefix+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
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

// sandbox is the part of the DTO tests look at.
type sandbox struct {
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	OrganizationID  *string           `json:"organizationId"`
	User            string            `json:"user"`
	Env             map[string]string `json:"env"`
	Labels          map[string]string `json:"labels"`
	Public          *bool             `json:"public"`
	NetworkBlockAll *bool             `json:"networkBlockAll"`
	NetworkAllow    string            `json:"networkAllowList"`
	DomainAllow     string            `json:"domainAllowList"`
	Target          string            `json:"target"`
	CPU             *float64          `json:"cpu"`
	GPU             *float64          `json:"gpu"`
	Memory          *float64          `json:"memory"`
	Disk            *float64          `json:"disk"`
	State           string            `json:"state"`
	ToolboxProxyURL string            `json:"toolboxProxyUrl"`
	AutoStop        int               `json:"autoStopInterval"`
	AutoDelete      int               `json:"autoDeleteInterval"`
}

// create makes a sandbox as token and registers its deletion.
func (s *stack) create(t *testing.T, token string, body map[string]any) sandbox {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	resp := s.do(t, token, http.MethodPost, "/sandbox", body)
	if resp.status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var sb sandbox
	decode(t, resp.body, &sb)
	t.Cleanup(func() { s.Service.Destroy(context.Background(), service.Caller{Admin: true}, sb.ID) })
	return sb
}

// shared is one started sandbox for tests that only run things in it.
var shared struct {
	sandbox
	ok bool
}

func sharedSandbox(t *testing.T) (*stack, sandbox) {
	t.Helper()
	s := need(t)
	if !shared.ok {
		resp := s.do(t, s.Admin, http.MethodPost, "/sandbox", map[string]any{"labels": map[string]string{"shared": "yes"}})
		if resp.status != http.StatusOK {
			t.Fatalf("create: %d %s", resp.status, resp.body)
		}
		decode(t, resp.body, &shared.sandbox)
		shared.ok = true
	}
	return s, shared.sandbox
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// errorBody is Daytona's error shape.
type errorBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Error      string `json:"error"`
	Code       string `json:"code"`
	Source     string `json:"source"`
}

// wantError checks a Daytona error answer and returns its body.
func wantError(t *testing.T, resp response, status int) errorBody {
	t.Helper()
	if resp.status != status {
		t.Fatalf("status %d (body %s), want %d", resp.status, resp.body, status)
	}
	var body errorBody
	if err := json.Unmarshal(resp.body, &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", resp.body, err)
	}
	if body.StatusCode != status || body.Message == "" || body.Error != http.StatusText(status) {
		t.Errorf("error body %s: want statusCode %d, a message and error %q", resp.body, status, http.StatusText(status))
	}
	return body
}
