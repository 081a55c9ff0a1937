package v1_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// env is the API over the real stack, shared by the package's tests; nil
// when there is no engine (needEnv skips, saying why).
var env *apitest.Env

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run sets up the shared stack only when the tests that use it will run
// (testenv.HasDocker), runs the tests, closes the stack, and fails the run
// if a goroutine or a container of the stack's node is left.
func run(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run()
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "v1test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agent, err := runtimetest.BuildAgent(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build agent:", err)
		return 1
	}
	opts := apitest.Options{AgentBinary: agent}
	if os.Getenv("SANDBOXD_TEST_LOG") != "" { // the daemon's log, for debugging a failure
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	env, err = apitest.New(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apitest.New:", err)
		return 1
	}
	testenv.Track(env.NodeID())
	code := m.Run()
	if err := env.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "apitest close:", err)
		code = max(code, 1)
	}
	// Every handler goroutine (exec streams' input pumps included) must be
	// gone once the server is closed.
	http.DefaultClient.CloseIdleConnections()
	// The oci runtime (the default engine) reaps its boots' children on
	// one goroutine for the life of the process (a child subreaper): it
	// is not a handler's.
	if err := goleak.Find(goleak.IgnoreTopFunction("github.com/sandboxd/sandboxd/internal/runtime/oci.startReaper.func1.1")); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
		code = 1
	}
	return testenv.Exit(code)
}

// needEnv skips the test when there is no engine (testenv.NeedsDocker)
// and returns the shared environment.
func needEnv(t *testing.T) *apitest.Env {
	t.Helper()
	testenv.NeedsDocker(t)
	if env == nil {
		t.Fatal("no shared stack, though the engine answers (see TestMain's output)")
	}
	return env
}

// token issues a user token for owner.
func token(t *testing.T, owner string) string {
	t.Helper()
	tok, err := needEnv(t).IssueToken(t.Context(), auth.RoleUser, owner)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func do(t *testing.T, tok, method, path, body string, header ...string) response {
	t.Helper()
	resp, err := needEnv(t).Do(t.Context(), tok, method, path, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// decode decodes r's JSON body into a T, failing the test on a status
// other than want.
func decode[T any](t *testing.T, r response, want int) T {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %s", r.status, want, r.body)
	}
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

// wantError checks that r is the error answer with status and code.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.status, status, code, r.body)
	}
	var e errorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s: %v", r.body, err)
	}
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error = %+v, want code %s with a message", e.Error, code)
	}
}

// sandbox is the wire's sandbox object, as a client sees it.
type sandbox struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Image         string            `json:"image"`
	State         string            `json:"state"`
	CPU           float64           `json:"cpu"`
	MemoryMB      int64             `json:"memory_mb"`
	Tags          map[string]string `json:"tags"`
	Env           map[string]string `json:"env"`
	Network       bool              `json:"network"`
	Runtime       string            `json:"runtime"`
	CreatedAt     time.Time         `json:"created_at"`
	ExpiresAt     *time.Time        `json:"expires_at"`
	SSHPublicKey  string            `json:"ssh_public_key"`
	SSHPrivateKey string            `json:"ssh_private_key"`
}

// create creates a sandbox and destroys it when the test ends.
func create(t *testing.T, tok, body string) sandbox {
	t.Helper()
	sb := decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes", body), http.StatusCreated)
	t.Cleanup(func() { destroy(t, sb.ID) })
	return sb
}

// destroy destroys a sandbox as the admin; gone already is fine.
func destroy(t *testing.T, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := env.Service.Destroy(ctx, service.Caller{Admin: true}, id)
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("destroy %s: %v", id, err)
	}
}

// rows counts owner's sandbox rows, whatever their state, straight from
// the store.
func rows(t *testing.T, owner string) int {
	t.Helper()
	sbs, _, err := env.Store.ListSandboxes(t.Context(), store.ListFilter{Owner: owner, Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(sbs)
}

// shared is one busybox sandbox of owner "shared" for tests that only run
// commands and move files in it (each under its own paths).
var shared struct {
	once  sync.Once
	token string
	id    string
	err   error
}

func sharedSandbox(t *testing.T) (tok, id string) {
	t.Helper()
	needEnv(t)
	shared.once.Do(func() {
		shared.token, shared.err = env.IssueToken(context.Background(), auth.RoleUser, "shared")
		if shared.err != nil {
			return
		}
		resp, err := env.Do(context.Background(), shared.token, "POST", "/v1/sandboxes",
			`{"image":"`+apitest.BusyboxImage+`","name":"shared"}`)
		if err != nil {
			shared.err = err
			return
		}
		defer resp.Body.Close()
		var sb sandbox
		if resp.StatusCode != http.StatusCreated {
			b, _ := io.ReadAll(resp.Body)
			shared.err = fmt.Errorf("create shared sandbox: %d %s", resp.StatusCode, b)
			return
		}
		shared.err = json.NewDecoder(resp.Body).Decode(&sb)
		shared.id = sb.ID // destroyed by env.Close
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.token, shared.id
}
