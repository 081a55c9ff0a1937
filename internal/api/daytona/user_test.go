package daytona_test

import (
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/internal/api/apitest"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestCreate_DefaultUserIsDaytona: a Daytona sandbox runs as Daytona's
// account, daytona with home /home/daytona (examples write there), which
// has passwordless sudo wherever sudo is installed; `user` and `root`
// stay available on request, anything else is refused.
func TestCreate_DefaultUserIsDaytona(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.User, nil)
	if sb.User != "daytona" {
		t.Errorf("user %q, want daytona", sb.User)
	}
	run := func(id, command string) execResult {
		t.Helper()
		var res execResult
		resp := s.do(t, s.User, http.MethodPost, "/toolbox/"+id+"/process/execute", map[string]any{"command": command})
		if resp.status != http.StatusOK {
			t.Fatalf("execute %q: %d %s", command, resp.status, resp.body)
		}
		decode(t, resp.body, &res)
		return res
	}
	want := execResult{0, "daytona /home/daytona /home/daytona ok\n"}
	if got := run(sb.ID, `echo hi > /home/daytona/note && echo "$(whoami) $HOME $(pwd) $(cat note | sed s/hi/ok/)"`); got != want {
		t.Errorf("as the default user: %+v, want %+v", got, want)
	}
	if got := run(sb.ID, `stat -c '%U %a %s' /etc/sudoers.d/daytona`); got != (execResult{0, "root 440 31\n"}) {
		t.Errorf("sudoers: %+v", got)
	}
	var home struct{ Dir string }
	decode(t, s.do(t, s.User, http.MethodGet, "/toolbox/"+sb.ID+"/user-home-dir", nil).body, &home)
	if home.Dir != "/home/daytona" {
		t.Errorf("user-home-dir %q, want /home/daytona", home.Dir)
	}

	legacy := s.create(t, s.User, map[string]any{"user": "user"})
	if got := run(legacy.ID, `echo "$(whoami) $HOME"`); legacy.User != "user" || got != (execResult{0, "user /home/user\n"}) {
		t.Errorf("user: user %q runs as %+v", legacy.User, got)
	}
	body := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", map[string]any{"user": "nobody"}), http.StatusBadRequest)
	if body.Message == "" {
		t.Error("no message")
	}
}

// TestCreate_ImageWithoutTheAccountGetsIt: an image with no daytona
// account (busybox here) gets one at create, so the default user works.
func TestCreate_ImageWithoutTheAccountGetsIt(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.User, map[string]any{"snapshot": apitest.BusyboxImage})
	res, err := s.Service.Exec(t.Context(), service.Caller{Owner: "alice"}, sb.ID, service.ExecRequest{
		Cmd: []string{"sh", "-c", `echo "$(id -un) $HOME"; test -d /home/daytona`}, User: "daytona",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "daytona /home/daytona\n" {
		t.Errorf("as daytona: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
