package apierrtest

import "testing"

func TestUnclear(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		clear bool
	}{
		{`invalid argument: invalid argument: agent: start "x": invalid_argument: cannot start process`, false},
		{`sandbox "web": conflict: store: sandbox state conflict`, false},
		{`store: template in use by a sandbox: 1 sandboxes`, false},
		{`not found: not_found: lstat /nope: no such file or directory`, false},
		{`sandbox "web": store: not found`, false},
		{`lstat /nope: no such file or directory`, true},
		{`runtime: must be docker or gvisor`, true},
		{`sandbox "web" not found`, true},
		{`quota exceeded: owner "a" may run 2 sandboxes at once and runs 2; stop or destroy one first`, true},
	} {
		if got := Unclear(tc.msg); (got == "") != tc.clear {
			t.Errorf("Unclear(%q) = %q, want clear=%v", tc.msg, got, tc.clear)
		}
	}
}
