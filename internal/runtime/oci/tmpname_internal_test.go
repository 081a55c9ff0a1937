package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSweepTmp_RemovesADeadProcesssEntriesAtOnce: a temporary entry made
// by a process that runs no more (a daemon killed mid-create) is swept
// however young; one of a live process (this one) stays, and so does a
// young one that names no owner (an older daemon's: it goes by age).
func TestSweepTmp_RemovesADeadProcesssEntriesAtOnce(t *testing.T) {
	const id = "sb-0123456789abcdef"
	mine := tmpName(id)
	if got := tmpBase(mine); got != id {
		t.Errorf("tmpBase(%q) = %q, want %q", mine, got, id)
	}
	if tmpOwnerGone(mine) {
		t.Errorf("tmpOwnerGone(%q): this process runs", mine)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// The pid of an exited (and reaped) process, with a start time no
	// process has: gone, and a reused pid would not match either.
	deads := tmpPrefix + id + "-0badf00d@" + strconv.Itoa(dead.Process.Pid) + ".1"
	if !tmpOwnerGone(deads) {
		t.Errorf("tmpOwnerGone(%q) = false, want true", deads)
	}
	if got := tmpBase(deads); got != id {
		t.Errorf("tmpBase(%q) = %q, want %q", deads, got, id)
	}
	ownerless := tmpPrefix + id + "-0badf00d"

	dir := t.TempDir()
	for _, name := range []string{mine, deads, ownerless} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepTmp(dir, time.Hour, os.RemoveAll)
	for name, want := range map[string]bool{mine: true, deads: false, ownerless: true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("after the sweep, %s exists: %v; want %v", name, err == nil, want)
		}
	}
}
