package service

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

// A cluster's listing pages through the merge of every node's pages
// exactly: in both orders and at every page size, paging from token to
// token yields every sandbox once, in the listing's order, whichever node
// has it and however creation times collide; a sandbox two nodes list
// (a failed-over one whose old node still has it) is listed once.
func TestMergePages_PagesThroughTheClusterExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.UnixMilli(1_700_000_000_000)
	for round := range 200 {
		nodes := make([][]Sandbox, 1+rng.IntN(4))
		var all []Sandbox
		for i := range rng.IntN(40) {
			sb := Sandbox{ID: fmt.Sprintf("sb-%04d", rng.IntN(10000)*10+i%10), CreatedAt: base.Add(time.Duration(rng.IntN(8)) * time.Millisecond)}
			if slices.ContainsFunc(all, func(o Sandbox) bool { return o.ID == sb.ID }) {
				continue
			}
			all = append(all, sb)
			n := rng.IntN(len(nodes))
			nodes[n] = append(nodes[n], sb)
			if rng.IntN(10) == 0 { // also on another node
				nodes[(n+1)%len(nodes)] = append(nodes[(n+1)%len(nodes)], sb)
			}
		}
		desc := rng.IntN(2) == 0
		order := func(a, b Sandbox) int {
			c := cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
			if desc {
				return -c
			}
			return c
		}
		slices.SortFunc(all, order)
		f := ListFilter{Limit: 1 + rng.IntN(7), NewestFirst: desc}
		limit := store.ListLimit(f.Limit)
		// nodePage is what node n's store answers after pos (nil: from the start).
		nodePage := func(n int, pos *Sandbox) Page {
			rows := slices.Clone(nodes[n])
			slices.SortFunc(rows, order)
			if pos != nil {
				rows = slices.DeleteFunc(rows, func(sb Sandbox) bool { return order(sb, *pos) <= 0 })
			}
			if len(rows) > limit {
				last := rows[limit-1]
				return Page{Items: rows[:limit], Next: store.PageTokenAfter(last.CreatedAt, last.ID)}
			}
			return Page{Items: rows}
		}
		var got []Sandbox
		var pos *Sandbox
		for pages := 0; ; pages++ {
			if pages > len(all)+1 {
				t.Fatalf("round %d: more pages than sandboxes", round)
			}
			var in []Page
			for n := range nodes {
				in = append(in, nodePage(n, pos))
			}
			items, next := mergePages(f, in)
			if len(items) > limit {
				t.Fatalf("round %d: a page of %d, limit %d", round, len(items), limit)
			}
			got = append(got, items...)
			if next == "" {
				break
			}
			last := items[len(items)-1]
			if want := store.PageTokenAfter(last.CreatedAt, last.ID); next != want {
				t.Fatalf("round %d: next %q, want the last row's position %q", round, next, want)
			}
			pos = &last
		}
		if fmt.Sprint(ids(got)) != fmt.Sprint(ids(all)) {
			t.Fatalf("round %d (limit %d, desc %v, %d nodes): paged %v, want %v", round, limit, desc, len(nodes), ids(got), ids(all))
		}
	}
}

func ids(sbs []Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID
	}
	return out
}
