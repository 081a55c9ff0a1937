package adversarial_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Attacked on a whole daemon: bad input
// answered 500 (and left volume directories behind), one tenant's token
// taking the whole host, and session output held without bound.

// footprint is what a tenant's refused creates could leave: the node's
// containers (under --engine oci, the traces of its sandboxes), the
// sandboxes the tenant lists, the volume directories.
func footprint(t *testing.T, d *daemontest.Daemon, secret string) string {
	t.Helper()
	ins, err := d.Leftovers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, list := call(t, d, "GET", "", "/v1/sandboxes", "", "Authorization", "Bearer "+secret)
	var page struct{ Items []json.RawMessage }
	if err := json.Unmarshal([]byte(list), &page); err != nil {
		t.Fatalf("list: %s", list)
	}
	var vols []string
	filepath.WalkDir(filepath.Join(d.DataDir(), "volumes"), func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			vols = append(vols, p)
		}
		return nil
	})
	return fmt.Sprintf("%d containers, %d sandboxes, volume paths %v", len(ins), len(page.Items), vols)
}

// A hostile image reference (on all three APIs), a CPU count
// above the host's and volumes over the agent's or the kernel's paths
// were 500s, some after making volume directories (and /sys/fs/cgroup was
// accepted). Each is a 4xx that leaves nothing.
func TestInputs_HostileCreatesAre4xxAndLeaveNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "inputs-create")
	_, secret := tenantSecret(t, d, "hostile")
	bearer := []string{"Authorization", "Bearer " + secret}
	mount := func(p string) string {
		return fmt.Sprintf(`{"image":%q,"mounts":[{"volume":"v","path":%q}]}`, busyboxImage, p)
	}
	type attempt struct{ method, path, body string }
	attempts := map[string]attempt{
		"v1 image traversal":      {"POST", "/v1/sandboxes", `{"image":"../../etc/passwd","mounts":[{"volume":"v","path":"/data"}]}`},
		"v1 image not built":      {"POST", "/v1/sandboxes", `{"image":"sandboxd/not-built:never","mounts":[{"volume":"v","path":"/data"}]}`},
		"e2b template traversal":  {"POST", "/sandboxes", `{"templateID":"../../etc/passwd"}`},
		"daytona snapshot":        {"POST", "/daytona/api/sandbox", `{"snapshot":"../../etc/passwd"}`},
		"daytona image FROM line": {"POST", "/daytona/api/sandbox", `{"buildInfo":{"dockerfileContent":"FROM ../../etc/passwd"}}`},
	}
	if n := goruntime.NumCPU(); n < 16 {
		attempts["v1 cpu above the host"] = attempt{"POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"cpu":%d}`, busyboxImage, n+1)}
	}
	// /bin/true is a file of the image: a volume (a directory) cannot go
	// over it, which only the engine finds out, at the start.
	for _, p := range []string{"/run/sandboxd", "/opt/sandboxd/toolboxd", "/opt", "/proc", "/proc/sys", "/sys/fs/cgroup", "/dev", "/bin/true"} {
		attempts["v1 mount at "+p] = attempt{"POST", "/v1/sandboxes", mount(p)}
	}
	before := footprint(t, d, secret)
	for name, a := range attempts {
		code, body := call(t, d, a.method, "", a.path, a.body, append(bearer, "Content-Type", "application/json")...)
		if code < 400 || code >= 500 {
			t.Errorf("%s: %d %s, want a 4xx", name, code, body)
		}
	}
	if after := footprint(t, d, secret); after != before {
		t.Errorf("the refused creates left something: before %s, after %s", before, after)
	}
}

