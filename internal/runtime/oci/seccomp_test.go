package oci_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestCreate_SeccompCompiledOnce: crun compiles the seccomp profile for
// a runtime's first sandbox; the next gets that program as it is (the
// annotation run.oci.seccomp_bpf_data), and its processes run under it.
func TestCreate_SeccompCompiledOnce(t *testing.T) {
	requireEnv(t)
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	if filepath.Base(rt.Binary()) != "crun" {
		t.Skipf("the OCI runtime is %s; only crun takes a compiled program", rt.Binary())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	first, second := runtimetest.NewSandboxID(), runtimetest.NewSandboxID()
	for _, id := range []string{first, second} {
		t.Cleanup(func() {
			if err := rt.Destroy(context.Background(), id); err != nil {
				t.Errorf("Destroy %s: %v", id, err)
			}
		})
		if _, err := rt.Create(ctx, spec(id)); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
	}
	annotation := func(id string) string {
		var cfg struct {
			Annotations map[string]string `json:"annotations"`
			Linux       struct {
				Seccomp json.RawMessage `json:"seccomp"`
			} `json:"linux"`
		}
		b, err := os.ReadFile(filepath.Join(rt.BundleDir(id), "config.json"))
		if err != nil || json.Unmarshal(b, &cfg) != nil {
			t.Fatalf("config.json of %s: %v", id, err)
		}
		if len(cfg.Linux.Seccomp) == 0 {
			t.Errorf("config.json of %s has no seccomp profile", id)
		}
		return cfg.Annotations["run.oci.seccomp_bpf_data"]
	}
	if a := annotation(first); a != "" {
		t.Errorf("the first sandbox was given a compiled program (%d bytes of base64); crun should have compiled it", len(a))
	}
	compiled, err := os.ReadFile(filepath.Join(env.dir, "state", "crun", first, "seccomp.bpf"))
	if err != nil {
		t.Fatalf("crun's compiled program of the first sandbox: %v", err)
	}
	given, err := base64.StdEncoding.DecodeString(annotation(second))
	if err != nil || !bytes.Equal(given, compiled) {
		t.Fatalf("the second sandbox's program: %d bytes (%v), want the %d crun compiled for the first", len(given), err, len(compiled))
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, second) }, "tok-"+second)
	defer c.Close()
	res, err := c.Exec(ctx, agent.ExecRequest{Cmd: []string{"/bin/cat", "/proc/self/status"}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	for _, want := range []string{"Seccomp:\t2\n", "Seccomp_filters:\t1\n"} {
		if !strings.Contains(string(res.Stdout), want) {
			t.Errorf("a process of the second sandbox: /proc/self/status lacks %q:\n%s", want, res.Stdout)
		}
	}
}
