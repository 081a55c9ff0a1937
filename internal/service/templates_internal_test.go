package service

import (
	"bytes"
	"strings"
	"testing"
)

// A build's output past its bound ends with a note saying so, and nothing
// after it is kept.
func TestBuildLog_TruncatesWithANote(t *testing.T) {
	var l buildLogs
	log := l.open("tpl-x")
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 20 { // 1.25 MiB
		log.write(chunk)
	}
	log.printf("after the bound\n")
	b, _, _ := log.since(0)
	if len(b) > maxBuildLogBytes || !strings.HasSuffix(string(b), truncatedNote) {
		t.Errorf("the log is %d bytes and ends %q; want at most %d ending with the note", len(b), b[max(0, len(b)-60):], maxBuildLogBytes)
	}
	l.drop("tpl-x")
	if l.get("tpl-x") != nil {
		t.Error("a dropped log is still there")
	}
}

func TestMergeEnvList(t *testing.T) {
	got := mergeEnvList([]string{"PATH=/bin", "A=1", "B=2"}, map[string]string{"A": "", "C": "3"})
	if want := "PATH=/bin B=2 A= C=3"; strings.Join(got, " ") != want {
		t.Errorf("mergeEnvList = %q, want %q", got, want)
	}
}
