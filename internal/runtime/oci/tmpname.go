package oci

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Temporary entries (a create's sandbox directory before its rename into
// place, an unpack's image directory, a sandbox directory being removed)
// are named tmpName(base): tmpPrefix, base, a random part, then "@" and
// the pid and start time of the process that made them. A sweep removes
// at once what a process that no longer runs left (a daemon killed
// mid-create or mid-removal), so the restarted daemon leaks nothing of
// it, and leaves a live process's alone however many share the
// directory. A name without an owner (an older daemon's) goes by age.

// tmpName is a new temporary name for base, owned by this process.
func tmpName(base string) string {
	return tmpPrefix + base + "-" + randHex(4) + "@" + selfTag()
}

// selfTag is this process's pid and start time, as tmpName records them.
var selfTag = sync.OnceValue(func() string {
	pid := os.Getpid()
	start, _, _ := procStat(pid)
	return strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10)
})

// tmpOwnerGone reports whether the process that made the temporary
// entry name runs no more (its pid is gone, a zombie, or another process
// with another start time). False when the name records no owner.
func tmpOwnerGone(name string) bool {
	_, tag, ok := strings.Cut(name, "@")
	if !ok {
		return false
	}
	pidText, startText, ok := strings.Cut(tag, ".")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	want, err := strconv.ParseUint(startText, 10, 64)
	if err != nil {
		return false
	}
	start, state, err := procStat(pid)
	return err != nil || start != want || state == 'Z' || state == 'X'
}

// tmpBase is the base the temporary entry name was made for.
func tmpBase(name string) string {
	rest := strings.TrimPrefix(name, tmpPrefix)
	rest, _, _ = strings.Cut(rest, "@")
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		rest = rest[:i]
	}
	return rest
}
