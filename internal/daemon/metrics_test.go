package daemon_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/daemon"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestMetrics_ScrapeEndsWhileTheEngineHangs: /metrics samples each
// running sandbox from the engine during the scrape. An engine whose
// stats calls never answer (and ignore cancellation) still gets a scrape
// answered within its deadline, with the late sandboxes left out and
// counted (before: the scrape waited for them for ever); one whose calls
// fail gets them counted as errors.
func TestMetrics_ScrapeEndsWhileTheEngineHangs(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var faulty *runtimetest.Faulty
	d := newDaemonWith(t, agent, daemon.Options{WrapRuntime: func(rt runtime.Runtime) runtime.Runtime {
		faulty = runtimetest.NewFaulty(rt)
		return faulty
	}})
	srv := httptest.NewServer(d.Handler)
	t.Cleanup(srv.Close) // after the hung calls are released, below
	tok, err := os.ReadFile(d.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	admin := service.Caller{Admin: true}
	for range 2 {
		sb, err := d.Service.CreateSandbox(ctx, service.CreateRequest{Owner: "admin"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Service.Destroy(context.Background(), admin, sb.ID) })
	}
	scrape := func() (string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		start := time.Now()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
		}
		return string(b), time.Since(start)
	}
	series := regexp.MustCompile(`(?m)^sandboxd_sandbox_memory_bytes\{`)
	missing := func(body, reason string) string {
		m := regexp.MustCompile(`(?m)^sandboxd_sandbox_samples_missing\{reason="` + reason + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return "absent"
		}
		return m[1]
	}

	body, _ := scrape()
	if n := len(series.FindAllString(body, -1)); n < 2 {
		t.Fatalf("a healthy scrape has %d per-sandbox series, want at least 2 (ours)", n)
	}

	// A hung engine: every stats call blocks until the test ends.
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	faulty.Inject(runtimetest.Stats, runtimetest.Fault{Hook: func() error { <-release; return errors.New("released") }})
	body, took := scrape()
	if took > 10*time.Second {
		t.Errorf("a scrape with a hung engine took %v; want it within the 4 s sampling deadline (and Prometheus's 10 s)", took)
	}
	if n := len(series.FindAllString(body, -1)); n != 0 {
		t.Errorf("%d per-sandbox series with a hung engine; want none", n)
	}
	if got := missing(body, "deadline"); got == "absent" || got == "0" {
		t.Errorf(`sandboxd_sandbox_samples_missing{reason="deadline"} = %s; want the running sandboxes`, got)
	}
	once.Do(func() { close(release) })

	// A failing engine: counted as errors.
	faulty.Inject(runtimetest.Stats, runtimetest.Fault{Err: errors.New("engine says no")})
	body, _ = scrape()
	if got := missing(body, "error"); got == "absent" || got == "0" {
		t.Errorf(`sandboxd_sandbox_samples_missing{reason="error"} = %s with a failing engine; want the running sandboxes`, got)
	}
	faulty.Clear(runtimetest.Stats)
}
