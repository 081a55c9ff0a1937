package forward

import "math/rand/v2"

// Candidate is a live node a create may go to, with its free headroom.
type Candidate struct {
	Node, URL    string
	FreeMilliCPU int64
	FreeMemoryMB int64
}

// PowerOfTwo picks a node by the power of two choices: two distinct
// candidates drawn at random, the one with more free memory winning, then
// the one with more free CPU, then the first drawn. One candidate is
// chosen as is; none is ok=false. rnd(n) returns a uniform int in [0, n);
// nil is math/rand/v2's IntN. It does not filter: a caller drops the
// candidates with no room for the ask first.
//
// Two random choices spread load almost as well as always taking the
// emptiest node, without every node sending its creates to the same one
// between two headroom updates.
func PowerOfTwo(cands []Candidate, rnd func(n int) int) (Candidate, bool) {
	switch len(cands) {
	case 0:
		return Candidate{}, false
	case 1:
		return cands[0], true
	}
	if rnd == nil {
		rnd = rand.IntN
	}
	i := rnd(len(cands))
	j := rnd(len(cands) - 1)
	if j >= i {
		j++ // distinct from i, still uniform over the others
	}
	a, b := cands[i], cands[j]
	if b.FreeMemoryMB > a.FreeMemoryMB || b.FreeMemoryMB == a.FreeMemoryMB && b.FreeMilliCPU > a.FreeMilliCPU {
		return b, true
	}
	return a, true
}
