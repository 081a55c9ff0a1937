package v1_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// hostTrace is what a create can leave on the host: the node's
// containers and every path under the volume directory.
type hostTrace struct {
	containers int
	volumes    []string
}

func traceHost(t *testing.T) hostTrace {
	t.Helper()
	ins, err := testenv.NodeContainers(t.Context(), env.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	var vols []string
	root := filepath.Join(env.DataDir(), "volumes")
	err = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != root {
			vols = append(vols, p)
		}
		return err
	})
	if err != nil && !strings.Contains(err.Error(), "no such file") {
		t.Fatal(err)
	}
	return hostTrace{containers: len(ins), volumes: vols}
}

// TestCreate_HostileInputIsA400AndLeavesNothing: inputs that reached the
// engine (and came back as a 500, some after making volume directories)
// or that it accepted (a volume over /sys/fs/cgroup) are refused with
// invalid_argument (an image the host lacks from a registry it may not
// pull from: permission_denied), with no row, container or volume
// directory left.
func TestCreate_HostileInputIsA400AndLeavesNothing(t *testing.T) {
	const owner = "hostile-input"
	tok := token(t, owner)
	mount := func(p string) string {
		return `{` + busybox + `,"mounts":[{"volume":"v","path":"` + p + `"}]}`
	}
	bodies := map[string]string{
		"image path traversal": `{"image":"../../etc/passwd","mounts":[{"volume":"v","path":"/data"}]}`,
		"image uppercase":      `{"image":"Busybox"}`,
		"image not built":      `{"image":"sandboxd/not-built:never","mounts":[{"volume":"v","path":"/data"}]}`,
		"image not allowed":    `{"image":"example/not-pulled:never","mounts":[{"volume":"v","path":"/data"}]}`,
	}
	if n := goruntime.NumCPU(); n < 16 { // the API's own maximum
		bodies["cpu above the host"] = fmt.Sprintf(`{%s,"cpu":%d,"mounts":[{"volume":"v","path":"/data"}]}`, busybox, n+1)
	}
	for _, p := range []string{
		"/run/sandboxd", "/run/sandboxd/x", "/run", "/opt/sandboxd/toolboxd", "/opt/sandboxd", "/opt",
		"/proc", "/proc/sys", "/sys", "/sys/fs/cgroup", "/dev", "/dev/pts", "/etc/hosts", "/etc/resolv.conf",
	} {
		bodies["mount at "+p] = mount(p)
	}
	for i, name := range slices.Sorted(maps.Keys(bodies)) {
		t.Run(name, func(t *testing.T) {
			// A volume name of its own, so that what an earlier case left
			// cannot hide what this one leaves.
			body := strings.ReplaceAll(bodies[name], `"volume":"v"`, fmt.Sprintf(`"volume":"v%d"`, i))
			before, rowsBefore := traceHost(t), rows(t, owner)
			status, code := 400, "invalid_argument"
			if name == "image not allowed" {
				// Pulled if it may be: the test daemon may pull only from
				// 127.0.0.1, so Docker Hub's name is refused for its
				// registry. (The host's own sandboxd/… images are never
				// pulled: "image not built" is the 400 that says so.)
				status, code = 403, "permission_denied"
			}
			wantError(t, do(t, tok, "POST", "/v1/sandboxes", body), status, code)
			if after := rows(t, owner); after != rowsBefore {
				t.Errorf("rows: %d before, %d after", rowsBefore, after)
			}
			after := traceHost(t)
			if after.containers != before.containers || !slices.Equal(after.volumes, before.volumes) {
				t.Errorf("host before %+v, after %+v", before, after)
			}
		})
	}
}

// TestFiles_HostilePathsAre4xx: file calls on paths the sandbox cannot
// write or read as files — the root, read-only mounts, kernel files, the
// agent's binary and socket directory — answer invalid_argument, not a
// 500, and leave the sandbox's agent reachable.
func TestFiles_HostilePathsAre4xx(t *testing.T) {
	t.Parallel()
	tok, id := sharedSandbox(t)
	files := "/v1/sandboxes/" + id + "/files?path="
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/"},
		{"PUT", "/proc/sys/kernel/hostname"},
		{"PUT", "/sys/kernel/x"},
		{"PUT", "/opt/sandboxd/toolboxd"},
		{"PUT", "/proc/self/mem"},
		{"PUT", "/run/sandboxd/agent.sock"},
		{"GET", "/proc/self/mem"},
		{"GET", "/"},
		{"DELETE", "/opt/sandboxd/toolboxd"},
		{"DELETE", "/run/sandboxd"},
		{"DELETE", "/run/sandboxd/agent.sock"},
		{"DELETE", "/run"},
		{"DELETE", "/proc"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			wantError(t, do(t, tok, tc.method, files+tc.path, "x"), 400, "invalid_argument")
		})
	}
	// A kernel file that can be read streams its content.
	r := do(t, tok, "GET", files+"/proc/self/status", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "Pid:") {
		t.Errorf("GET /proc/self/status: %d %q", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Deadline)
	defer cancel()
	resp, err := env.Do(ctx, tok, "POST", "/v1/sandboxes/"+id+"/exec", `{"command":"echo alive"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "alive") {
		t.Errorf("exec after the hostile calls: %d %s", resp.StatusCode, b)
	}
}
