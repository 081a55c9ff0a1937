package auth_test

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/auth"
)

func TestStripCredentials(t *testing.T) {
	token, _, _ := auth.Generate(auth.RoleUser, "alice")
	e2bKey := auth.E2BKey(token)
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for name, tc := range map[string]struct {
		in, want http.Header
	}{
		"the daemon's and the facades' headers": {
			in: http.Header{
				"X-Api-Key": {e2bKey}, "X-Access-Token": {"a"}, "E2b-Traffic-Access-Token": {"t"},
				"X-Daytona-Preview-Token": {"p"}, "X-Sandboxd-Token": {token},
				"X-Sandboxd-Node": {"n1"}, "X-Sandboxd-Node-Auth": {"t=1,mac=00"}, "X-Sandboxd-Later": {"x"},
				"Accept": {"*/*"},
			},
			want: http.Header{"Accept": {"*/*"}},
		},
		"a bearer API token":        {in: http.Header{"Authorization": {"Bearer " + token}}, want: http.Header{}},
		"a lowercase bearer":        {in: http.Header{"Authorization": {"bearer   " + token + " "}}, want: http.Header{}},
		"the E2B form":              {in: http.Header{"Authorization": {"Bearer " + e2bKey}}, want: http.Header{}},
		"a bare token":              {in: http.Header{"Authorization": {token}}, want: http.Header{}},
		"a token in another scheme": {in: http.Header{"Authorization": {`Token key="` + token + `"`}}, want: http.Header{}},
		"a token as Basic password": {in: http.Header{"Authorization": {basic("x:" + token)}}, want: http.Header{}},
		"a token as Basic user":     {in: http.Header{"Authorization": {basic(e2bKey + ":")}}, want: http.Header{}},
		"the app's Basic": {
			in:   http.Header{"Authorization": {basic("user:pass")}},
			want: http.Header{"Authorization": {basic("user:pass")}},
		},
		"another service's bearer": {
			in:   http.Header{"Authorization": {"Bearer eyJhbGciOi.x.y"}},
			want: http.Header{"Authorization": {"Bearer eyJhbGciOi.x.y"}},
		},
		"one of two Authorization headers": {
			in:   http.Header{"Authorization": {"Bearer " + token, "Basic dTpw"}},
			want: http.Header{"Authorization": {"Basic dTpw"}},
		},
		"cookies": {
			in:   http.Header{"Cookie": {"a=1; sandboxd_token=" + token + "; named=x", "b=2; s=" + e2bKey + `; q="` + token + `"`}},
			want: http.Header{"Cookie": {"a=1; b=2"}},
		},
		"the dashboard's session cookies": {
			in:   http.Header{"Cookie": {"__Host-sandboxd_ui=0123abcd; app=1; sandboxd_ui=4567"}},
			want: http.Header{"Cookie": {"app=1"}},
		},
		"only the daemon's cookies": {
			in:   http.Header{"Cookie": {"sandboxd_token=x; named=y"}},
			want: http.Header{},
		},
	} {
		h := tc.in.Clone()
		auth.StripCredentials(h, "named")
		if diff := cmp.Diff(tc.want, h); diff != "" {
			t.Errorf("%s: headers (-want +got):\n%s", name, diff)
		}
	}
}

func TestIsToken(t *testing.T) {
	token, _, _ := auth.Generate(auth.RoleAdmin, "admin")
	for s, want := range map[string]bool{
		token: true, auth.E2BKey(token): true, " " + token + "\n": true,
		token[:len(token)-1]: false, "sbx_": false, "e2b_00": false, "": false, "Bearer " + token: false,
	} {
		if got := auth.IsToken(s); got != want {
			t.Errorf("IsToken(%q) = %v, want %v", s, got, want)
		}
	}
}
