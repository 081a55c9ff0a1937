package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestLifecycle_AutoStopSurvivesRestart: a sandbox's auto-stop is a rule
// on its row that the daemon's background loop applies, so a daemon killed
// (SIGKILL) and started again between the create and the auto-stop still
// stops the sandbox, and keeps it (stopped, not destroyed). Two sandboxes:
// one made through the native API (lifecycle.auto_stop_s 45) and one
// through the Daytona facade (autoStopInterval 1, Daytona's unit being
// minutes). Both must be running just after the restart, and stopped
// within a generous deadline after their interval.
//
// The requests are raw HTTP, not the SDKs, so that the test runs against
// any daemon: before the rules moved into the service the native create
// refused the lifecycle field (400), and the Daytona facade destroyed an
// idle sandbox instead of stopping it.
func TestLifecycle_AutoStopSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "lifecycle")
	c := newClient(d, true)
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, d.URL()+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+d.Token())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		if out == nil {
			out = map[string]any{"body": string(raw)}
		}
		return resp.StatusCode, out
	}
	create := func(path string, body any, want int) string {
		t.Helper()
		status, out := call(http.MethodPost, path, body)
		id, _ := out["id"].(string)
		if id != "" {
			destroyAtEnd(t, c, id)
		}
		if status != want || id == "" {
			t.Fatalf("POST %s: %d %v; want %d with an id", path, status, out, want)
		}
		return id
	}
	// Each sandbox's idle time starts between these two instants.
	nativeFrom := time.Now()
	native := create("/v1/sandboxes", map[string]any{
		"image": busyboxImage, "cpu": 0.25, "memory_mb": 128, "timeout_s": 600,
		"lifecycle": map[string]any{"auto_stop_s": 45},
	}, http.StatusCreated)
	daytonaFrom := time.Now()
	daytona := create("/daytona/api/sandbox", map[string]any{
		"snapshot": busyboxImage, "user": "root", "cpu": 0.25, "memory": 0.125, "autoStopInterval": 1,
	}, http.StatusOK)
	created := time.Now()

	if err := d.Restart(ctx); err != nil {
		t.Fatalf("restart: %v\nlog:\n%s", err, d.LogTail(40))
	}
	type probe struct {
		name, path string
		stopped    func(map[string]any) bool
		interval   time.Duration
		from       time.Time
	}
	probes := []probe{
		{"native", "/v1/sandboxes/" + native, func(m map[string]any) bool { return m["state"] == "stopped" }, 45 * time.Second, nativeFrom},
		{"daytona", "/daytona/api/sandbox/" + daytona, func(m map[string]any) bool { return m["state"] == "stopped" }, time.Minute, daytonaFrom},
	}
	for _, p := range probes {
		status, out := call(http.MethodGet, p.path, nil)
		if status != http.StatusOK || p.stopped(out) {
			t.Fatalf("%s just after the restart (%v after the create): %d %v; want it still running (the restart must come before its auto-stop)",
				p.name, time.Since(created).Round(time.Millisecond), status, out)
		}
	}
	// Each sandbox stops within its interval plus a generous margin for a
	// busy machine (the loop runs every second).
	for _, p := range probes {
		deadline := created.Add(p.interval + 90*time.Second)
		for {
			status, out := call(http.MethodGet, p.path, nil)
			if status == http.StatusOK && p.stopped(out) {
				if early := p.from.Add(p.interval); time.Now().Before(early) {
					t.Errorf("%s stopped %v before its auto-stop", p.name, time.Until(early))
				}
				break
			}
			if status != http.StatusOK {
				t.Fatalf("%s after the restart: %d %v; want it stopped and kept, not gone", p.name, status, out)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %v %v after its auto-stop of %v: the rule did not survive the restart\nlog:\n%s",
					p.name, out["state"], time.Since(created).Round(time.Second), p.interval, d.LogTail(40))
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(time.Second):
			}
		}
	}
	// Kept: a stopped sandbox starts again, its rule in force.
	if status, out := call(http.MethodPost, "/v1/sandboxes/"+native+"/start", nil); status != http.StatusOK || out["state"] != "running" {
		t.Errorf("start after the auto-stop: %d %v", status, out)
	}
	if status, out := call(http.MethodGet, "/v1/sandboxes/"+native, nil); status != http.StatusOK || fmt.Sprint(out["lifecycle"]) != "map[auto_stop_s:45]" {
		t.Errorf("native read: %d lifecycle %v; want {auto_stop_s: 45}", status, out["lifecycle"])
	}
}