// File calls on the root, read-only and kernel paths, and on the
// agent's own binary and socket, were 500s (DELETE /run/sandboxd cut the
// daemon off from the sandbox). They are 4xx and the sandbox keeps
// answering; another tenant never notices.
func TestInputs_HostileFileCallsAre4xx(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "inputs-files")
	c, secret := tenantSecret(t, d, "hostile")
	sb := sandbox(t, c, sandboxd.CreateRequest{Image: baseImage})
	watch := watchBystander(t, d)
	bearer := []string{"Authorization", "Bearer " + secret}
	files := "/v1/sandboxes/" + sb.ID + "/files?path="
	for _, a := range []struct{ method, path string }{
		{"PUT", files + "/"},
		{"PUT", files + "/proc/self/mem"},
		{"PUT", files + "/sys/kernel/x"},
		{"PUT", files + "/opt/sandboxd/toolboxd"},
		{"GET", files + "/proc/self/mem"},
		{"DELETE", files + "/opt/sandboxd/toolboxd"},
		{"DELETE", files + "/run/sandboxd"},
		{"GET", "/daytona/api/toolbox/" + sb.ID + "/files/download?path=/proc/self/mem"},
	} {
		if code, body := call(t, d, a.method, "", a.path, "x", bearer...); code < 400 || code >= 500 {
			t.Errorf("%s %s: %d %s, want a 4xx", a.method, a.path, code, body)
		}
	}
	if res := sh(t, c, sb.ID, "echo alive"); res.Stdout != "alive\n" {
		t.Errorf("the sandbox after the file calls: %+v", res)
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
}

// One token took 15 of the host's 16 GB and the next tenant got
// 429. A token's quota holds however many creates race, and another
// tenant still creates.
func TestInputs_QuotaHoldsAcrossConcurrentCreates(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "inputs-quota")
	code, body := call(t, d, "POST", "", "/v1/tokens",
		`{"name":"greedy","role":"user","owner":"greedy","quota":{"sandboxes":2,"memory_mb":1024}}`,
		"Authorization", "Bearer "+d.Token())
	var tok struct{ Token string }
	if json.Unmarshal([]byte(body), &tok); code != http.StatusCreated || tok.Token == "" {
		t.Fatalf("create a token with a quota: %d %s", code, body)
	}
	const attempts = 6
	var (
		wg    sync.WaitGroup
		codes = make([]int, attempts)
		start = make(chan struct{})
	)
	for i := range attempts {
		wg.Go(func() {
			<-start
			codes[i], _ = call(t, d, "POST", "", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"memory_mb":256}`, busyboxImage),
				"Authorization", "Bearer "+tok.Token)
		})
	}
	close(start)
	other := tenant(t, d, "patient")
	sandbox(t, other, sandboxd.CreateRequest{MemoryMB: 256})
	wg.Wait()
	created := 0
	for _, c := range codes {
		switch c {
		case http.StatusCreated:
			created++
		case http.StatusForbidden: // quota_exceeded
		default:
			t.Errorf("a racing create answered %d", c)
		}
	}
	if created != 2 {
		t.Errorf("%d of %d racing creates succeeded under a quota of 2 sandboxes (%v)", created, attempts, codes)
	}
	_, list := call(t, d, "GET", "", "/v1/sandboxes", "", "Authorization", "Bearer "+tok.Token)
	if n := strings.Count(list, `"id":"sb-`); n != 2 {
		t.Errorf("the owner lists %d sandboxes, want 2", n)
	}
}

// Four Daytona sessions took the daemon from 172 MB to 585 MB.
// Sixteen commands printing 10 MiB each now keep the daemon's resident
// memory within a few tens of MB of where it started.
func TestInputs_SessionOutputKeepsTheDaemonsMemoryBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "inputs-sessions")
	_, secret := tenantSecret(t, d, "chatty")
	bearer := []string{"Authorization", "Bearer " + secret, "Content-Type", "application/json"}
	code, body := call(t, d, "POST", "", "/daytona/api/sandbox", `{}`, bearer...)
	var sb struct{ ID string }
	if json.Unmarshal([]byte(body), &sb); code != http.StatusOK || sb.ID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	base := "/daytona/api/toolbox/" + sb.ID + "/process/session"
	rss := watchRSS(t, d)
	for i := range 4 {
		sid := fmt.Sprintf("s%d", i)
		if code, body := call(t, d, "POST", "", base, fmt.Sprintf(`{"sessionId":%q}`, sid), bearer...); code/100 != 2 {
			t.Fatalf("session: %d %s", code, body)
		}
		for range 4 {
			cmd := `{"command":"head -c 10485760 /dev/zero | tr '\\0' x"}`
			if code, body := call(t, d, "POST", "", base+"/"+sid+"/exec", cmd, bearer...); code != http.StatusOK {
				t.Fatalf("exec: %d %.200s", code, body)
			}
		}
	}
	if grown := rss.Growth(); grown > 96<<20 {
		t.Errorf("the daemon's RSS grew %d MiB over 160 MiB of session output", grown>>20)
	} else {
		t.Logf("RSS grew %d MiB over 160 MiB of session output", grown>>20)
	}
}
