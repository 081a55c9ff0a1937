package daytona_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestCreate_HostileImageIs400AndLeavesNothing: a snapshot or a FROM
// image that is no image reference, and a CPU count above the host's,
// reached the engine and came back as a 500; they are 400s that leave no
// sandbox and no container.
func TestCreate_HostileImageIs400AndLeavesNothing(t *testing.T) {
	s := need(t)
	cases := map[string]map[string]any{
		"snapshot path traversal": {"snapshot": "../../etc/passwd"},
		"snapshot uppercase":      {"snapshot": "Busybox"},
		"FROM path traversal":     {"buildInfo": map[string]any{"dockerfileContent": "FROM ../../etc/passwd\n"}},
	}
	if n := goruntime.NumCPU(); n < 16 {
		cases["cpu above the host"] = map[string]any{"cpu": n + 1}
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			before := footprint(t, s)
			wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", body), http.StatusBadRequest)
			if after := footprint(t, s); after != before {
				t.Errorf("before %s, after %s", before, after)
			}
		})
	}
}

// footprint is alice's sandboxes and the node's containers.
func footprint(t *testing.T, s *stack) string {
	t.Helper()
	sbs, _, err := s.Service.List(t.Context(), service.Caller{Owner: "alice"}, service.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ins, err := testenv.NodeContainers(t.Context(), s.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	vols, _ := os.ReadDir(filepath.Join(s.DataDir, "volumes"))
	return fmt.Sprintf("%d sandboxes, %d containers, %d volume owners", len(sbs), len(ins), len(vols))
}

// TestToolbox_HostileFilesAre4xx: downloading /proc/self/mem, writing the
// root, the agent's binary or a kernel file, and deleting the
// agent's binary were 500s; they are typed 4xx, and a readable kernel
// file downloads whole, its Content-Length true.
func TestToolbox_HostileFilesAre4xx(t *testing.T) {
	s, sb := sharedSandbox(t)
	files := "/toolbox/" + sb.ID + "/files"
	for _, tc := range []struct {
		name, method, path string
		status             int
	}{
		{"download /proc/self/mem", http.MethodGet, "/download?path=/proc/self/mem", http.StatusBadRequest},
		{"delete the agent binary", http.MethodDelete, "?path=/opt/sandboxd/toolboxd", http.StatusBadRequest},
		{"delete the agent socket", http.MethodDelete, "?path=/run/sandboxd&recursive=true", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, s.do(t, s.Admin, tc.method, files+tc.path, nil), tc.status)
		})
	}
	for _, tc := range []struct {
		dst    string
		status int
	}{
		{"/", http.StatusBadRequest},
		{"/opt/sandboxd/toolboxd", http.StatusBadRequest},
		{"/proc/self/mem", http.StatusBadRequest},
	} {
		t.Run("upload "+tc.dst, func(t *testing.T) {
			body, ct := uploadBody(t, map[string][]byte{tc.dst: []byte("x")}, []string{tc.dst})
			wantError(t, s.do(t, s.Admin, http.MethodPost, files+"/bulk-upload", body, ct), tc.status)
		})
	}
	resp := s.do(t, s.Admin, http.MethodGet, files+"/download?path=/proc/self/status", nil)
	if resp.status != http.StatusOK || !strings.Contains(string(resp.body), "Pid:") {
		t.Fatalf("download /proc/self/status: %d %q", resp.status, resp.body)
	}
	if cl := resp.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(resp.body)) {
		t.Errorf("Content-Length %s for a %d-byte body", cl, len(resp.body))
	}
}

// TestCreate_OverQuotaIs403: the facade creates under the caller's token's
// quota, and answers a create past it with 403 naming the quota (not 429:
// the SDK's DaytonaRateLimitError would invite a retry that cannot help).
func TestCreate_OverQuotaIs403(t *testing.T) {
	s := need(t)
	plain, tok, hash := auth.Generate(auth.RoleUser, "daytona-quota")
	rec := store.APIToken{ID: tok.ID, Name: "quota", Role: store.RoleUser, Owner: "daytona-quota", Quota: store.Quota{Sandboxes: 1}}
	if err := s.daemon.Store.CreateAPIToken(t.Context(), &rec, hash); err != nil {
		t.Fatal(err)
	}
	s.create(t, plain, map[string]any{"snapshot": apitest.BusyboxImage})
	body := wantError(t, s.do(t, plain, http.MethodPost, "/sandbox", map[string]any{"snapshot": apitest.BusyboxImage}), http.StatusForbidden)
	if !strings.Contains(body.Message, "quota") {
		t.Errorf("message %q does not name the quota", body.Message)
	}
}
