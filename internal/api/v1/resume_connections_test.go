package v1_test

import (
	"net/http"
	"testing"
)

// TestResume_SaysWhetherConnectionsClosed: the resume answer carries
// connections_closed: false after a thaw (its connections from outside
// survived), true after a restart (here, of a stopped sandbox); the
// restore from hibernation (true) is the service's test
// (TestHibernate_ResumeSaysConnectionsClosed).
func TestResume_SaysWhetherConnectionsClosed(t *testing.T) {
	t.Parallel()
	tok := needEnv(t).AdminToken
	sb := create(t, tok, `{`+busybox+`}`)
	type resumed struct {
		sandbox
		ConnectionsClosed *bool `json:"connections_closed"`
	}
	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/pause", ""), http.StatusOK)
	if r := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK); r.ConnectionsClosed == nil || *r.ConnectionsClosed {
		t.Errorf("resume after a pause answered connections_closed %v, want false", r.ConnectionsClosed)
	}
	decode[sandbox](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/stop", ""), http.StatusOK)
	if r := decode[resumed](t, do(t, tok, "POST", "/v1/sandboxes/"+sb.ID+"/resume", ""), http.StatusOK); r.ConnectionsClosed == nil || !*r.ConnectionsClosed {
		t.Errorf("resume of a stopped sandbox answered connections_closed %v, want true", r.ConnectionsClosed)
	}
}
