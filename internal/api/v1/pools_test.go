package v1_test

import (
	"net/http"
	"strings"
	"testing"
)

// The pool's admin API: PUT replaces the targets (defaults filled in the
// way a create's are), GET shows them, bad input is a 400 that changes
// nothing, and a user token may do neither. No token can act as the
// pool's owner.
func TestPools_AdminAPI(t *testing.T) {
	admin := needEnv(t).AdminToken
	type pools struct {
		Pools []struct {
			Image, Runtime       string
			CPU                  float64
			MemoryMB             int64 `json:"memory_mb"`
			Size, Ready, Filling int
			MaxSize              int   `json:"max_size"`
			WindowS              int64 `json:"window_s"`
			Target               int
		}
	}
	defer do(t, admin, "PUT", "/v1/pools", `{"pools":[]}`)
	got := decode[pools](t, do(t, admin, "PUT", "/v1/pools", `{"pools":[{"image":"sandboxd/busybox:latest","memory_mb":96,"size":3}]}`), http.StatusOK)
	if len(got.Pools) != 1 || got.Pools[0].Size != 3 || got.Pools[0].CPU != 1 || got.Pools[0].Runtime != "docker" || got.Pools[0].MemoryMB != 96 {
		t.Errorf("PUT answered %+v", got)
	}
	for _, bad := range []string{
		`{}`, `{"pools":[{"image":"sandboxd/busybox:latest","size":65}]}`,
		`{"pools":[{"image":"../../etc/passwd","size":1}]}`, `{"pools":[{"image":"x","cpu":-1,"size":1}]}`,
		`{"pools":[{"image":"x","runtime":"kata","size":1}]}`,
		// A size that follows demand: max_size above size, at most 64;
		// a window only with it, from 1 s to a day; the class named once.
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"max_size":2}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"max_size":1}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"max_size":65}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"window_s":30}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"max_size":8,"window_s":-1}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":2,"max_size":8,"window_s":86401}]}`,
		`{"pools":[{"image":"sandboxd/busybox:latest","size":1,"max_size":8},{"image":"sandboxd/busybox:latest","size":1}]}`,
	} {
		wantError(t, do(t, admin, "PUT", "/v1/pools", bad), http.StatusBadRequest, "invalid_argument")
	}
	got = decode[pools](t, do(t, admin, "GET", "/v1/pools", ""), http.StatusOK)
	if len(got.Pools) != 1 || got.Pools[0].Size != 3 || got.Pools[0].Target != 3 || got.Pools[0].MaxSize != 0 {
		t.Errorf("after the refused PUTs GET answers %+v", got)
	}
	// An adaptive class: its bounds and window read back, the window's
	// default filled in, its target starting at its size.
	got = decode[pools](t, do(t, admin, "PUT", "/v1/pools", `{"pools":[{"image":"sandboxd/busybox:latest","memory_mb":96,"size":0,"max_size":4}]}`), http.StatusOK)
	if len(got.Pools) != 1 || got.Pools[0].Size != 0 || got.Pools[0].MaxSize != 4 || got.Pools[0].WindowS != 60 || got.Pools[0].Target != 0 {
		t.Errorf("PUT of an adaptive class answered %+v", got)
	}
	user := token(t, "pool-tenant")
	wantError(t, do(t, user, "GET", "/v1/pools", ""), http.StatusForbidden, "permission_denied")
	wantError(t, do(t, user, "PUT", "/v1/pools", `{"pools":[]}`), http.StatusForbidden, "permission_denied")

	r := do(t, admin, "POST", "/v1/tokens", `{"name":"x","role":"user","owner":"sandboxd:pool"}`)
	wantError(t, r, http.StatusBadRequest, "invalid_argument")
	if !strings.Contains(string(r.body), "reserved") {
		t.Errorf("the refusal of the pool's owner: %s", r.body)
	}
}
