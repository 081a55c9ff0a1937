package filesystem

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

func TestPoller_BufferKeepsNewest(t *testing.T) {
	const max = 20
	ps := newPollers(1, time.Hour, max)
	p, err := ps.add(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer ps.closeAll()
	for i := range 100 {
		p.push(&rpc.FilesystemEvent{Name: fmt.Sprint(i)})
	}
	events, dropped, err := ps.drain(p.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) > max || len(events)+dropped != 100 {
		t.Errorf("kept %d, dropped %d; want at most %d kept and 100 in all", len(events), dropped, max)
	}
	if got := events[len(events)-1].GetName(); got != "99" {
		t.Errorf("newest kept event %q, want 99", got)
	}
	for i := 1; i < len(events); i++ {
		if diff := cmp.Diff(fmt.Sprint(100-len(events)+i), events[i].GetName()); diff != "" {
			t.Errorf("event %d out of order: %s", i, diff)
		}
	}
	if events, dropped, _ := ps.drain(p.id); len(events) != 0 || dropped != 0 {
		t.Errorf("second drain: %d events, %d dropped", len(events), dropped)
	}
}

func TestPollers_FailedWatcherReportsErrorAfterEvents(t *testing.T) {
	ps := newPollers(1, time.Hour, 10)
	p, _ := ps.add(t.Context())
	p.push(&rpc.FilesystemEvent{Name: "last"})
	p.finish(fmt.Errorf("inotify overflow"))
	if events, _, err := ps.drain(p.id); err != nil || len(events) != 1 {
		t.Fatalf("first drain: %v, %v; want the buffered event", events, err)
	}
	if _, _, err := ps.drain(p.id); err == nil {
		t.Fatal("second drain: no error")
	}
	if _, _, err := ps.drain(p.id); err == nil {
		t.Fatal("failed watcher still registered")
	}
}
