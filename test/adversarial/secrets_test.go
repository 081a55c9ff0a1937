package adversarial_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// A sandbox's secret env sat in the engine's configuration of its
// container, in `docker inspect` and in the engine's config.v2.json, for
// anyone who can read the engine (and for every process of the sandbox in
// its PID 1's environment). Now the agent gets it over its socket once it
// runs: the processes it starts see it, before and after a stop and start,
// and the engine never holds it.
func TestSecrets_SecretEnvNeverReachesTheEngine(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "secrets")
	alice := tenant(t, d, "alice")
	secret := "s3cret-" + randomHex(t)
	sb := sandbox(t, alice, sandboxd.CreateRequest{
		Env:       map[string]string{"PLAIN": "visible"},
		SecretEnv: map[string]string{"DB_PASSWORD": secret},
	})

	seen := func(when string) {
		t.Helper()
		res := sh(t, alice, sb.ID, `echo "$PLAIN $DB_PASSWORD"; tr '\0' '\n' </proc/1/environ | grep -c DB_PASSWORD || true`)
		if want := "visible " + secret + "\n0\n"; res.Stdout != want {
			t.Errorf("%s: a process sees %q, want %q (the secret, and no DB_PASSWORD in the agent's own environment)", when, res.Stdout, want)
		}
	}
	seen("after the create")
	engineLacks(t, d, sb.ID, secret)

	ctx := testContext(t, 2*time.Minute)
	if _, err := alice.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	seen("after a stop and a start")
	engineLacks(t, d, sb.ID, secret)
}

// engineLacks fails t when the engine's view of sandbox id's container
// (docker inspect, and the files the engine keeps it in) holds secret;
// under --engine oci, the runtime's own files of the sandbox (ociLacks).
func engineLacks(t *testing.T, d *daemontest.Daemon, id, secret string) {
	t.Helper()
	if d.Engine() == "oci" {
		ociLacks(t, d, id, secret)
		return
	}
	out, err := exec.CommandContext(t.Context(), "docker", "ps", "-aq", "--no-trunc", "--filter", "label=sandboxd.sandbox="+id).Output()
	cid := strings.TrimSpace(string(out))
	if err != nil || cid == "" || strings.Contains(cid, "\n") {
		t.Fatalf("the container of %s: %q, %v", id, cid, err)
	}
	inspect, err := exec.CommandContext(t.Context(), "docker", "inspect", cid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(inspect), "PLAIN=visible") {
		t.Fatalf("docker inspect shows no PLAIN=visible: the check looks in the wrong place")
	}
	if strings.Contains(string(inspect), secret) {
		t.Error("docker inspect shows the secret env")
	}
	root, err := exec.CommandContext(t.Context(), "docker", "info", "-f", "{{.DockerRootDir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(root)), "containers", cid)
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("cannot read the engine's files (%v): docker inspect was checked", err)
	}
	for _, f := range files {
		if f.IsDir() || !strings.HasSuffix(f.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("the engine's %s holds the secret env", f.Name())
		}
	}
}

// ociLacks fails t when what the oci runtime keeps of sandbox id
// outside the sandbox's own file system (its OCI bundle's config.json,
// meta.json, state.json, the OCI runtime's state) holds secret. The
// sandbox's root file system and writable layer are the sandbox's, not
// the runtime's view of it.
func ociLacks(t *testing.T, d *daemontest.Daemon, id, secret string) {
	t.Helper()
	var files []string
	dir := filepath.Join(d.OCIDir(), "sandboxes", id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the oci runtime's directory of %s: %v", id, err)
	}
	for _, e := range entries {
		if e.Name() != "rootfs" && e.Name() != "rw" {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	state, _ := filepath.Glob(filepath.Join(d.OCIDir(), "state", "*", id+"*"))
	files = append(files, state...)
	plain := false
	for _, root := range files {
		err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			plain = plain || strings.Contains(string(b), "PLAIN=visible")
			if strings.Contains(string(b), secret) {
				t.Errorf("the oci runtime's %s holds the secret env", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !plain {
		t.Fatalf("no file of the oci runtime's for %s shows PLAIN=visible (%v): the check looks in the wrong place", id, files)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
