package daytona

import "testing"

func TestBoxResolve_TildeIsTheHome(t *testing.T) {
	b := box{home: "/home/daytona"}
	for _, tc := range []struct{ in, want string }{
		{"~", "/home/daytona"},
		{"~/x/y", "/home/daytona/x/y"},
		{"~x", "~x"}, // another user's home is not ours to guess
		{"x/~", "x/~"},
		{"relative", "relative"},
		{"/abs/~/p", "/abs/~/p"},
		{"", ""},
	} {
		if got := b.resolve(tc.in); got != tc.want {
			t.Errorf("resolve(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
