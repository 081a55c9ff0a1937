package forward_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
)

// draws returns a rnd that answers the given values in turn.
func draws(t *testing.T, vals ...int) func(int) int {
	t.Helper()
	return func(n int) int {
		if len(vals) == 0 {
			t.Fatal("rnd called more often than expected")
		}
		v := vals[0]
		vals = vals[1:]
		if v < 0 || v >= n {
			t.Fatalf("scripted draw %d out of [0, %d)", v, n)
		}
		return v
	}
}

func TestPowerOfTwo(t *testing.T) {
	a := forward.Candidate{Node: "a", FreeMemoryMB: 1000, FreeMilliCPU: 1000}
	b := forward.Candidate{Node: "b", FreeMemoryMB: 4000, FreeMilliCPU: 500}
	c := forward.Candidate{Node: "c", FreeMemoryMB: 4000, FreeMilliCPU: 2000}
	d := forward.Candidate{Node: "d", FreeMemoryMB: 4000, FreeMilliCPU: 2000}
	for _, tc := range []struct {
		name  string
		cands []forward.Candidate
		draws []int
		want  forward.Candidate
		ok    bool
	}{
		{"none", nil, nil, forward.Candidate{}, false},
		{"one", []forward.Candidate{a}, nil, a, true},
		{"more memory wins", []forward.Candidate{a, b}, []int{0, 0}, b, true}, // draws a, then b (0 → skips a)
		{"more memory wins, drawn first", []forward.Candidate{a, b}, []int{1, 0}, b, true},
		{"memory tie: more CPU wins", []forward.Candidate{a, b, c}, []int{1, 1}, c, true}, // b, then c
		{"full tie: first drawn", []forward.Candidate{a, b, c, d}, []int{3, 2}, d, true},  // d, then c
		{"full tie: first drawn, other order", []forward.Candidate{a, b, c, d}, []int{2, 2}, c, true},
		{"never the same twice", []forward.Candidate{a, b, c}, []int{0, 0}, b, true}, // a, then b
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := forward.PowerOfTwo(tc.cands, draws(t, tc.draws...))
			if ok != tc.ok {
				t.Errorf("ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("choice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPowerOfTwo_Distinct: over every pair of draws, the two candidates
// compared are distinct, so the emptiest of n>1 nodes is never chosen
// when it is not drawn and the fullest never wins.
func TestPowerOfTwo_Distinct(t *testing.T) {
	cands := []forward.Candidate{{Node: "n0", FreeMemoryMB: 0}, {Node: "n1", FreeMemoryMB: 1}, {Node: "n2", FreeMemoryMB: 2}}
	for i := range 3 {
		for j := range 2 {
			got, _ := forward.PowerOfTwo(cands, draws(t, i, j))
			if got.Node == "n0" {
				t.Errorf("draws (%d, %d) chose the fullest node", i, j)
			}
		}
	}
	// With the default source it still never picks the fullest of two.
	for range 100 {
		if got, _ := forward.PowerOfTwo(cands[:2], nil); got.Node != "n1" {
			t.Fatalf("PowerOfTwo of two = %s, want n1", got.Node)
		}
	}
}
