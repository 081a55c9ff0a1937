package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// TestE2BSnapshot_OfAGVisorSandboxServesE2BCreates: on a daemon whose
// sandboxes are gVisor's (--engine oci --default-runtime gvisor), an E2B
// sandbox is snapshotted through the E2B API (which now holds the running
// processes where the runtime can) and a sandbox is created from the
// snapshot through the E2B API, as the SDK's Sandbox.create(snapshotID)
// does. The create must succeed (201), as it did before snapshots held
// memory: the E2B create always names a network policy (none, on a daemon
// without --sandbox-network), which the restore refuses as "network".
func TestE2BSnapshot_OfAGVisorSandboxServesE2BCreates(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "e2bsnapmem", "--engine", "oci", "--default-runtime", "gvisor")
	c := newClient(d, true)
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, method, d.URL()+path, bytes.NewReader(b))
		req.Header.Set("X-API-KEY", d.Token())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	var made struct {
		SandboxID string `json:"sandboxID"`
	}
	code, b := call(http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base"})
	if code != http.StatusCreated {
		t.Fatalf("E2B create: %d %s", code, b)
	}
	if err := json.Unmarshal(b, &made); err != nil {
		t.Fatal(err)
	}
	destroyAtEnd(t, c, made.SandboxID)
	code, b = call(http.MethodPost, "/sandboxes/"+made.SandboxID+"/snapshots", map[string]any{})
	if code != http.StatusCreated {
		t.Fatalf("E2B snapshot: %d %s", code, b)
	}
	var snap struct {
		SnapshotID string `json:"snapshotID"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteTemplate(ctx, snap.SnapshotID); err != nil && !isNotFound(err) {
			t.Errorf("cleanup: delete the snapshot: %v", err)
		}
	})
	if tpl, err := c.GetTemplate(ctx, snap.SnapshotID); err == nil {
		t.Logf("the E2B snapshot holds memory: %v", tpl.Memory)
	}
	code, b = call(http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": snap.SnapshotID})
	if code == http.StatusCreated {
		var again struct {
			SandboxID string `json:"sandboxID"`
		}
		_ = json.Unmarshal(b, &again)
		destroyAtEnd(t, c, again.SandboxID)
	} else {
		t.Errorf("E2B create from the E2B snapshot of a gVisor sandbox: %d %s; want 201", code, b)
	}
}
