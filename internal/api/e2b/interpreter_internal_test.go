package e2b

import (
	"net/http/httptest"
	"testing"
)

// The requests a secure sandbox's code interpreter answers without the
// envd access token are exactly the token-less calls of the SDK: nothing
// that runs code, however the path is spelled.
func TestInterpreterOpenRequest(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		open           bool
	}{
		{"GET", "/health", true},
		{"POST", "/contexts", true},
		{"GET", "/contexts", true},
		{"GET", "/contexts?source=ci", true},
		{"DELETE", "/contexts/6f1c2a4e-0b7d-4c55-9d0e-2f6d1d5c9a11", true},
		{"POST", "/contexts/6f1c2a4e-0b7d-4c55-9d0e-2f6d1d5c9a11/restart", true},

		{"POST", "/execute", false},
		{"POST", "/execute/", false},
		{"POST", "//execute", false},
		{"GET", "/execute", false},
		{"POST", "/health", false},
		{"HEAD", "/contexts", false},
		{"PUT", "/contexts", false},
		{"POST", "/contexts/", false},
		{"DELETE", "/contexts/abc/", false},
		{"DELETE", "/contexts/abc/restart", false},
		{"POST", "/contexts/abc/restart/", false},
		{"POST", "/contexts/../execute", false},
		{"POST", "/contexts/a%2F..%2Fexecute/restart", false},
		{"POST", "/contexts/x/../../execute", false},
		{"DELETE", "/contexts/a.b", false},
		{"GET", "/", false},
	} {
		r := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.target, nil)
		if got := interpreterOpenRequest(r); got != tc.open {
			t.Errorf("%s %s: open = %v, want %v", tc.method, tc.target, got, tc.open)
		}
	}
}
