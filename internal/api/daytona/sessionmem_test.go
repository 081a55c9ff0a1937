package daytona_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// heapMiB is the live heap after a collection, in MiB.
func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// TestSessions_ManyLargeOutputsKeepMemoryBounded: four sessions of one
// sandbox each run commands printing 10 MiB. The daemon (this process)
// used to keep up to 8 MiB per command and 64 MiB per session — about
// 128 MiB here; now the sandbox's sessions keep at most their limit
// (8 MiB by default), while a command's logs still answer with its newest
// output behind a marker of what was dropped.
func TestSessions_ManyLargeOutputsKeepMemoryBounded(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.Admin, nil)
	base := "/toolbox/" + sb.ID + "/process/session"
	const sessions, commands, mib = 4, 4, 10
	before := heapMiB()
	var last sessionCmd
	for i := range sessions {
		sid := fmt.Sprintf("mem-%d", i)
		if resp := s.do(t, s.Admin, http.MethodPost, base, map[string]any{"sessionId": sid}); resp.status/100 != 2 {
			t.Fatalf("create session: %d %s", resp.status, resp.body)
		}
		for j := range commands {
			cmd := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x; echo " end %d/%d"`, mib<<20, i, j)
			resp := s.do(t, s.Admin, http.MethodPost, base+"/"+sid+"/exec", map[string]any{"command": cmd})
			if resp.status != http.StatusOK {
				t.Fatalf("exec: %d %.200s", resp.status, resp.body)
			}
			decode(t, resp.body, &last)
		}
	}
	grown := heapMiB() - before
	t.Logf("heap grew %.1f MiB after %d MiB of session output", grown, sessions*commands*mib)
	if grown > 48 {
		t.Errorf("the daemon's heap grew %.1f MiB holding session output; the limits keep it under about 8", grown)
	}
	if !strings.HasPrefix(last.Stdout, "[sandboxd: ") || !strings.HasSuffix(last.Stdout, fmt.Sprintf("x end %d/%d\n", sessions-1, commands-1)) {
		t.Errorf("the last command's stdout is %.60q…, want the dropped marker and its newest output", last.Stdout)
	}
}
