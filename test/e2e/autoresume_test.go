package e2e_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestAutoResume_ExposedPortWakesAPausedSandbox: a sandbox made through
// the E2B API with autoResume, its port 8080 exposed through the native
// API (public, and a second private one), is paused. A request to the
// private port's preview URL without a token is refused (401) and leaves
// it paused; a request to the public port's URL resumes it through the
// ingress, and the server that ran in it answers.
func TestAutoResume_ExposedPortWakesAPausedSandbox(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := newClient(d, true)

	body, _ := json.Marshal(map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v2/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-KEY", d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, b)
	}
	var made struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(b, &made); err != nil {
		t.Fatal(err)
	}
	id := made.SandboxID
	destroyAtEnd(t, c, id)

	pub, err := c.ExposePort(ctx, id, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP, Public: true})
	if err != nil {
		t.Fatal(err)
	}
	priv, err := c.ExposePort(ctx, id, sandboxd.ExposePortRequest{Port: 8081, Protocol: sandboxd.ProtocolHTTP})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, id, sandboxd.ExecRequest{Command: `mkdir -p /tmp/www && echo hello > /tmp/www/index.html &&
		(cd /tmp/www && nohup python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &) &&
		(cd /tmp/www && nohup python3 -m http.server 8081 --bind 127.0.0.1 >/dev/null 2>&1 &)`}); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the servers: %+v, %v", res, err)
	}
	get := func(rawURL string) (int, string) {
		t.Helper()
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL()+"/index.html", nil)
		req.Host = u.Host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		code, b := get(pub.URL)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server in the sandbox: %d %s", code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}

	if code, b := get(priv.URL); code != http.StatusUnauthorized {
		t.Errorf("the private port without a token: %d %s, want 401", code, b)
	}
	if sb, err := c.GetSandbox(ctx, id); err != nil || sb.State != "paused" {
		t.Fatalf("after a request without a token: %+v, %v; want paused", sb, err)
	}
	code, got := get(pub.URL)
	if code != http.StatusOK || got != "hello\n" {
		t.Errorf("the public port of the paused sandbox: %d %q, want the server's answer", code, got)
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil || sb.State != "running" {
		t.Errorf("after the request: %+v, %v; want running", sb, err)
	}
}
