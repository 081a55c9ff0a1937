package builds_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service/builds"
)

// A build's output past its bound ends with a note saying so, and nothing
// after it is kept.
func TestBuildLog_TruncatesWithANote(t *testing.T) {
	var l builds.Builds
	log := l.Open("tpl-x")
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 20 { // 1.25 MiB
		log.Write(chunk)
	}
	log.Printf("after the bound\n")
	b, _, _ := log.Since(0)
	if len(b) > builds.MaxLogBytes || !strings.HasSuffix(string(b), builds.TruncatedNote) {
		t.Errorf("the log is %d bytes and ends %q; want at most %d ending with the note", len(b), b[max(0, len(b)-60):], builds.MaxLogBytes)
	}
	l.Drop("tpl-x")
	if l.Get("tpl-x") != nil {
		t.Error("a dropped log is still there")
	}
}

// An owner gets MaxPerOwner slots and MaxQueuedPerOwner places in line;
// past both it is refused, and a slot given up lets the next one run.
func TestPlaces_BoundedPerOwner(t *testing.T) {
	var b builds.Builds
	ctx := t.Context()
	var places []*builds.Place
	for range builds.MaxPerOwner + builds.MaxQueuedPerOwner {
		p, err := b.Enqueue("alice")
		if err != nil {
			t.Fatalf("enqueue %d: %v", len(places), err)
		}
		places = append(places, p)
	}
	var tm *builds.TooManyError
	if _, err := b.Enqueue("alice"); !errors.As(err, &tm) {
		t.Fatalf("enqueue past the bound: %v, want TooManyError", err)
	}
	log := b.Open("tpl-wait")
	for i := range builds.MaxPerOwner {
		if err := places[i].Wait(ctx, log); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	next := places[builds.MaxPerOwner]
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := next.Wait(short, log); err == nil {
		t.Fatal("a third build of the owner got a slot")
	}
	if out, _, _ := log.Since(0); !strings.Contains(string(out), "waiting for a build slot") {
		t.Errorf("the waiting build's log says %q", out)
	}
	places[0].Cancel()
	places[0].Cancel() // once
	if err := next.Wait(ctx, log); err != nil {
		t.Fatalf("after a slot was given up: %v", err)
	}
	// Another owner is not held by alice's line, only by the host's slots.
	bob, err := b.Enqueue("bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.Wait(ctx, log); err != nil {
		t.Fatalf("bob: %v", err)
	}
}
