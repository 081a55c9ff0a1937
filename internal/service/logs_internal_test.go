package service

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// A tenant that stops many sandboxes evicts its own snapshots first: the
// others' stay while it holds the most.
func TestStoppedLogs_AnOwnerEvictsItsOwnFirst(t *testing.T) {
	var k stoppedLogs
	k.put("b-1", "bob", []LogLine{{Text: "bob's"}})
	k.put("c-1", "carol", []LogLine{{Text: "carol's"}})
	for i := range 3 * maxStoppedLogs {
		k.put(fmt.Sprintf("m-%d", i), "mallory", []LogLine{{Text: "spam"}})
	}
	if got := k.get("b-1"); len(got) != 1 || got[0].Text != "bob's" {
		t.Errorf("bob's snapshot after mallory's stops: %v", got)
	}
	if got := k.get("c-1"); len(got) != 1 {
		t.Errorf("carol's snapshot after mallory's stops: %v", got)
	}
	if got := k.get(fmt.Sprintf("m-%d", 3*maxStoppedLogs-1)); len(got) != 1 {
		t.Errorf("mallory's newest snapshot is gone")
	}
	if got := k.get("m-0"); got != nil {
		t.Errorf("mallory's oldest snapshot is kept: %v", got)
	}
	if n := len(k.m); n != maxStoppedLogs {
		t.Errorf("%d snapshots kept, want %d", n, maxStoppedLogs)
	}
	k.drop("b-1")
	if got := k.get("b-1"); got != nil {
		t.Errorf("dropped snapshot: %v", got)
	}
}

func TestEmitKept_SinceAndTail(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var lines []LogLine
	for i := range 600 {
		lines = append(lines, LogLine{Time: base.Add(time.Duration(i) * time.Second), Text: fmt.Sprint(i)})
	}
	read := func(q LogQuery) (string, int) {
		var out []string
		batches := 0
		if err := emitKept(lines, q, func(ls []LogLine) error {
			batches++
			for _, l := range ls {
				out = append(out, l.Text)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, " "), batches
	}
	if got, batches := read(LogQuery{}); !strings.HasPrefix(got, "0 1 2") || !strings.HasSuffix(got, "598 599") || batches != 3 {
		t.Errorf("all: %d batches, %.20q…", batches, got)
	}
	if got, _ := read(LogQuery{Tail: 2}); got != "598 599" {
		t.Errorf("tail 2: %q", got)
	}
	if got, _ := read(LogQuery{Since: base.Add(597 * time.Second)}); got != "597 598 599" {
		t.Errorf("since: %q", got)
	}
	if got, _ := read(LogQuery{Since: base.Add(597 * time.Second), Tail: 1}); got != "599" {
		t.Errorf("since and tail 1: %q", got)
	}
}

func TestNewestWithin(t *testing.T) {
	lines := []LogLine{{Text: "aaaa"}, {Text: "bb"}, {Text: "cc"}, {Text: ""}}
	for _, c := range []struct {
		max  int
		want int
	}{{0, 1}, {2, 2}, {3, 2}, {4, 3}, {8, 4}, {100, 4}} {
		if got := newestWithin(lines, c.max); len(got) != c.want {
			t.Errorf("newestWithin(%d): %d lines, want %d", c.max, len(got), c.want)
		}
	}
	// A source counts as much as a text.
	lines = []LogLine{{Source: "pid-1", Text: "aaaa"}, {Source: "pid-2", Text: "bb"}}
	if got := newestWithin(lines, 8); len(got) != 1 || got[0].Text != "bb" {
		t.Errorf("newestWithin(8) of sourced lines: %+v; want the last", got)
	}
}

// TestNewestWithin_RetainsItsBudget: what a stopped sandbox's snapshot
// keeps of a hostile agent's largest answer (10,000 lines, 4 MiB of text,
// each time with a zone of its own) is about its budget: the lines left
// out, their array and the zones are not kept alive (they were: 3.5
// times the budget), sources count in the budget.
func TestNewestWithin_RetainsItsBudget(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var lines []LogLine
	for b := 0; b < 10000; b += agent.LogBatch {
		var batch []agent.LogLine
		for i := b; i < min(b+agent.LogBatch, 10000); i++ {
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600+i))
			batch = append(batch, agent.LogLine{Seq: uint64(i), Time: at, Source: fmt.Sprintf("pid-%d", 1000000000+i%3), Stream: "stdout", Text: strings.Repeat("x", 419)})
		}
		lines = append(lines, fromAgentLines(batch)...)
	}
	kept := newestWithin(lines, stoppedLogBytes)
	lines = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	n, zoned := 0, 0
	for _, l := range kept {
		n += len(l.Text) + len(l.Source)
		if l.Time.Location() != time.UTC {
			zoned++
		}
	}
	if zoned > 0 {
		t.Errorf("%d kept times have a zone; want all in UTC", zoned)
	}
	if n > stoppedLogBytes {
		t.Errorf("kept %d bytes of text and sources; want at most %d", n, stoppedLogBytes)
	}
	retained := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if limit := int64(stoppedLogBytes) * 3 / 2; retained > limit {
		t.Errorf("the snapshot retains %d KiB; want at most %d KiB", retained>>10, limit>>10)
	}
	runtime.KeepAlive(kept)
}
